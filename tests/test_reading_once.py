"""A command opens and parses a checkpoint's weights once, and hands that reading on: to the
conversion, to transformers' reference, to the user's model, to the diagnosis. Counted at the
format readers (formats.FORMATS), through which every weight file is read."""

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

import bertconv
from bertconv import formats

DEVIATIONS = Path(__file__).parent / "zoo" / "deviations.py"
ZOO = Path(__file__).parent / "zoo"


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """Each weight file read through a format reader, counted by its name."""
    counted = Counter()

    def counting(read):
        def wrapper(path, *args, **kwargs):
            counted[Path(path).name] += 1
            return read(path, *args, **kwargs)

        return wrapper

    wrapped = [dataclasses.replace(f, read=counting(f.read)) for f in formats.FORMATS]
    monkeypatch.setattr(formats, "FORMATS", wrapped)
    return counted


def test_convert_reads_the_weights_once(checkpoints, reads, cli, tmp_path):
    assert cli("convert", checkpoints["pretraining"], "--out", tmp_path / "o")[0] == 0
    assert reads == {"model.safetensors": 1}


def test_inspect_reads_the_weights_once(checkpoints, reads, cli):
    assert cli("inspect", checkpoints["sharded"])[0] == 0
    assert sum(reads.values()) == len(reads) >= 2  # each shard once


def test_load_reads_the_weights_once(checkpoints, reads):
    bertconv.load(checkpoints["legacy-bin"])
    assert reads == {"pytorch_model.bin": 1}


def test_verify_reads_the_weights_once(checkpoints, reads, cli):
    code, out, err = cli("verify", checkpoints["pretraining"], "--device", "cpu")
    assert code == 0, out + err
    assert reads == {"model.safetensors": 1}


def test_a_failing_verify_with_its_diagnosis_reads_the_weights_once(minilm, reads, cli):
    code, out, _ = cli("verify", minilm, "--model", f"{DEVIATIONS}:tanh_gelu_modules")
    assert code == 1 and "activation differs" in out
    assert reads == {"model.safetensors": 1}


def test_verify_of_your_own_model_reads_the_weights_once(minilm, reads, cli):
    code, out, err = cli(
        "verify", minilm, "--model", f"{ZOO / 'official_names.py'}:OfficialNamesBert"
    )
    assert code == 0, out + err
    assert reads == {"model.safetensors": 1}
