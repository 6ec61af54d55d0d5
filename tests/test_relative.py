"""Relative position embeddings (seed 003: position_embedding_type relative_key and
relative_key_query) where transformers 5 runs: conversion, loading, and what each layout and
verify say. Parity with transformers 4, the last series that computes them, is proven in
tests/transformers4/, run by `make test` in an environment of its own."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertconv
from bertconv.errors import CheckpointError, MissingDependencyError
from conftest import TINY, task_model

KINDS = ["relative_key", "relative_key_query"]
DISTANCES = 2 * TINY["max_position_embeddings"] - 1
HEAD_SIZE = TINY["hidden_size"] // TINY["num_attention_heads"]


def relative_checkpoint(path: Path, kind: str, distances: bool = True) -> Path:
    """A BertForPreTraining checkpoint as transformers 4 writes one with relative positions:
    each layer's distance_embedding beside the usual tensors, the kind in config.json.
    (transformers 5 cannot build such a model, so its tensors are added here.)"""
    model = task_model("BertForPreTraining")
    model.save_pretrained(path)
    tensors = load_file(path / "model.safetensors")
    g = torch.Generator().manual_seed(3)
    if distances:
        for i in range(TINY["num_hidden_layers"]):
            name = f"bert.encoder.layer.{i}.attention.self.distance_embedding.weight"
            tensors[name] = torch.randn(DISTANCES, HEAD_SIZE, generator=g)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"position_embedding_type": kind}))
    return path


@pytest.fixture(scope="module", params=KINDS)
def relative(request, tmp_path_factory) -> Path:
    return relative_checkpoint(tmp_path_factory.mktemp(request.param), request.param)


def test_converts_and_loads_with_its_distances(relative, tmp_path, cli):
    code, out, err = cli("convert", relative, "--out", tmp_path / "mine")
    assert code == 0, err
    converted = load_file(tmp_path / "mine" / "model.safetensors")
    source = load_file(relative / "model.safetensors")
    for i in range(TINY["num_hidden_layers"]):
        name = f"encoder.layer.{i}.attention.self.distance_embedding.weight"
        assert torch.equal(converted[name], source[f"bert.{name}"])

    model = bertconv.load(tmp_path / "mine")
    table = model.encoder.layer[1].attention.self.distance_embedding.weight
    assert table.shape == (DISTANCES, HEAD_SIZE)
    assert torch.equal(
        table, source["bert.encoder.layer.1.attention.self.distance_embedding.weight"]
    )


def test_round_trip_is_bit_identical(relative, tmp_path, cli):
    assert cli("convert", relative, "--out", tmp_path / "mine")[0] == 0
    assert (
        cli("convert", tmp_path / "mine", "--to", "transformers", "--out", tmp_path / "back")[0]
        == 0
    )
    source, back = (
        load_file(relative / "model.safetensors"),
        load_file(tmp_path / "back" / "model.safetensors"),
    )
    assert source.keys() == back.keys()
    assert all(torch.equal(source[k], back[k]) for k in source)


def test_distances_change_what_the_model_computes(relative, batch):
    """The distance tables are read: zeroing one changes that layer's output."""
    model = bertconv.load(relative)
    with torch.no_grad():
        before = model(**batch).hidden_states[1]
        model.encoder.layer[0].attention.self.distance_embedding.weight.zero_()
        after = model(**batch).hidden_states[1]
    real = batch["attention_mask"].bool()
    assert (before[real] - after[real]).abs().max() > 1e-3


@pytest.mark.parametrize("layout", ["minbert", "google-tf"])
def test_a_layout_without_distances_is_refused(relative, tmp_path, cli, layout):
    code, out, err = cli("convert", relative, "--to", layout, "--out", tmp_path / "out")
    assert code == CheckpointError.exit_code
    assert f"the {layout!r} layout has no place for relative position embeddings" in err
    assert not (tmp_path / "out").exists()


def test_a_relative_config_without_distances_is_refused(tmp_path, cli):
    path = relative_checkpoint(tmp_path / "src", "relative_key", distances=False)
    code, out, err = cli("convert", path, "--out", tmp_path / "out")
    assert code == CheckpointError.exit_code
    assert "missing tensors (2): encoder.layer.0.attention.self.distance_embedding.weight" in err
    assert "position_embedding_type is 'relative_key', whose attention reads" in err
    assert not (tmp_path / "out").exists()


def test_distances_under_an_absolute_config_are_refused(tmp_path, cli):
    path = relative_checkpoint(tmp_path / "src", "relative_key")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"position_embedding_type": "absolute"}))
    code, out, err = cli("convert", path, "--out", tmp_path / "out")
    assert code == CheckpointError.exit_code
    assert "unexpected tensors, which no table maps (2): bert.encoder.layer.0.attention" in err
    assert "position_embedding_type is 'absolute', but the file holds relative position" in err


def test_verify_under_transformers_5_names_what_to_install(relative, cli):
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.fail("this test runs where transformers 5 is installed; see tests/transformers4/")
    from bertconv.verify import verify

    with pytest.raises(MissingDependencyError, match=r"transformers>=4.48,<5"):
        verify(str(relative), device="cpu")
    code, out, err = cli("verify", relative, "--device", "cpu")
    assert code == MissingDependencyError.exit_code
    assert "no longer implements position_embedding_type=" in err and "Traceback" not in err


def test_inspect_names_the_kind_of_positions(relative, cli):
    kind = json.loads((relative / "config.json").read_text())["position_embedding_type"]
    code, out, err = cli("inspect", relative)
    assert code == 0, err
    assert f"gelu, {kind} position embeddings" in out and "class       BertForPreTraining" in out
    code, out, err = cli("inspect", relative, "--json")
    assert json.loads(out)["config"]["position_embedding_type"] == kind
