"""Your own ModernBERT or NomicBERT (issue 47): from-scratch ports written as public code
writes them (tests/zoo/modern_ports.py: a fused qkv with rotate-half and a banded window; split
q, k, v with complex rotation and a chunked window; NomicBERT under the Hub's names) PASS verify
--model on tiny checkpoints every parameter of which is moved; each mistake ports make FAILS,
its cause named and confirmed by bertconv's model recomputed that way, or is refused naming the
tensors the checkpoint has none of; a BERT written from scratch is refused."""

from pathlib import Path

import pytest
from test_modern import written

from bertconv.verify import verify

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "NomicBertModel"):
    pytest.skip(
        "transformers has no ModernBERT and NomicBERT classes here", allow_module_level=True
    )

ZOO = Path(__file__).parent / "zoo"
PORTS = f"{ZOO}/modern_ports.py"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("modern-yours")
    names = ("ModernBertModel", "NomicBertModel", "ModernBertForMaskedLM")
    return {c: written(c, root) for c in names}


@pytest.mark.parametrize(
    "factory, table, checkpoint",
    [
        ("modernbert", "modern_port.toml", "ModernBertModel"),
        ("modernbert_complex", "modern_complex_port.toml", "ModernBertModel"),
        ("nomic", None, "NomicBertModel"),  # the Hub's names: recognised without a table
        ("nomic", "transformers", "NomicBertModel"),
    ],
)
def test_ports_written_as_public_code_writes_them_pass(factory, table, checkpoint, checkpoints):
    layout = table and (str(ZOO / table) if table.endswith(".toml") else table)
    report = verify(str(checkpoints[checkpoint]), device="cpu", model=f"{PORTS}:{factory}",
                    model_layout=layout)  # fmt: skip
    assert report.passed, report.rows
    assert report.longest_sequence == 64  # past the window of 6 many times


# mistake -> (the step named, words of the cause); each in the port's code, the checkpoint's
# weights loaded into it by verify
MODERN = {
    "interleaved": ("the rotary positions", "interleaved pairs"),
    "another_base": ("the rotary positions", "base of 10000 in the global layers"),
    "global_base_in_local_layers": ("the rotary positions", "base of 160000 in the local"),
    "window_off_by_one": ("the attention window", "4 tokens either way (one more)"),
    "window_in_every_layer": ("the attention window", "the window in every layer"),
    "gate_and_up_swapped": ("the gated feed-forward", "gate and up halves swapped"),
    "final_norm_missing": ("the final norm", "no final norm"),
}
NOMIC = {
    "gate_and_up_swapped": ("the gated feed-forward", "gate and up halves swapped"),
    "another_base": (
        "the rotary positions",
        "base of 10000 in the layers, where the checkpoint's is 1000",
    ),
}


def _spec(tmp_path, maker: str, mistake: str) -> str:
    module = tmp_path / f"mistaken_{mistake}.py"
    module.write_text(
        f"import sys\nsys.path.insert(0, {str(ZOO)!r})\n"
        f"from modern_ports import {maker}\nmake = {maker}({mistake!r})\n"
    )
    return f"{module}:make"


@pytest.mark.parametrize("mistake", MODERN)
def test_each_modernbert_mistake_fails_named(mistake, checkpoints, tmp_path):
    step, words = MODERN[mistake]
    spec = _spec(tmp_path, "modernbert_mistaken_in_code", mistake)
    report = verify(str(checkpoints["ModernBertModel"]), device="cpu", model=spec,
                    model_layout=str(ZOO / "modern_port.toml"))  # fmt: skip
    assert not report.passed
    found = report.diagnosis
    assert found.step == step and words in found.cause, found.message()
    assert found.confirmed_max_abs <= 1e-5 < found.max_abs


