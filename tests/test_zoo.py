"""Your own BERT as people really write it: the zoo under tests/zoo/, written in the
styles public from-scratch BERTs use (torch's TransformerEncoder, raw parameters in functional
code, fused qkv and Wqkv, ModuleDicts, a LayerNorm by hand with a_2/b_2, LinearActivation, a
mask the model makes itself, lengths for a mask, forward(x, seg, mask), a config dataclass of
its own, lazy modules, a package with relative imports, heads with a tied decoder, a classifier,
QA, a tagger). Each that computes BERT is inferred, converted into and verified on the real
all-MiniLM-L6-v2; each that does not is refused, saying where and why."""

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import bertconv
from bertconv.verify import FLOAT32_MAX_ABS, verify
from bertconv.yours import fence
from bertconv.yours import harness as usermodel

ZOO = Path(__file__).parent / "zoo"

# spec -> the rows verify compares on MiniLM (a BertModel with its pooler, no head)
COMPUTES_BERT = {
    "torch_encoder.py:TorchEncoderBert": "pooler",
    "functional.py:FunctionalBert": "pooler",
    "annotated.py:AnnotatedBert": "pooler",
    "moduledict.py:DictBert": "pooler",
    "lengths.py:BERTModel": "pooler",
    "dataclass_config.py:make": "pooler",
    "official_names.py:OfficialNamesBert": "pooler",
    "task_heads.py:SentenceClassifier": "pooler",
    "task_heads.py:SpanExtractor": None,
    "task_heads.py:Tagger": None,
    "pkgbert/model.py:PkgBert": None,
    "not_bert.py:PostLNBert": "pooler",
    "sequential.py:SeqBert": None,
}


def spec(name: str) -> str:
    return f"{ZOO / name}"


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    """A table inferred for each model of the zoo that computes BERT, as `bertconv infer --out`
    writes it."""
    from bertconv.cli import run

    root = tmp_path_factory.mktemp("zoo-tables")
    out = {}
    for i, name in enumerate(COMPUTES_BERT):
        out[name] = root / f"{i}.toml"
        assert run(["infer", spec(name), "--out", str(out[name])]) == 0, name
    return out


@pytest.mark.parametrize("name", COMPUTES_BERT)
def test_each_bert_of_the_zoo_is_inferred_converted_and_verified_on_minilm(
    name, tables, minilm, tmp_path, cli
):
    code, _, err = cli("convert", minilm, "--to", tables[name], "--out", tmp_path / "out")
    assert code == 0, err
    code, out, err = cli("verify", minilm, "--model", spec(name), "--layout", tables[name])
    assert code == 0 and "PASSED" in out, out + err
    rows = [line.split()[0] for line in out.splitlines()[2:] if line.split()[-1] == "ok"]
    layers = [r for r in rows if r == "layer"]
    assert rows[0] == "embeddings" and len(layers) == 6
    assert ("pooler" in rows) == (COMPUTES_BERT[name] == "pooler")


def test_a_converted_file_loads_into_the_users_class_strictly(tables, minilm, tmp_path, cli):
    """The functional model: every tensor in one ParameterDict, stored (in, out)."""
    name = "functional.py:FunctionalBert"
    assert cli("convert", minilm, "--to", tables[name], "--out", tmp_path / "o")[0] == 0
    config_dict = json.loads((minilm / "config.json").read_text())
    config = usermodel.config_object(config_dict, bertconv.BertConfig.from_dict(config_dict))
    model = fence.import_factory(spec(name))(config)
    model.load_state_dict(load_file(tmp_path / "o" / "model.safetensors"), strict=True)


def test_names_of_a_shipped_layout_need_no_table(minilm):
    """A model under transformers' own names, with activation modules: its table is found by
    its names, and its pooler's own tanh is read, never a second one."""
    report = verify(str(minilm), "cpu", model=spec("official_names.py:OfficialNamesBert"))
    assert report.passed and [r.name for r in report.rows[-2:]] == ["pooler", "sentence embedding"]
    assert all(r.max_abs <= FLOAT32_MAX_ABS for r in report.rows)


def test_heads_with_a_tied_decoder_are_inferred_and_verified(tables, checkpoints):
    """The pre-training model: a masked-LM head whose decoder is the word embeddings, and NSP.
    Its table ties the decoder; on a pre-training checkpoint both heads are compared."""
    name = "dataclass_config.py:make"
    text = tables[name].read_text()
    assert "[groups.mlm]" in text and "[groups.nsp]" in text
    assert '"decoder.weight" = "word.weight"' in text
    report = verify(
        str(checkpoints["pretraining"]), "cpu", model=spec(name), model_layout=str(tables[name])
    )
    names = [r.name for r in report.rows]
    assert report.passed and "mlm logits" in names and "nsp logits" in names, report.rows


