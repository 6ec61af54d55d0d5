"""Your own RoBERTa, DistilBERT and ELECTRA, judged as what they are (tests/zoo/family_own.py):
each written as its paper and reference code define it is inferred with its checkpoint's
config.json and verified against the tiny checkpoints transformers writes, and PASSES; each
one-bug variant is refused by infer or FAILS, naming its bug. The table records how the model
holds the weights ([holding]: positions after the pad id, one or no token type row, a type's
own names), and convert writes them so."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_family import DISTILBERT, OWN, SIZES, _moved

ZOO = Path(__file__).parent / "zoo" / "family_own.py"
AFTER_PAD = '"positions" = "after the pad id"'


def model(name: str) -> str:
    return f"{ZOO}:{name}"


@pytest.fixture(scope="module")
def kin(tmp_path_factory) -> dict[str, Path]:
    """Tiny checkpoints of each type, every parameter moved off transformers' initialisation;
    `RobertaZeroTypes`: its token type row zeros, as every converted RoBERTa checkpoint has."""
    import transformers

    root = tmp_path_factory.mktemp("kin")
    distil = transformers.DistilBertConfig(**DISTILBERT)
    made = {
        "RobertaModel": ("RobertaModel", transformers.RobertaConfig(**SIZES)),
        "RobertaZeroTypes": ("RobertaModel", transformers.RobertaConfig(**SIZES)),
        "RobertaForMaskedLM": ("RobertaForMaskedLM", transformers.RobertaConfig(**SIZES)),
        "RobertaForSequenceClassification": (
            "RobertaForSequenceClassification", transformers.RobertaConfig(**SIZES)
        ),
        "DistilBertForMaskedLM": ("DistilBertForMaskedLM", distil),
        "DistilBertModel": ("DistilBertModel", distil),
        "DistilBertForSequenceClassification": ("DistilBertForSequenceClassification", distil),
        "DistilBertOneLayer": ("DistilBertForMaskedLM", transformers.DistilBertConfig(
            **(DISTILBERT | {"n_layers": 1}))),
        "ElectraForPreTraining": (
            "ElectraForPreTraining", transformers.ElectraConfig(**(SIZES | OWN["electra"]))
        ),
    }  # fmt: skip
    out = {}
    for i, (name, (cls, config)) in enumerate(made.items()):
        m = getattr(transformers, cls)(config)
        _moved(m, 40 + i)
        if name == "RobertaZeroTypes":
            with torch.no_grad():
                m.embeddings.token_type_embeddings.weight.zero_()
        m.save_pretrained(root / name)
        out[name] = root / name
    return out


def _inferred(cli, name: str, ckpt: Path, table: Path) -> tuple[int, str]:
    code, _, err = cli("infer", model(name), "--config", ckpt / "config.json", "--out", table)
    return code, err


@pytest.mark.parametrize(
    "name, ckpt, holding",
    [
        ("TorchRoberta", "RobertaZeroTypes", [AFTER_PAD, '"token_types" = 0']),
        ("FusedRoberta", "RobertaModel", [AFTER_PAD, '"token_types" = 1']),
        ("HFRoberta", "RobertaModel", [AFTER_PAD, '"token_types" = 1']),
        ("CopiedRobertaClassifier", "RobertaForSequenceClassification",
         [AFTER_PAD, '"token_types" = 1']),
        ("MaskedLMDistilBert", "DistilBertForMaskedLM", ['"token_types" = 0']),
        ("MaskedLMDistilBert", "DistilBertOneLayer", ['"token_types" = 0']),  # n_layers 1 as 2
        ("TinyDistil", "DistilBertModel", ['"token_types" = 0']),
        ("DistilBertClassifier", "DistilBertForSequenceClassification", ['"names" = "distilbert"']),
        ("ElectraDiscriminator", "ElectraForPreTraining", ['"names" = "electra"']),
    ],
)  # fmt: skip
def test_each_type_written_as_its_paper_defines_it_passes(name, ckpt, holding, kin, cli, tmp_path):
    """Inferred with the checkpoint's config.json and verified with the table, on right- and
    left-padded batches alike (no note: it counts positions as its type does)."""
    table = tmp_path / "t.toml"
    code, err = _inferred(cli, name, kin[ckpt], table)
    assert code == 0, err
    text = table.read_text()
    assert all(line in text for line in holding), text
    code, out, err = cli("verify", kin[ckpt], "--model", model(name), "--layout", table)
    assert code == 0 and "PASSED" in out, out + err
    assert "left-padded" not in out, out
    heads = {"MaskedLMDistilBert": "mlm logits", "ElectraDiscriminator": "discriminator logits",
             "DistilBertClassifier": "classifier logits",
             "CopiedRobertaClassifier": "classifier logits"}  # fmt: skip
    if name in heads:  # compared as its type's own head, not left out
        assert any(line.startswith(heads[name]) for line in out.splitlines()), out


@pytest.mark.parametrize(
    "name, ckpt, said",
    [
        ("TorchRobertaNoPadOffset", "RobertaZeroTypes", "counted from 1"),
        ("FixedScaleRoberta", "RobertaModel", "the attention's scaling"),
        ("DistilBertFixedEps", "DistilBertForMaskedLM", "LayerNorm eps 1e-05"),
        ("ElectraRelu", "ElectraForPreTraining", "diverges at discriminator logits"),
        ("DistilBertGeluClassifier", "DistilBertForSequenceClassification",
         "diverges at classifier logits"),
    ],
)  # fmt: skip
def test_a_one_bug_variant_is_refused_by_infer_naming_its_bug(name, ckpt, said, kin, cli, tmp_path):
    table = tmp_path / "t.toml"
    code, err = _inferred(cli, name, kin[ckpt], table)
    assert code == 1 and said in err, err
    assert not table.exists()


def test_no_token_type_table_fails_where_the_checkpoints_rows_are_not_zeros(kin, cli, tmp_path):
    """Exact where they are zeros (above); here verify fails naming them, and convert refuses to
    write the weights without them."""
    table = tmp_path / "t.toml"
    assert _inferred(cli, "TorchRoberta", kin["RobertaZeroTypes"], table)[0] == 0
    code, out, err = cli(
        "verify", kin["RobertaModel"], "--model", model("TorchRoberta"), "--layout", table
    )
    assert code == 1 and "FAILED" in out, out + err
    assert "your model has no token type embeddings, and the checkpoint's are not zero" in out
    eps = model("TorchRobertaEps")  # a step that differs is named first, not the token types
    code, out, err = cli("verify", kin["RobertaModel"], "--model", eps, "--layout", table)
    assert code == 1 and "LayerNorm eps 0.001" in out and "no token type embeddings" not in out
    code, _, err = cli("convert", kin["RobertaModel"], "--to", table, "--out", tmp_path / "out")
    assert code == 4 and "no token type embeddings" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name, ckpt, over_padding",
    [("HFRoberta", "RobertaModel", False), ("HFBert", "RobertaModel", True),
     ("HFRobertaForMaskedLM", "RobertaForMaskedLM", False),
     ("HFElectraForPreTraining", "ElectraForPreTraining", False),
     ("MaskedLMDistilBert", "DistilBertForMaskedLM", False)],
)  # fmt: skip
def test_verify_without_a_table_holds_the_model_the_way_it_computes(
    name, ckpt, over_padding, kin, cli
):
    """Under transformers' own names, with no table: built each way (the type's 34 positions
    counted after the pad id, a BERT's 32 from 0), held the way that computes the checkpoint's
    embeddings. A BERT counting from 0 agrees on right padding and FAILS on the batch padded on
    the left, where RoBERTa counts from the first real token: said, and recomputed so. RoBERTa's
    masked LM holds its decoder tied, and its bias under both of transformers' names; ELECTRA's
    discriminator is compared as its own head."""
    code, out, err = cli("verify", kin[ckpt], "--model", model(name))
    assert code == (1 if over_padding else 0), out + err
    head = {"HFRobertaForMaskedLM": "mlm logits", "MaskedLMDistilBert": "mlm logits",
            "HFElectraForPreTraining": "discriminator logits"}.get(name)  # fmt: skip
    assert head is None or any(line.startswith(head) for line in out.splitlines()), out
    said = "agrees on right padding: it numbers positions from the start of each row, over the"
    assert (said in out) == over_padding, out


def test_verify_without_a_table_names_a_distilbert_bug(kin, cli):
    code, out, err = cli(
        "verify", kin["DistilBertForMaskedLM"], "--model", model("DistilBertFixedEps")
    )
    assert code == 1 and "LayerNorm eps 1e-05 (the config's layer_norm_eps is 1e-12)" in out, out


def test_convert_writes_a_roberta_as_the_table_holds_it(kin, cli, tmp_path):
    """All 34 position rows (positions after the pad id), no token type table: the model loads
    the file strictly and computes what transformers' RobertaModel does on left padding too."""
    import transformers

    from bertconv.yours.fence import import_factory
    from bertconv.yours.harness import Config

    table, out = tmp_path / "t.toml", tmp_path / "out"
    assert _inferred(cli, "TorchRoberta", kin["RobertaZeroTypes"], table)[0] == 0
    assert cli("convert", kin["RobertaZeroTypes"], "--to", table, "--out", out)[0] == 0
    weights = load_file(out / "model.safetensors")
    assert weights["embed_positions.table.weight"].shape == (SIZES["max_position_embeddings"], 16)
    assert not any("type" in n for n in weights)
    ours = import_factory(model("TorchRoberta"))(Config(SIZES)).eval()
    ours.load_state_dict(weights, strict=True)
    theirs = transformers.RobertaModel.from_pretrained(kin["RobertaZeroTypes"]).eval()
    pad = SIZES["pad_token_id"]
    ids = torch.tensor([[5, 6, 7, 8, 9], [pad, pad, 10, 11, 12]])
    with torch.no_grad():
        got = ours(ids)
        expected = theirs(ids, attention_mask=(ids != pad).long()).last_hidden_state
    real = ids != pad
    assert (got[real] - expected[real]).abs().max() < 1e-5


