"""A third hostile pass (issue 17): data lost or exposed, false success, wrong blame, bombs. Each
case is run as a user or a hostile file would run it, and must end cleanly: a documented exit
code other than 70, one message, nothing outside OUT touched, sources unchanged, bounded work."""

import json
import os
import signal
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from test_hostile import refused, snapshot

import bertconv
from bertconv import files
from bertconv.tables import TABLES
from hostile import copy_checkpoint

ZOO = Path(__file__).parent / "zoo"


@pytest.fixture
def source(checkpoints, tmp_path) -> Path:
    return copy_checkpoint(checkpoints["pretraining"], tmp_path / "src")


# Data lost or exposed --------------------------------------------------------------------------


def test_infer_never_writes_over_the_code_it_reads(tmp_path, cli):
    model = tmp_path / "mybert.py"
    model.write_text((ZOO / "not_bert.py").read_text())
    before = model.read_bytes()
    err = refused(cli("infer", f"{model}:PostLNBert", "--out", model), 2, "infer reads")
    assert model.read_bytes() == before, err


@pytest.mark.parametrize("name", ["pyproject.toml", "notes.txt"])
def test_infer_replaces_only_a_table(name, tmp_path, cli):
    other = tmp_path / name
    other.write_text('[project]\nname = "mine"\n')
    refused(cli("infer", f"{ZOO / 'not_bert.py'}:PostLNBert", "--out", other), 2, "not a mapping")
    assert other.read_text() == '[project]\nname = "mine"\n'
    table = tmp_path / "mine.toml"
    for _ in range(2):  # a table it wrote, it may write again
        assert cli("infer", f"{ZOO / 'not_bert.py'}:PostLNBert", "--out", table)[0] == 0