def test_heads_the_checkpoint_lacks_are_compared_with_seeded_weights(tables, minilm):
    """MiniLM has no head: the model's masked-LM and NSP heads are given the same seeded weights
    as transformers' BertForPreTraining's, and compared, the note saying so."""
    name = "dataclass_config.py:make"
    report = verify(str(minilm), "cpu", model=spec(name), model_layout=str(tables[name]))
    assert report.passed
    seeded = [n for n in report.notes if "the checkpoint has none: compared with seeded" in n]
    assert [n.split(":")[0] for n in seeded] == ["mlm", "nsp"], report.notes
    assert {"mlm logits", "nsp logits"} <= {r.name for r in report.rows}


@pytest.fixture(scope="module")
def classifier_checkpoint(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertForSequenceClassification

    from conftest import TINY, VOCAB

    torch.manual_seed(3)
    path = tmp_path_factory.mktemp("classifier")
    BertForSequenceClassification(BertConfig(**TINY, num_labels=5)).eval().save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return path


def test_a_classifier_that_returns_only_logits_is_compared_pooler_and_all(
    tables, classifier_checkpoint
):
    name = "task_heads.py:SentenceClassifier"
    report = verify(
        str(classifier_checkpoint), "cpu", model=spec(name), model_layout=str(tables[name])
    )
    names = [r.name for r in report.rows]
    assert report.passed and names[-2:] == ["pooler", "classifier logits"], report.rows


def test_a_pooler_without_its_tanh_fails_verify_and_is_refused_by_infer(tables, minilm, cli):
    """Its names are PostLNBert's, so PostLNBert's table fits it: every layer agrees, and the
    pooler, which bertconv never completes with a tanh of its own, does not."""
    table = tables["not_bert.py:PostLNBert"]
    code, out, err = cli(
        "verify", minilm, "--model", spec("not_bert.py:NoTanhPoolerBert"), "--layout", table
    )
    assert code == 1 and "FAILED" in out, out + err
    pooler = next(line for line in out.splitlines() if line.startswith("pooler"))
    assert pooler.endswith("FAIL")
    assert all(line.endswith("ok") for line in out.splitlines() if line.startswith("layer"))
    code, _, err = cli("infer", spec("not_bert.py:NoTanhPoolerBert"))
    assert code == 1 and "diverges at pooler" in err and "tanh" in err


def test_a_model_skipping_a_layer_fails_at_that_layer_blamed(tables, minilm, cli):
    """Its names are PostLNBert's, so the table is its own: layer 6 fails, the model skipping it."""
    table = tables["not_bert.py:PostLNBert"]
    model = spec("not_bert.py:SkipsLastLayerBert")
    code, out, err = cli("verify", minilm, "--model", model, "--layout", table)
    rows = {line.split()[0] + line.split()[1]: line for line in out.splitlines() if "  " in line}
    assert code == 1 and rows["layer6"].endswith("FAIL") and rows["layer5"].endswith("ok"), out
    assert "never uses its tensors blocks.5." in out and "skips it" in out, out
    assert "not this model's" not in out + err


def test_a_table_with_query_and_key_exchanged_is_blamed_not_the_model(
    tables, minilm, cli, tmp_path
):
    text = tables["not_bert.py:PostLNBert"].read_text()
    swapped = tmp_path / "swapped.toml"
    swapped.write_text(text.replace(".q.", ".TMP.").replace(".k.", ".q.").replace(".TMP.", ".k."))
    model = spec("not_bert.py:PostLNBert")
    code, out, err = cli("verify", minilm, "--model", model, "--layout", swapped)
    assert code == 1 and "The table gives blocks.0.k.weight BERT's query weights" in out, out
    assert "Your model computes" not in out


@pytest.mark.parametrize(
    "name, reason",
    [
        ("not_bert.py:PreLNBert", "matches embeddings and diverges at layer 1"),
        ("not_bert.py:AlibiBert", "no tensor for the position embeddings (a (29, 24) table)"),
        ("not_bert.py:FinalNormPreLNBert", "computes the LayerNorm before the sublayer (pre-LN)"),
        ("not_bert.py:PositionsAfterNormBert", "the position embeddings added after the LayerNorm"),
        ("not_bert.py:TypesAfterNormBert", "the token type embeddings added after the LayerNorm"),
        ("not_bert.py:LooseEpsMaskedLMBert", "computes LayerNorm eps 1e-05"),
        ("not_bert.py:SkipsLastLayerBert", "never uses its tensors blocks.2.fc1.bias"),
    ],
)
def test_what_does_not_compute_bert_is_refused_with_a_reason(name, reason, cli):
    code, _, err = cli("infer", spec(name))
    assert code == 1 and reason in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "name, message",
    [
        (
            "broken.py:ShapeBound",
            "running its forward, the model's code raised ValueError: expected 128 tokens",
        ),
        ("broken.py:NeedsMaskedPositions", "needs 'masked_weights', which bertconv cannot"),
        ("exits_on_import.py:Bert", "the model's code called sys.exit(2)"),
    ],
)
def test_the_users_code_failing_is_reported_as_theirs(name, message, minilm, cli):
    commands = [["infer", spec(name)], ["verify", minilm, "--model", spec(name)]]
    for command in commands[:1] if "ShapeBound" in name else commands:
        code, out, err = cli(*command)
        assert code == 2 and message in err and "Traceback" not in err, err
        assert "PASSED" not in out and "internal error" not in err
    if "raised" in message:
        assert f"(at {ZOO / 'broken.py'}:15, in forward)" in err  # where in their code


