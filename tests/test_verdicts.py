"""The verdict on your own BERT, issue 31's fifth hostile pass (tests/zoo/verdicts.py): a PASS
holds on every batch a model may be given (each shape run twice, padded otherwise; one batch of
every position the checkpoint has), a head the checkpoint lacks is still compared, and an
ordinary model or slip is a verdict with its reason, never exit 70."""

import json
from pathlib import Path

import pytest
import torch

from bertconv.batches import inputs, random_batch, repadded
from bertconv.config import BertConfig
from tiny import TINY

MODEL = Path(__file__).parent / "zoo" / "verdicts.py"


def model(name: str) -> str:
    return f"{MODEL}:{name}"


@pytest.fixture(scope="module")
def tables(tmp_path_factory, checkpoints, minilm) -> dict[str, Path]:
    """The tables `bertconv infer` writes for the tutorial BERT and the one with a masked-LM
    head, for the tiny checkpoints' config and MiniLM's."""
    from bertconv.cli import run

    root, out = tmp_path_factory.mktemp("verdicts"), {}
    for name, config in [
        ("TutorialBert", checkpoints["base"]),
        ("MaskedLMBert", checkpoints["pretraining"]),
        ("minilm", minilm),
    ]:
        spec = model("TutorialBert" if name == "minilm" else name)
        out[name] = root / f"{name}.toml"
        assert (
            run(["infer", spec, "--config", str(config / "config.json"), "--out", str(out[name])])
            == 0
        )
    return out


def verdict(cli, checkpoint, name: str, table: Path) -> tuple[int, dict, str]:
    code, out, err = cli("verify", checkpoint, "--model", model(name), "--layout", table, "--json")
    assert code in (0, 1), out + err  # a verdict: never exit 70, never refused
    return code, json.loads(out), err


def failing(report: dict) -> list[str]:
    return [row["name"] for row in report["rows"] if not row["passed"]]


def test_each_short_shape_is_run_twice_padded_otherwise_and_one_batch_reaches_every_position():
    config = BertConfig(**TINY)
    batches = inputs(config)
    assert [(b.kind, b.again) for b in batches] == [
        ("random ids", False),
        ("random ids", True),
        ("random ids padded on the left", True),  # the same rows, as users may send them
        ("random ids of all 64 positions", False),  # once: a cache by shape shows on the twin
    ]
    for first, twin in [batches[:2], batches[::2][:2]]:
        assert first.tensors["input_ids"].shape == twin.tensors["input_ids"].shape
        assert not torch.equal(first.tensors["attention_mask"], twin.tensors["attention_mask"])
        pads = twin.tensors["input_ids"][twin.tensors["attention_mask"] == 0]
        assert (pads == config.pad_token_id).all()
    assert max(b.longest for b in batches) == TINY["max_position_embeddings"]


def test_a_batch_of_rows_all_as_long_is_repadded_by_cutting_its_last():
    batch = random_batch(BertConfig(**TINY), 8)
    batch = {k: v[:1].expand(3, -1).contiguous() for k, v in batch.items()}  # one length
    twin = repadded(batch, 0)
    assert twin["attention_mask"][:2].all() and twin["attention_mask"][2].sum() == 4


def test_a_model_caching_its_mask_by_shape_fails_on_a_twin(cli, checkpoints, tables):
    code, report, _ = verdict(cli, checkpoints["base"], "CachedMaskBert", tables["TutorialBert"])
    assert code == 1 and "layer 1" in failing(report)
    assert any("run again with other padding" in n for n in report["notes"]), report["notes"]


def test_a_model_wrong_past_48_tokens_fails_on_the_full_length(cli, checkpoints, tables):
    code, report, _ = verdict(cli, checkpoints["base"], "Block56Bert", tables["TutorialBert"])
    assert code == 1 and report["longest_sequence"] == 64, report
    assert any("wrong on a batch reaching 64" in n for n in report["notes"]), report["notes"]


def test_on_minilm_every_512_positions_are_compared_and_a_right_model_passes(cli, minilm, tables):
    """Right on 512 tokens in float64, where float32's own rounding nears 1e-5; attention in
    blocks of 64 fails there, the first line saying the longest length compared."""
    code, out, err = cli(
        "verify", minilm, "--model", model("TutorialBert"), "--layout", tables["minilm"]
    )
    assert code == 0 and "PASSED" in out, out + err
    assert "sequences of up to 512 tokens" in out.splitlines()[0]
    code, report, _ = verdict(cli, minilm, "BlockAttentionBert", tables["minilm"])
    assert code == 1 and any("wrong on a batch reaching 512" in n for n in report["notes"])


def test_a_model_off_in_float32_alone_past_48_tokens_fails_in_float32(cli, checkpoints, tables):
    """Half precision inside past 48 tokens (autocast, which float64 leaves alone): the batch of
    every position differs in float32 by more than its rounding could, so it is compared there,
    and fails (it PASSED once that batch ran in float64 alone)."""
    code, report, _ = verdict(cli, checkpoints["base"], "AutocastLongBert", tables["TutorialBert"])
    assert code == 1 and failing(report) and report["in_float64"] == [], report
    assert any("wrong on a batch reaching 64" in n for n in report["notes"]), report["notes"]


