"""What bertconv writes: a command's output is whole or not there. A failure, a signal, a full or
read-only disk, or another writer leaves OUT as it was and the source untouched; only
bertconv's own leftovers are ever removed; nothing is written over what a command reads."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertconv import files
from bertconv.errors import LISTED, listed
from bertconv.outputs import Note, layer
from hostile import (
    refused,
    snapshot,
)

ZOO = Path(__file__).parent / "zoo"


# Never over the source ----------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["same", "symlink", "dotdot", "trailing slash", "relative"])
def test_converting_into_the_source_is_refused(spelling, source, tmp_path, cli, monkeypatch):
    link = tmp_path / "link"
    link.symlink_to(source)
    monkeypatch.chdir(tmp_path)
    out = {
        "same": str(source),
        "symlink": str(link),
        "dotdot": f"{source}/../{source.name}",
        "trailing slash": f"{source}/",
        "relative": "src",
    }[spelling]
    before = snapshot(source)
    refused(cli("convert", source, "--to", "minbert", "--out", out), 2, "source directory")
    assert snapshot(source) == before


def test_writing_onto_a_file_the_source_reads_through_is_refused(source, tmp_path, cli):
    """The source's weights are a symlink into the output directory: replacing that file there
    would change the source."""
    out = tmp_path / "out"
    out.mkdir()
    (source / "model.safetensors").rename(out / "model.safetensors")
    (source / "model.safetensors").symlink_to(out / "model.safetensors")
    before = snapshot(out)
    # A directory's link out of it is refused as such (issue 17); the weights file named by the
    # user is theirs to link, and still never written over.
    refused(cli("convert", source, "--out", out), 4, "outside the checkpoint's directory")
    weights = source / "model.safetensors"
    refused(cli("convert", weights, "--out", out), 2, "replace the source's own files")
    assert snapshot(out) == before


def test_only_bertconvs_own_leftovers_are_removed(source, tmp_path, cli):
    out = tmp_path / "out"
    out.mkdir()
    mine = {".notes.partial": b"mine", ".model.safetensors.partial": b"mine too"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    leftover = out / ".model.safetensors.bertconv-0123456789ab.partial"  # a killed writer's
    leftover.write_bytes(b"stale")
    named_like_one = out / ".vocab.txt.bertconv-0123456789ab.partial"  # a directory: not ours
    named_like_one.mkdir()
    assert cli("convert", source, "--out", out)[0] == 0
    assert not leftover.exists() and named_like_one.is_dir()
    assert {name: (out / name).read_bytes() for name in mine} == mine


def test_a_failure_removes_the_directories_bertconv_made(source, tmp_path, cli):
    (source / "config.json").write_text('{"hidden_size": 31}')
    refused(cli("convert", source, "--out", tmp_path / "a" / "b" / "c"), 4, "hidden_size=31")
    assert not (tmp_path / "a").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    refused(cli("convert", source, "--out", existing / "new"), 4)
    assert existing.is_dir() and not list(existing.iterdir())


def test_a_read_only_output_names_the_real_error(source, tmp_path):
    """A real read-only file system (a bind mount in a mount namespace of its own): the error is
    the write's, not that of cleaning up after it, and the directory is as it was."""
    out = tmp_path / "ro"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    command = f"{sys.executable} -c 'from bertconv.cli import main; main()'"
    script = (
        f"mount --bind {out} {out} && mount -o remount,bind,ro {out} && "
        f"{command} convert {source} --out {out}"
    )
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True
    )
    assert done.returncode == 7, done.stderr
    assert "Read-only file system" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]


INTERRUPT = """
import os, signal, sys
copy, number = os.copy_file_range, getattr(signal, sys.argv[1])
def interrupted(*args):
    done = copy(*args)
    os.kill(os.getpid(), number)  # a real signal, mid-copy
    return done
os.copy_file_range = interrupted
sys.argv = ["bertconv", "convert", *sys.argv[2:]]
from bertconv.cli import main
main()
"""


@pytest.mark.parametrize(
    "name, code, said", [("SIGINT", 130, "Ctrl-C"), ("SIGTERM", 143, "SIGTERM")]
)
def test_ctrl_c_or_sigterm_mid_copy_cleans_up_and_says_so(name, code, said, source, tmp_path):
    out = tmp_path / "new" / "out"
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPT, name, source, "--out", out],
        capture_output=True,
        text=True,
    )
    assert done.returncode == code, done.stderr
    assert said in done.stderr and "output directory is as it was" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "new").exists()


# A commit is whole --------------------------------------------------------------------------------


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


def test_a_commit_that_fails_halfway_puts_every_file_back(source, tmp_path, cli, monkeypatch):
    out, older = tmp_path / "out", tmp_path / "older"
    older.mkdir()
    for f in source.iterdir():  # another checkpoint: the commit replaces each of its files
        (older / f.name).write_bytes(f.read_bytes())
    (older / "vocab.txt").write_text("an older vocabulary")
    assert cli("convert", older, "--out", out)[0] == 0
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
    with files.OutputDir(out) as output:
        output.stage("x").write_text("x")
        output.commit()
    assert (out / "x").read_text() == "x" and calls[:2] == [out, out]


# What a message says ------------------------------------------------------------------------------


def test_a_message_lists_so_many_names_and_counts_the_rest():
    names = [f"t{i}" for i in range(LISTED + 3)]
    assert listed(names) == ", ".join(names[:LISTED]) + ", and 3 more"
    assert listed(names[:LISTED]) == ", ".join(names[:LISTED])  # all there: no count
    assert listed([]) == ""
    assert listed(iter(names), "\n  ").endswith(f"{names[LISTED - 1]}\n  and 3 more")


def test_a_note_prints_as_its_text_naming_the_outputs_it_is_said_of():
    said = "your forward returns a tuple in its place"
    assert str(Note(said, (layer(5), layer(6)))) == f"layer 5, layer 6 as computed inside: {said}"
    assert str(Note("pooler: never used")) == "pooler: never used"