@pytest.mark.parametrize("mistake", NOMIC)
def test_each_nomic_mistake_fails_named(mistake, checkpoints, tmp_path):
    step, words = NOMIC[mistake]
    spec = _spec(tmp_path, "nomic_mistaken_in_code", mistake)
    report = verify(str(checkpoints["NomicBertModel"]), device="cpu", model=spec)
    assert not report.passed
    found = report.diagnosis
    assert found.step == step and words in found.cause, found.message()


@pytest.mark.parametrize(
    "maker, mistake, checkpoint, table, said",
    [
        ("modernbert_mistaken_in_code", "bias_added", "ModernBertModel", "modern_port.toml",
         "blocks.0.qkv.bias"),
        ("modernbert_mistaken_in_code", "first_attention_norm_twice", "ModernBertModel",
         "modern_port.toml", "norms the embeddings twice"),
        ("nomic_mistaken_in_code", "bias_added", "NomicBertModel", None,
         "encoder.layers.0.attn.Wqkv.bias"),
    ],
)  # fmt: skip
def test_a_tensor_the_checkpoint_has_none_of_is_refused_named(
    maker, mistake, checkpoint, table, said, checkpoints, tmp_path, cli
):
    args = ["--layout", str(ZOO / table)] if table else []
    spec = _spec(tmp_path, maker, mistake)
    code, _, err = cli("verify", checkpoints[checkpoint], "--model", spec, *args, "--device", "cpu")
    assert code == 4 and said in err and "the checkpoint has none of" in err, err


def test_a_bert_written_from_scratch_is_refused_on_a_modernbert(checkpoints, cli):
    spec = f"{ZOO}/official_names.py:OfficialNamesBert"
    for checkpoint in checkpoints.values():
        code, out, err = cli("verify", checkpoint, "--model", spec, "--device", "cpu")
        assert code in (1, 4) and "PASSED" not in out, (out, err)


PORTS_OF = {
    "modernbert": "ModernBertModel",
    "modernbert_complex": "ModernBertModel",
    "nomic": "NomicBertModel",
}