def test_a_time_major_bert_is_called_as_it_reads_its_inputs(checkpoints, cli, tmp_path):
    """Ids as (T, B), the padding as key_padding_mask (B, T): tried as the mask forms are; its
    outputs (T, B, H) read in that order. Its one-bug variant fails naming the eps."""
    table = tmp_path / "t.toml"
    code, _, err = cli("infer", model("TimeMajorBert"), "--out", table)
    assert code == 0, err
    code, out, err = cli(
        "verify", checkpoints["base"], "--model", model("TimeMajorBert"), "--layout", table
    )
    assert code == 0 and "PASSED" in out, out + err
    code, out, err = cli(
        "verify", checkpoints["base"], "--model", model("TimeMajorBertEps"), "--layout", table
    )
    assert code == 1 and "LayerNorm eps 1e-05" in out, out + err


@pytest.mark.parametrize(
    "line, said",
    [
        ('"positions" = "sideways"', "positions: 'from 0' or 'after the pad id'"),
        ('"token_types" = "none"', "token_types: the rows of the model's table (0: none)"),
        ('"names" = "gpt2"', "names: a model type"),
    ],
)
def test_a_holding_bertconv_cannot_keep_is_refused_naming_its_line(line, said, kin, cli, tmp_path):
    table, out = tmp_path / "t.toml", tmp_path / "out"
    assert _inferred(cli, "TorchRoberta", kin["RobertaZeroTypes"], table)[0] == 0
    text = table.read_text().replace("[holding]\n", f"[holding]\n{line}\n", 1)
    key = line.split(" = ")[0]
    table.write_text("\n".join(x for x in text.splitlines() if not x.startswith(key) or x == line))
    code, _, err = cli("convert", kin["RobertaZeroTypes"], "--to", table, "--out", out)
    assert code == 2 and "(holding): " + said in err and not out.exists(), err


