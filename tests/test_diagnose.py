"""When a BERT differs: verify and infer say where (the first step of the failing
output that differs, and the steps before it that agree) and why (the deviation whose
recomputation reproduces the model's values), for each deviation people make, in models built
of modules and of raw parameters alike (tests/zoo/deviations.py)."""

import json
from pathlib import Path

import pytest
import torch

from bertconv.catalog import of
from bertconv.verify import FLOAT32_MAX_ABS, verify

DEVIATIONS = Path(__file__).parent / "zoo" / "deviations.py"

# deviation -> (the row that fails first, the step, words of the cause a user would recognise)
EXPECTED = {
    "eps": ("embeddings", "LayerNorm", "eps 1e-05"),
    "tanh_gelu": ("layer 1", "activation", "tanh-approximate GELU"),
    "gelu_constant": ("layer", "activation", "1.41421"),
    "relu": ("layer 1", "activation", 'ReLU ("relu")'),
    "scale_d": ("layer 1", "attention", "scaling: the scores divided by the head size"),
    "no_scale": ("layer 1", "attention", "scaling left out"),
    "no_mask": ("layer 1", "attention", "no padding mask"),
    "inverted_mask": ("layer 1", "attention", "mask inverted"),
    "query_mask": ("layer 1", "attention", "applied to the queries"),
    "heads_order": ("layer 1", "attention", "heads split in the other order"),
    "softmax_axis": ("layer 1", "attention", "softmax over the queries"),
    "swap_qk": ("layer 1", "attention", "query and the key exchanged"),
    "no_residual": ("layer 1", "residual and LayerNorm", "no residual"),
    "residual_after_norm": ("layer 1", "residual and LayerNorm", "residual added after"),
    "pre_ln": ("layer 1", "input", "pre-LN"),
    "no_token_types": ("embeddings", "sum", "token types left out"),
    "no_positions": ("embeddings", "sum", "positions left out"),
    "positions_offset": ("embeddings", "sum", "positions offset"),
    "dropout": ("layer 1", "input", "dropout left active"),
    "pooler_no_tanh": ("pooler", "tanh", "tanh missing"),
    "pooler_double_tanh": ("pooler", "tanh", "tanh applied twice"),
    "transposed": ("layer 1", "query projection", "transposed"),
}


@pytest.mark.parametrize("style", ["modules", "raw"])
@pytest.mark.parametrize("bug", EXPECTED)
def test_each_deviation_is_found_named_and_proven(bug, style, minilm):
    report = verify(str(minilm), "cpu", model=f"{DEVIATIONS}:{bug}_{style}")
    row, step, cause = EXPECTED[bug]
    found = report.diagnosis
    assert not report.passed and found is not None
    assert found.row.startswith(row) and step in found.step, found.message()
    assert found.row == next(r.name for r in report.rows if not r.passed)
    assert cause in found.cause, found.message()
    assert found.confirmed_max_abs <= FLOAT32_MAX_ABS
    assert all(d <= FLOAT32_MAX_ABS for _, d in found.agreeing)


@pytest.mark.parametrize("style", ["modules", "raw"])
def test_the_right_model_passes_with_no_diagnosis(style, minilm):
    report = verify(str(minilm), "cpu", model=f"{DEVIATIONS}:bert_{style}")
    assert report.passed and report.diagnosis is None


def test_a_small_but_real_deviation_fails_and_is_named(minilm):
    """GELU's sqrt(2) as 1.41421: under 1e-6 at a step, over the tolerance only in deep
    layers; the step that differs is still found, and the cause named."""
    report = verify(str(minilm), "cpu", model=f"{DEVIATIONS}:gelu_constant_modules")
    assert report.diagnosis.max_abs < FLOAT32_MAX_ABS < max(r.max_abs for r in report.rows)
    assert "1.41421" in report.diagnosis.cause


def test_the_diagnosis_is_said_in_the_report_and_in_json(minilm, cli):
    code, out, _ = cli("verify", minilm, "--model", f"{DEVIATIONS}:tanh_gelu_modules")
    assert code == 1
    assert "layer 1: the feed-forward's activation differs (max abs" in out
    assert "the query, key and value projections" in out and "agree (<=" in out
    assert "Your model computes tanh-approximate GELU" in out
    assert 'hidden_act is "gelu", the exact (erf) GELU' in out
    code, out, _ = cli("verify", minilm, "--model", f"{DEVIATIONS}:relu_raw", "--json")
    found = json.loads(out)["diagnosis"]
    assert code == 1 and found["row"] == "layer 1" and found["cause"] == 'ReLU ("relu")'
    assert set(found) >= {"row", "step", "max_abs", "cause", "confirmed_max_abs"}
    assert found["confirmed_max_abs"] <= FLOAT32_MAX_ABS


def test_bertconvs_own_model_is_diagnosed_the_same_way(minilm, computing):
    """bertconv's model, made to compute tanh GELU: verify says where and why."""
    import torch.nn.functional as F

    computing(lambda x: F.gelu(x, approximate="tanh"))
    report = verify(str(minilm), "cpu")
    assert not report.passed
    assert report.diagnosis.step == "the feed-forward's activation"
    assert report.diagnosis.cause.startswith("tanh-approximate GELU")


def test_infer_refusing_says_where_and_why(cli):
    code, _, err = cli("infer", f"{DEVIATIONS}:softmax_axis_raw")
    assert code == 1 and "diverges at layer 1" in err
    assert "the attention (scores, scaling, mask, softmax) differs" in err
    assert "the softmax over the queries (dim -2)" in err


KINDS = ("absolute", "relative_key", "relative_key_query")
SMALL = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=24, num_labels=3)  # fmt: skip
# Steps each row is taken apart into: every one compared, none skipped.
STEPS = {"embeddings": 3, "layer": 11, "pooler": 2}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "model_class", [c for c in of("bert").classes if c != "BertForMultipleChoice"]
)
def test_bertconvs_own_model_of_every_kind_agrees_at_every_step(kind, model_class):
    """One BERT: bertconv's model, traced as a user's is (verify's Ours.diagnose) and read
    through its table, taken apart row by row by the diagnosis (which recomputes each step with
    that same model's code): every step of every row agrees, relative positions included.
    (Multiple choice is never taken apart: its inputs are (B, choices, T).)"""
    import bertconv.heads
    from bertconv.batches import random_batch
    from bertconv.config import BertConfig
    from bertconv.mapping import layout
    from bertconv.outputs import EMBEDDINGS, POOLER, layer
    from bertconv.yours.diagnose import diagnose
    from bertconv.yours.harness import Harness, Plan
    from bertconv.yours.reading import anchors, read

    config = BertConfig(**SMALL, position_embedding_type=kind)
    torch.manual_seed(0)
    model = bertconv.heads.CLASSES[model_class](config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    table = layout("bertconv", config)
    harness = Harness(model, "bertconv", Plan({n: n for n in random_batch(config)}))
    run = harness.run(random_batch(config, 16))
    rows = [EMBEDDINGS, *(layer(i + 1) for i in range(config.num_hidden_layers))]
    rows += [POOLER] if model.pooler is not None else []
    for row in rows:
        pooled = read(run, anchors(table, config, {"pooler"})).get(POOLER)
        found = diagnose(run.trace, table, model, row, pooled)
        assert found.step is None and found.cause is None, found.message()
        assert len(found.agreeing) == STEPS[row.kind], found.message()
