"""Parity against transformers 4, on checkpoints transformers 4 writes: relative position
embeddings (position_embedding_type relative_key and relative_key_query, seed 003), which
transformers 5 no longer computes.

`make test` runs this directory a second time, in an environment where transformers 4 stands
in for 5 (.venv-transformers4, laid over the project's own); the first run leaves it out."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

import bertconv
from bertconv.catalog import of
from bertconv.verify import FLOAT32_MAX_ABS, verify
from conftest import SEED, TINY, VOCAB

KINDS = ["relative_key", "relative_key_query"]
# Classes as transformers 4 writes them, with the config fields each needs.
CLASSES = {
    "BertModel": {},
    "BertForPreTraining": {},
    "BertForSequenceClassification": {"num_labels": 3},
    "BertForTokenClassification": {"num_labels": 5},
    "BertForQuestionAnswering": {},
}


def test_this_is_transformers_4():
    assert transformers.__version__.startswith("4."), transformers.__version__


def reference(kind: str, cls: str = "BertForPreTraining"):
    """transformers 4's model of the class, seeded, every bias random (so none is zero)."""
    torch.manual_seed(SEED)
    config = transformers.BertConfig(**TINY, **CLASSES[cls], position_embedding_type=kind)
    model = getattr(transformers, cls)(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    return model.eval()


def written(model, path: Path, safetensors: bool = True) -> Path:
    model.save_pretrained(path, safe_serialization=safetensors)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return path


def rows(report) -> list[str]:
    return [row.name for row in report.rows]


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("kind", KINDS)
def test_verify_passes_on_every_layer_and_head(kind, cls, tmp_path):
    path = written(reference(kind, cls), tmp_path / "ckpt")
    report = verify(str(path), device="cpu")
    layers = [f"layer {i}" for i in range(1, TINY["num_hidden_layers"] + 1)]
    heads = [row for row, _, _ in of("bert").classes[cls].outputs]
    assert set(["embeddings", *layers, *heads]) <= set(rows(report)), rows(report)
    assert report.passed, report.to_dict()
    assert all(row.max_abs <= FLOAT32_MAX_ABS for row in report.rows)


@pytest.mark.parametrize("kind", KINDS)
def test_every_distance_is_read(kind, tmp_path):
    """A batch as long as the model allows reaches both ends of the distance table:
    -(max - 1) and max - 1."""
    model = reference(kind)
    ours = bertconv.load(written(model, tmp_path / "ckpt"))
    g = torch.Generator().manual_seed(1)
    T = TINY["max_position_embeddings"]
    ids = torch.randint(0, TINY["vocab_size"], (3, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1, T // 2 :] = 0
    types = torch.randint(0, 2, ids.shape, generator=g)
    with torch.no_grad():
        theirs = model(ids, mask, types, output_hidden_states=True)
        got = ours(ids, mask, types)
    real = mask.bool()
    for expected, actual in zip(theirs.hidden_states, got.hidden_states, strict=True):
        assert (expected[real] - actual[real]).abs().max() <= FLOAT32_MAX_ABS
    assert (theirs.prediction_logits[real] - got.prediction_logits[real]).abs().max() <= 1e-5


@pytest.mark.parametrize("kind", KINDS)
def test_converted_and_bin_files_verify_too(kind, tmp_path):
    model = reference(kind)
    path = written(model, tmp_path / "bin", safetensors=False)
    assert (path / "pytorch_model.bin").is_file()
    assert verify(str(path), device="cpu").passed
    mine = tmp_path / "mine"
    done = subprocess.run(
        [sys.executable, "-c", "from bertconv.cli import main; main()"]
        + ["convert", str(path), "--out", str(mine)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-c", "from bertconv.cli import main; main()"]
        + ["verify", str(mine), "--device", "cpu"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "PASSED" in done.stdout and "layer 2" in done.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_bfloat16_within_twice_transformers_own_error(kind, tmp_path):
    path = written(reference(kind), tmp_path / "ckpt")
    report = verify(str(path), device="cpu", dtype="bfloat16")
    assert report.passed, report.to_dict()
    assert all(row.reference_max_abs is not None for row in report.rows)


def test_absolute_positions_verify_against_transformers_4_as_well(tmp_path):
    path = written(reference("absolute"), tmp_path / "ckpt")
    report = verify(str(path), device="cpu")
    assert report.passed and "mlm logits" in rows(report)