def test_the_model_file_is_imported_as_python_would(tables):
    """Self-lookups in sys.modules, a dataclass under `from __future__ import annotations`, a
    neighbour imported by its plain name, a package's relative imports: all need the module
    registered while it runs and its directory importable."""
    for name in ("lengths.py:BERTModel", "dataclass_config.py:make", "pkgbert/model.py:PkgBert"):
        factory = fence.import_factory(spec(name))
        assert sys.modules[factory.__module__].__file__ == str(ZOO / name.split(":")[0])
    assert sys.modules["pkgbert.model"].Layer is sys.modules["pkgbert.layers"].Layer


IDS, MASK, TYPES = "input_ids", "attention_mask", "token_type_ids"
PLANS = {
    "functional.py:FunctionalBert": {"x": IDS, "seg": TYPES, "mask": MASK},
    "moduledict.py:DictBert": {IDS: IDS, TYPES: TYPES},
    "lengths.py:BERTModel": {"tokens": IDS, "segments": TYPES, "valid_lens": "lengths"},
    "pkgbert/model.py:PkgBert": {"src": IDS, "src_mask": MASK, "tt_ids": TYPES},
    "dataclass_config.py:make": {IDS: IDS, "segment_ids": TYPES, "input_mask": MASK},
}
SMALL = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=20)  # fmt: skip


@pytest.mark.parametrize("name", PLANS)
def test_any_forward_is_called_by_name_then_by_elimination(name):
    config = usermodel.config_object({}, bertconv.BertConfig(**SMALL))
    model = usermodel.construct(fence.import_factory(spec(name)), name, config)
    assert usermodel.plan(model, name).arguments == PLANS[name]


def test_a_model_that_makes_its_own_mask_sees_padding_of_its_pad_id():
    """DictBert takes no mask: its padded batch carries the pad id at the padding, and no real
    token is the pad id, so the mask it makes is the batch's."""
    config = usermodel.config_object({}, bertconv.BertConfig(vocab_size=5, pad_token_id=3))
    factory = fence.import_factory(spec("moduledict.py:DictBert"))
    model = usermodel.construct(factory, "m", config)
    harness = usermodel.Harness(model, "m", usermodel.plan(model, "m"), 3, 5)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    batch = harness.prepare(
        {"input_ids": torch.full((2, 4), 3), "attention_mask": mask, "token_type_ids": mask * 0}
    )
    assert torch.equal(batch["input_ids"] != 3, mask.bool())


def test_the_closest_candidate_is_the_one_with_more_agreeing_outputs_then_the_smaller_error():
    from bertconv.yours.infer import closeness

    near = {"embeddings": 0.0, "layer 1": 2e-3}
    far = {"embeddings": 0.0, "layer 1": 5.0}
    further = {"embeddings": 1.0, "layer 1": 0.0}
    assert closeness(near) > closeness(far) > closeness(further) > closeness(None)
    assert closeness(far) > closeness({"embeddings": 0.0, "layer 1": float("nan")})


def test_masks_of_other_things_are_not_the_attention_mask():
    from bertconv.yours.harness import _by_name

    assert _by_name(["x", "head_mask", "encoder_attention_mask"]) == {"x": "input_ids"}
    assert _by_name(["src", "src_key_padding_mask", "causal_mask"]) == {
        "src": "input_ids",
        "src_key_padding_mask": "attention_mask",
    }


def test_a_model_file_that_exits_on_import_compares_nothing(checkpoints, cli):
    code, out, err = cli(
        "verify", checkpoints["base"], "--model", f"{ZOO / 'exits_on_import.py'}:Bert"
    )
    assert code == 2 and "sys.exit(2)" in err and "PASSED" not in out