def test_infer_out_on_a_read_only_file_system_is_an_output_error(tmp_path, cli, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(Path, "write_text", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    code, _, err = cli("infer", f"{ZOO / 'not_bert.py'}:PostLNBert", "--out", tmp_path / "t.toml")
    assert code == 7 and "cannot write the table (Read-only file system)" in err, err


def test_a_source_named_like_a_leftover_is_never_cleared(source, cli):
    weights = source / ".model.safetensors.bertconv-0123456789ab.partial"
    (source / "model.safetensors").rename(weights)
    before = weights.read_bytes()
    code, _, err = cli("convert", weights, "--out", source)
    assert code in (2, 4) and "no such file" not in err, err
    assert weights.read_bytes() == before
    (source / "model.safetensors").write_bytes(before)
    out = source.parent / "out"
    assert cli("convert", source, "--out", out)[0] == 0
    (out / weights.name).write_bytes(b"left by a kill")
    assert cli("convert", source, "--out", out)[0] == 0  # a real leftover is cleared
    assert not (out / weights.name).exists()


def test_a_tokenizer_file_linking_out_of_the_checkpoint_is_refused(source, tmp_path, cli):
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN PRIVATE KEY-----")
    (source / "vocab.txt").unlink()
    (source / "vocab.txt").symlink_to(secret)
    out = tmp_path / "out"
    refused(cli("convert", source, "--out", out), 4, "vocab.txt", "outside the checkpoint")
    assert not out.exists()
    inside = source / "vocab-real.txt"
    inside.write_text("[PAD]\n[UNK]\n")
    (source / "vocab.txt").unlink()
    (source / "vocab.txt").symlink_to(inside.name)  # a link within it is followed
    assert cli("convert", source, "--out", out)[0] == 0
    assert (out / "vocab.txt").read_text() == "[PAD]\n[UNK]\n"


def test_a_commit_that_fails_halfway_puts_every_file_back(source, tmp_path, cli, monkeypatch):
    out = tmp_path / "out"
    assert cli("convert", source, "--out", out)[0] == 0
    (out / "vocab.txt").write_text("an older vocabulary")
    before = snapshot(out)
    replace, calls = os.replace, []

    def failing(a, b):
        calls.append(b)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return replace(a, b)

    monkeypatch.setattr(files.os, "replace", failing)
    refused(cli("convert", source, "--out", out), 7, "nothing in it was changed")
    monkeypatch.setattr(files.os, "replace", replace)
    assert snapshot(out) == before
    assert not [p for p in out.iterdir() if files.PARTIAL.match(p.name)]


def test_signals_wait_for_a_commit_or_a_clean_up_to_end():
    got = []
    previous = signal.signal(signal.SIGINT, lambda *a: got.append("interrupted"))
    try:
        with files._signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            assert got == []  # held
        time.sleep(0.05)
        assert got == ["interrupted"]  # delivered as the block ends
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_directory_another_writer_removed_is_made_again(tmp_path, monkeypatch):
    """Two conversions into one new nested OUT: one fails and removes the directories it made,
    just as the other opens them. The other makes them again."""
    real_open, calls = os.open, []

    def vanished(path, *args):
        calls.append(path)
        if len(calls) == 1:
            os.rmdir(path)
            raise FileNotFoundError(path)
        return real_open(path, *args)

    monkeypatch.setattr(files.os, "open", vanished)
    out = tmp_path / "a" / "b"
    with files.Output(out) as output:
        output.stage("x").write_text("x")
        output.commit()
    assert (out / "x").read_text() == "x" and calls[:2] == [out, out]


# False success -------------------------------------------------------------------------------


def test_a_model_file_that_exits_on_import_compares_nothing(checkpoints, cli):
    code, out, err = cli("verify", checkpoints["base"], "--model", f"{ZOO}/exits_on_import.py:Bert")
    assert code == 2 and "sys.exit(2)" in err and "PASSED" not in out


@pytest.mark.parametrize(
    "mutation, fragment",
    [
        (lambda t: t.replace('"word_embedding.weight"', '"__metadata__"'), "__metadata__"),
        (lambda t: t.replace('arange = "max_position_embeddings"', "arange = 7"), "agree"),
        (lambda t: t.replace('"word_embedding.weight"', '"a\\u001b[2Jb"'), "not printable"),
        (lambda t: t.replace('"word_embedding.weight"', '""'), "empty tensor name"),
    ],
)
def test_a_table_that_would_write_unreadable_files_is_refused(
    mutation, fragment, source, tmp_path, cli
):
    table = tmp_path / "mine.toml"
    table.write_text(mutation((TABLES / "minbert.toml").read_text()))
    out = tmp_path / "out"
    refused(cli("convert", source, "--to", table, "--out", out), 2, fragment)
    assert not out.exists()


def test_a_table_asking_for_gigabytes_of_buffers_is_refused_at_once(source, tmp_path, cli):
    text = (TABLES / "minbert.toml").read_text().split("[generated]")[0] + "[generated]\n"
    text += "".join(f'"b{i}" = {{ arange = 16777216, shape = [16777216] }}\n' for i in range(40))
    (tmp_path / "t.toml").write_text(text)
    start = time.perf_counter()
    refused(cli("convert", source, "--to", tmp_path / "t.toml", "--out", tmp_path / "o"), 2)
    assert time.perf_counter() - start < 5 and not (tmp_path / "o").exists()


# Wrong blame ---------------------------------------------------------------------------------


def test_a_shipped_table_named_by_its_path_is_that_layout(source, tmp_path, cli):
    path = TABLES / "transformers.toml"
    assert cli("convert", source, "--to", path, "--out", tmp_path / "t")[0] == 0
    assert cli("convert", tmp_path / "t", "--from", path, "--out", tmp_path / "b")[0] == 0
    assert type(bertconv.load(tmp_path / "t", layout=str(path))).__name__ == "BertForPreTraining"
    copy = tmp_path / "copy.toml"
    copy.write_text(path.read_text())  # elsewhere, an ordinary table file (issue 18)
    assert type(bertconv.load(tmp_path / "t", layout=str(copy))).__name__ == "BertForPreTraining"


@pytest.mark.parametrize(
    "edit",
    [
        {"max_position_embeddings": 1},
        {"max_position_embeddings": 2},
        {"return_dict": False},
    ],
)
def test_odd_but_valid_configs_verify(edit, source, cli):
    config = json.loads((source / "config.json").read_text()) | edit
    if "max_position_embeddings" in edit:
        tensors = load_file(source / "model.safetensors")
        name = "bert.embeddings.position_embeddings.weight"
        tensors[name] = tensors[name][: edit["max_position_embeddings"]].contiguous()
        save_file(tensors, source / "model.safetensors")
    (source / "config.json").write_text(json.dumps(config))
    code, out, err = cli("verify", source)
    assert code == 0 and "PASSED" in out, err


def test_a_vocabulary_without_unk_is_handled_or_refused_by_name(source, cli):
    vocab = source / "vocab.txt"
    vocab.write_text("".join(line for line in vocab.open() if line.strip() != "[UNK]"))
    code, out, err = cli("verify", source)
    assert code in (0, 4) and "internal error" not in err
    assert code == 0 or "vocab.txt" in err


# Bombs ---------------------------------------------------------------------------------------


def test_a_config_nested_900_deep_is_refused_small(source, tmp_path, cli):
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(
        json.dumps(config)[:-1] + ', "odd": ' + "[" * 900 + "]" * 900 + "}"
    )
    out = tmp_path / "out"
    refused(cli("convert", source, "--out", out), 4, "nested more than 32 deep")
    assert not out.exists()


def test_strangers_strings_never_reach_the_terminal_raw():
    from bertconv.cli import printable

    assert printable("name\x1b[2J\rPASSED\u202e") == "name\\x1b[2J\\rPASSED\\u202e"
    assert printable("two\nlines") == "two\nlines"


def test_a_tensor_name_that_would_drive_the_terminal_is_refused_escaped(source, tmp_path, cli):
    tensors = load_file(source / "model.safetensors")
    tensors["x\x1b[2J\nPASSED"] = tensors.pop("cls.predictions.bias")
    save_file(tensors, source / "model.safetensors")
    for command in (["convert", source, "--out", tmp_path / "o"], ["inspect", source]):
        code, out, err = cli(*command)
        assert code == 4 and "not printable" in err and "'x\\x1b[2J\\nPASSED'" in err, err
        assert "\x1b" not in out + err and "\nPASSED" not in out + err


def test_a_config_linking_out_of_the_checkpoint_is_refused(source, tmp_path, cli):
    private = tmp_path / "private.json"
    private.write_text((source / "config.json").read_text()[:-1] + ', "token": "secret"}')
    (source / "config.json").unlink()
    (source / "config.json").symlink_to(private)
    refused(cli("convert", source, "--out", tmp_path / "o"), 4, "outside the checkpoint")
    assert not (tmp_path / "o").exists()