@pytest.mark.parametrize(
    "name, dtype", [("HalfOutputBert", "float16"), ("BFloat16OutputBert", "bfloat16")]
)
def test_outputs_returned_in_half_precision_are_compared_in_float32(
    name, dtype, cli, checkpoints, tables
):
    code, report, _ = verdict(cli, checkpoints["base"], name, tables["TutorialBert"])
    worst = max(row["max_abs"] for row in report["rows"])
    assert code == 1 and 1e-5 < worst < 1e-1, report
    assert any(f"returns it in {dtype}" in n for n in report["notes"]), report["notes"]


def test_the_pooler_slip_fails_at_the_pooler_naming_what_it_reads(cli, checkpoints, tables):
    code, report, _ = verdict(cli, checkpoints["base"], "PoolerSlipBert", tables["TutorialBert"])
    assert code == 1 and failing(report) == ["pooler"], report  # the rest is right
    assert any("x[0] for x[:, 0]" in n for n in report["notes"]), report["notes"]


@pytest.mark.parametrize("name", ["PositionIdsBert", "PaddingMaskBert", "EveryStateBert"])
def test_a_right_model_passes_whatever_it_asks_for_or_returns(name, cli, checkpoints, tables):
    code, report, _ = verdict(cli, checkpoints["base"], name, tables["TutorialBert"])
    assert code == 0, report
    if name == "EveryStateBert":  # the others are noted, never failed for standing beside it
        beside = [n for n in report["notes"] if "beside it your forward returns" in n]
        assert any("the embeddings output" in n for n in beside), report["notes"]


def test_a_parameter_named_for_something_else_is_never_given_by_elimination(
    cli, checkpoints, tables
):
    code, out, err = cli(
        "verify",
        checkpoints["base"],
        "--model",
        model("LabelsBert"),
        "--layout",
        tables["TutorialBert"],
    )
    assert code == 2 and "'labels'" in err and "cannot give" in err, out + err


def test_a_model_built_in_half_precision_is_run_in_float32_from_its_first_call(
    cli, checkpoints, tables
):
    code, report, _ = verdict(cli, checkpoints["base"], "half_built", tables["TutorialBert"])
    assert code == 0, report


def test_pre_ln_is_named_and_each_note_said_once(cli, checkpoints, tables):
    code, out, err = cli(
        "verify",
        checkpoints["base"],
        "--model",
        model("PreLNBert"),
        "--layout",
        tables["TutorialBert"],
    )
    assert code == 1 and "pre-LN" in out, out + err
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == len(set(notes)) and len(notes) <= 1, notes


@pytest.mark.parametrize(
    "name, returned", [("LogSoftmaxMLMBert", "log-softmax"), ("SoftmaxMLMBert", "softmax")]
)
def test_a_masked_lm_head_returning_probabilities_is_compared_where_it_computes_logits(
    name, returned, cli, checkpoints, tables
):
    code, report, _ = verdict(cli, checkpoints["pretraining"], name, tables["MaskedLMBert"])
    assert code == 0 and "mlm logits" in [r["name"] for r in report["rows"]], report
    assert any(f"returns their {returned}" in n for n in report["notes"]), report["notes"]


def test_a_head_the_checkpoint_lacks_is_compared_with_seeded_weights(cli, checkpoints, tables):
    """On a checkpoint of the encoder and pooler alone, the masked-LM head is given the same
    seeded weights as transformers' head: right, it passes; reading the embeddings, it fails,
    the note naming what it reads."""
    code, report, _ = verdict(cli, checkpoints["base"], "MaskedLMBert", tables["MaskedLMBert"])
    assert code == 0 and "mlm logits" in [r["name"] for r in report["rows"]], report
    assert any("seeded weights" in n for n in report["notes"]), report["notes"]
    code, report, _ = verdict(cli, checkpoints["base"], "EmbeddingsMLMBert", tables["MaskedLMBert"])
    assert code == 1 and failing(report) == ["mlm logits"], report
    assert any("head reads the embeddings output" in n for n in report["notes"]), report["notes"]


def test_a_task_model_under_transformers_prefixed_names_needs_no_table(cli, tasks):
    """A BertForSequenceClassification written from scratch under transformers' own names,
    the encoder under `bert.`: verified with no --layout, as infer's table would be."""
    checkpoint = tasks["BertForSequenceClassification", "safetensors"]
    spec = f"{Path(__file__).parent / 'zoo' / 'official_names.py'}:SequenceClassifier"
    code, out, err = cli("verify", checkpoint, "--model", spec)
    assert code == 0 and "classifier logits" in out, out + err


def test_a_masked_lm_head_that_never_adds_its_decoder_bias_fails_at_the_head(cli, tasks, tables):
    """The sixth pass: its layers compared as computed (they are right), the failure at the head,
    the unused bias named (it was "layer 2 NaN", no mlm logits row, and a false note that the
    model cannot compute in float64). On a checkpoint whose bias is not zeros."""
    checkpoint = tasks["BertForMaskedLM", "safetensors"]
    code, report, _ = verdict(cli, checkpoint, "NoDecoderBiasMLMBert", tables["MaskedLMBert"])
    assert code == 1 and failing(report) == ["mlm logits"], report
    assert any("never uses" in n and "decoder.bias" in n for n in report["notes"]), report["notes"]
    assert not any("float64" in n for n in report["notes"]), report["notes"]
