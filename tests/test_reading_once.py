"""A command opens and parses a checkpoint's weights once, and hands that reading on: to the
conversion, to transformers' reference, to the user's model, to the diagnosis. Counted at the
format readers (formats.FORMATS), through which every weight file is read; and every file a
command opens, as the process opens it."""

import dataclasses
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

import bertconv
from bertconv import formats, sentence

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


# Every file a command opens, counted as the process opens it (Python's audit events: each
# open() and os.open, bertconv's own and the tokenizer's, which bertconv reads for it).
WATCHED: list[tuple[Path, Counter]] = []


def _count_opens(event: str, args: tuple) -> None:
    if event != "open" or not WATCHED or not isinstance(args[0], str | bytes | os.PathLike):
        return
    path = Path(os.path.realpath(os.fsdecode(args[0])))
    for root, counted in WATCHED:
        if path == root or root in path.parents:
            counted[path.relative_to(root).as_posix() if root.is_dir() else path.name] += 1


sys.addaudithook(_count_opens)  # for the session: audit hooks cannot be taken back


@pytest.fixture
def opened():
    """opened(root) -> Counter of the files under `root` (or the file `root`) opened from now
    on, by their paths relative to it."""

    def watch(root: Path) -> Counter:
        counted = Counter()
        WATCHED.append((Path(os.path.realpath(root)), counted))
        return counted

    yield watch
    WATCHED.clear()


def test_verify_opens_each_file_of_the_checkpoint_once(minilm, opened, cli):
    """The weights' header, then their data (one descriptor for every tensor); config.json,
    the tokenizer, the pipeline's files and Dense's, once each. A second verify in the process:
    transformers' and sentence-transformers' runs (their own reading) are kept from the first."""
    assert cli("verify", minilm, "--device", "cpu")[0] == 0
    counted = opened(minilm)
    assert cli("verify", minilm, "--device", "cpu")[0] == 0
    assert counted.pop("model.safetensors") == 2  # its header, then its data
    assert set(counted) >= {"config.json", "tokenizer.json", "1_Pooling/config.json"}
    assert set(counted.values()) == {1}, counted


def test_load_and_encode_open_each_file_once_and_encode_none(minilm, opened):
    counted = opened(minilm)
    model = bertconv.load(minilm)
    assert counted.pop("model.safetensors") == 2
    assert set(counted.values()) == {1}, counted
    counted.clear()
    model.encode(["a man is eating food", "paris is the capital of france"] * 20, batch_size=8)
    assert not counted  # everything encode needs was read by load


def test_convert_opens_each_file_once_and_carries_the_rest(minilm, opened, cli, tmp_path):
    """Each file of the source once; modules.json is read (which folders to carry) and then
    copied as it is, and the weights' header read before their data is copied: twice each."""
    sentence._read_modules.cache_clear()  # read once per process while it stays as it is
    counted = opened(minilm)
    assert cli("convert", minilm, "--out", tmp_path / "o")[0] == 0
    assert counted.pop("model.safetensors") == 2
    assert counted.pop("modules.json") == 2
    assert set(counted.values()) == {1}, counted


def test_a_table_file_is_opened_once_per_command(minilm, opened, cli, tmp_path):
    """infer writes a table; verify --model reads it, with the checkpoint, once: its
    [holding], its rows and the layout found for the model come from one reading."""
    table = tmp_path / "mine.toml"
    model = f"{ZOO / 'official_names.py'}:OfficialNamesBert"
    code, out, err = cli("infer", model, "--config", minilm / "config.json", "--out", table)
    assert code == 0, out + err
    counted = opened(table)
    code, out, err = cli("verify", minilm, "--model", model, "--layout", table)
    assert code == 0, out + err
    assert counted == {"mine.toml": 1}