@pytest.mark.parametrize("name", ["CachesByShape", "WrongPastSixteen"])
def test_a_roberta_that_lies_fails_however_it_is_held(name, kin, cli):
    """Built each way with no table, its embeddings computed right: still it FAILS (exit 1),
    never PASSES, nor ends in bertconv's own error."""
    liar = f"{Path(__file__).parent / 'liars' / 'roberta.py'}:{name}"
    code, out, err = cli("verify", kin["RobertaModel"], "--model", liar)
    assert code == 1 and "FAILED" in out and "PASSED" not in out, out + err


def test_an_electra_discriminator_returning_probabilities_is_compared_at_its_logits(
    kin, cli, tmp_path
):
    """It returns sigmoid(logits): compared where it computes the logits, the sigmoid named (as
    a masked LM returning softmax is); it was "no output computed inside it"."""
    table = tmp_path / "t.toml"
    code, err = _inferred(cli, "ElectraDiscriminator", kin["ElectraForPreTraining"], table)
    assert code == 0, err
    code, out, err = cli(
        "verify", kin["ElectraForPreTraining"], "--model", model("ElectraProbabilities"),
        "--layout", table,
    )  # fmt: skip
    assert code == 0 and "PASSED" in out, out + err
    assert "discriminator logits: your forward returns their sigmoid" in out, out