@pytest.mark.parametrize("factory", PORTS_OF)
def test_infer_finds_each_ports_table_and_the_converted_weights_load_strictly(
    factory, checkpoints, tmp_path, cli
):
    """infer, convert --to the table, load strictly into the port: it computes the checkpoint
    (transformers' last hidden state) on a batch padded on the right past the window."""
    import json

    import torch
    from safetensors.torch import load_file

    source = checkpoints[PORTS_OF[factory]]
    table, out = tmp_path / "port.toml", tmp_path / "converted"
    code, _, err = cli("infer", f"{PORTS}:{factory}", "--config", source / "config.json",
                       "--out", table)  # fmt: skip
    assert code == 0, err
    assert cli("convert", source, "--to", table, "--out", out)[0] == 0
    import modern_ports

    port = getattr(modern_ports, factory)(json.loads((source / "config.json").read_text()))
    port.load_state_dict(load_file(out / "model.safetensors"), strict=True)
    theirs = transformers.AutoModel.from_pretrained(source).eval()
    ids = torch.randint(5, 99, (2, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    with torch.no_grad():
        got = port.eval()(ids, mask)
        expected = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
    assert (got - expected)[mask.bool()].abs().max() <= 1e-5
    report = verify(str(source), device="cpu", model=f"{PORTS}:{factory}", model_layout=str(table))
    assert report.passed, report.rows


@pytest.mark.parametrize(
    "mistake, words",
    [
        ("window_off_by_one", "4 tokens either way"),
        ("interleaved", "interleaved pairs"),
        ("final_norm_missing", "no final norm"),
        ("first_attention_norm_twice", "the embeddings' norm applied again"),
        ("final_norm_removed", "the final one after the last layer"),
    ],
)
def test_infer_names_the_mistake_no_table_can_mend(mistake, words, checkpoints, tmp_path, cli):
    spec = _spec(tmp_path, "modernbert_mistaken_in_code", mistake)
    config = checkpoints["ModernBertModel"] / "config.json"
    code, _, err = cli("infer", spec, "--config", config, "--out", tmp_path / "t.toml")
    assert code != 0 and words in err and not (tmp_path / "t.toml").exists(), err


def test_infer_refuses_biases_the_checkpoint_has_none_of(checkpoints, tmp_path, cli):
    spec = _spec(tmp_path, "modernbert_mistaken_in_code", "bias_added")
    config = checkpoints["ModernBertModel"] / "config.json"
    code, _, err = cli("infer", spec, "--config", config, "--out", tmp_path / "t.toml")
    assert code != 0 and "blocks.{layer}.qkv.bias" in err and "bias=False" in err, err


def test_a_swapped_gate_in_code_is_a_table_that_stacks_it_the_other_way(checkpoints, tmp_path, cli):
    """A port that takes the second half of Wi for the activated one computes the checkpoint
    once its table stacks the halves that way: infer finds it, and verify passes with it."""
    spec = _spec(tmp_path, "modernbert_mistaken_in_code", "gate_and_up_swapped")
    source, table = checkpoints["ModernBertModel"], tmp_path / "t.toml"
    code, _, err = cli("infer", spec, "--config", source / "config.json", "--out", table)
    assert code == 0, err
    assert 'Wi_gate.weight", "layers.{layer}.mlp.Wi_input' in table.read_text()
    assert verify(str(source), device="cpu", model=spec, model_layout=str(table)).passed


@pytest.mark.parametrize(
    "factory, checkpoint, groups",
    [
        ("modernbert_mlm", "ModernBertForMaskedLM", ("head", "mlm")),
        (f"{Path(__file__).parent}/zoo/modern_hf.py:masked_lm", "ModernBertForMaskedLM",
         ("head", "mlm")),
        (f"{Path(__file__).parent}/zoo/modern_hf.py:classifier", None, ("head", "classifier")),
    ],
)  # fmt: skip
def test_infer_places_modernberts_heads(factory, checkpoint, groups, checkpoints, tmp_path, cli):
    """ModernBERT's prediction head, then its tied decoder or a classifier: in a port of its
    own, and in transformers' own classes (a port of their code holds their names)."""
    import tomllib

    spec = factory if ":" in factory else f"{PORTS}:{factory}"
    source = (
        checkpoints[checkpoint] if checkpoint
        else written("ModernBertForSequenceClassification", tmp_path)
    )  # fmt: skip
    table = tmp_path / "heads.toml"
    code, _, err = cli("infer", spec, "--config", source / "config.json", "--out", table)
    assert code == 0, err
    assert tuple(tomllib.loads(table.read_text())["groups"]) == groups
    report = verify(str(source), device="cpu", model=spec, model_layout=str(table))
    assert report.passed and any("logits" in r.name for r in report.rows), report.rows


def test_a_port_taking_a_sequence_within_the_window_for_one_that_needs_none_fails(
    checkpoints, tmp_path
):
    """Global attention below the window's width is right on verify's longer batches: a
    sequence just inside the width (tokens farther apart than the window reaches) shows it."""
    spec = _spec(tmp_path, "modernbert_mistaken_in_code", "no_window_when_short")
    report = verify(str(checkpoints["ModernBertModel"]), device="cpu", model=spec,
                    model_layout=str(ZOO / "modern_port.toml"))  # fmt: skip
    assert not report.passed
    assert report.diagnosis.step == "the attention window", report.diagnosis.message()


def test_a_mistake_only_closer_is_never_called_the_cause(checkpoints, tmp_path):
    """A base of 12000: the 10000 recomputed comes closer, but does not give what the port
    computes; no cause is named, the closest said as such."""
    spec = _spec(tmp_path, "modernbert_mistaken_in_code", "base_12000")
    report = verify(str(checkpoints["ModernBertModel"]), device="cpu", model=spec,
                    model_layout=str(ZOO / "modern_port.toml"))  # fmt: skip
    assert not report.passed
    found = report.diagnosis
    assert found.step is None and found.confirmed_max_abs is None, found.message()
    assert "none of the mistakes" in found.message() and "the closest" in found.message()
