"""An output directory holds one checkpoint (issue 26). A conversion into a directory that holds
an earlier one replaces it whole: the earlier files the new one does not write (a tokenizer.json
beside a new vocab.txt, a TensorFlow bundle beside new safetensors) go at the commit, and come
back if it fails. A directory where a file goes is refused by name. Writers into one directory
at once leave one result, whole; one that fails never spoils another's."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from bertconv import files
from bertconv.checkpoint import SOURCE_KEY, read_metadata
from bertconv.errors import OutputError
from hostile import CLI, copy_checkpoint, hostile, snapshot

RICH = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"]
WEIGHTS = ["config.json", "model.safetensors"]


@pytest.fixture
def rich(checkpoints, tmp_path) -> Path:
    """A checkpoint shipping every tokenizer file, each saying whose it is."""
    src = copy_checkpoint(checkpoints["pretraining"], tmp_path / "rich")
    for name in RICH:
        (src / name).write_text('{"whose": "rich"}')
    return src


@pytest.fixture
def plain(checkpoints) -> Path:
    """A checkpoint with vocab.txt alone."""
    return checkpoints["base"]


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_conversion_replaces_the_earlier_one_whole(rich, plain, tmp_path, cli):
    out = tmp_path / "out"
    assert cli("convert", rich, "--out", out)[0] == 0
    assert names(out) == sorted([*WEIGHTS, *RICH, "vocab.txt"])
    code, _, err = cli("convert", plain, "--out", out)
    assert code == 0, err
    assert names(out) == sorted([*WEIGHTS, "vocab.txt"])  # rich's tokenizer files are gone
    assert read_metadata(out / "model.safetensors")[SOURCE_KEY] == str(plain)


def test_changing_form_leaves_one_checkpoint(rich, plain, tmp_path, cli):
    out = tmp_path / "out"
    assert cli("convert", rich, "--out", out)[0] == 0
    assert cli("convert", plain, "--to", "google-tf", "--out", out)[0] == 0
    tf = ["bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"]
    tf.append("bertconv-manifest.json")
    assert names(out) == sorted([*tf, "vocab.txt"])
    assert cli("convert", out, "--out", tmp_path / "back")[0] == 0
    assert cli("convert", rich, "--out", out)[0] == 0
    assert names(out) == sorted([*WEIGHTS, *RICH, "vocab.txt"])


def test_files_bertconv_never_writes_stay(plain, tmp_path, cli):
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("mine")
    (out / "training_args.json").write_text("{}")
    assert cli("convert", plain, "--out", out)[0] == 0
    assert (out / "README.md").read_text() == "mine" and (out / "training_args.json").exists()


def test_a_failed_commit_puts_the_earlier_result_back_whole(rich, plain, tmp_path, monkeypatch):
    out = tmp_path / "out"
    from bertconv.cli import run

    assert run(["convert", str(rich), "--out", str(out)]) == 0
    before = snapshot(out)
    real = os.replace

    def fails_on_the_weights(src, dst, *args, **kwargs):
        if Path(dst).name == "model.safetensors" and ".partial" in Path(src).name:
            raise OSError(5, "Input/output error")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", fails_on_the_weights)
    assert run(["convert", str(plain), "--out", str(out)]) == 7
    monkeypatch.undo()
    assert snapshot(out) == before
    assert not [p for p in os.listdir(out) if p.endswith(".partial")]


@pytest.mark.parametrize("name", ["vocab.txt", "tokenizer.json", "bert_model.ckpt.index"])
def test_a_directory_named_as_an_output_file_is_refused_by_name(name, rich, tmp_path, cli):
    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    (out / name / "inside").write_text("kept")
    code, _, err = cli("convert", rich, "--out", out)
    assert code == 7 and f"{out / name}: is a directory" in err, err
    assert names(out) == [name] and (out / name / "inside").read_text() == "kept"
    code, _, err = cli("convert", rich, "--out", out)
    assert code == 7, "every later conversion is refused the same way, nothing hidden"


@pytest.mark.parametrize("to", ["a directory", "a file"])
def test_a_link_named_as_an_output_file_is_refused_not_followed(to, rich, tmp_path, cli):
    """bertconv writes no links: one where an output file goes is the user's, neither replaced
    (it used to be) nor written through."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir() if to == "a directory" else elsewhere.write_text("[PAD]\n")
    out.mkdir()
    (out / "vocab.txt").symlink_to(elsewhere)
    code, _, err = cli("convert", rich, "--out", out)
    assert code == 7 and "vocab.txt (a link, which bertconv never writes)" in err, err
    assert names(out) == ["vocab.txt"] and (out / "vocab.txt").readlink() == elsewhere
    assert elsewhere.is_dir() if to == "a directory" else elsewhere.read_text() == "[PAD]\n"


def test_a_failing_writer_removes_its_directory_before_letting_the_next_in(tmp_path, monkeypatch):
    """The next writer waits on the lock: it must find the directory gone (and make it again),
    never see it removed as it writes."""
    out = tmp_path / "made" / "out"
    seen = []
    unlock = files.OutputDir._unlock

    def at_unlock(self):
        seen.append(os.path.lexists(out))
        unlock(self)

    monkeypatch.setattr(files.OutputDir, "_unlock", at_unlock)
    with pytest.raises(RuntimeError), files.OutputDir(out, ("config.json",)) as output:
        output.stage("config.json").write_text("{}")
        raise RuntimeError("the conversion failed")
    assert seen == [False] and not (tmp_path / "made").exists()


def test_a_module_folder_comes_only_at_the_commit(tmp_path):
    """A module's file is staged at the top: a writer killed before its commit leaves no
    folder of its own among the user's files (1_Pooling/ in an earlier result's output)."""
    out = tmp_path / "out"
    with files.OutputDir(out, ("1_Pooling/config.json",)) as output:
        output.stage("1_Pooling/config.json").write_text("{}")
        assert not (out / "1_Pooling").exists()
        assert [p.parent for p in out.glob(".*.partial")] == [out]
        output.commit()
    assert (out / "1_Pooling" / "config.json").read_text() == "{}"
    assert not list(out.rglob("*.partial"))


def convert_at_once(*sources: Path, out: Path) -> list[subprocess.CompletedProcess]:
    procs = [
        subprocess.Popen(
            [*CLI, "convert", str(s), "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in sources
    ]
    return [(p.wait(), p.stderr.read()) for p in procs]


def test_two_writers_at_once_leave_one_result_whole(rich, plain, tmp_path):
    for attempt in range(3):
        out = tmp_path / f"out{attempt}"
        results = convert_at_once(rich, plain, out=out)
        assert [code for code, _ in results] == [0, 0], results
        whose = read_metadata(out / "model.safetensors")[SOURCE_KEY]
        expected = [*WEIGHTS, *RICH, "vocab.txt"] if whose == str(rich) else [*WEIGHTS, "vocab.txt"]
        assert names(out) == sorted(expected), whose


def test_a_failing_writer_never_fails_a_good_one(rich, tmp_path):
    bad = copy_checkpoint(rich, tmp_path / "bad")
    hostile(bad / "model.safetensors").write_bytes(b"not safetensors" * 10)
    for attempt in range(4):
        out = tmp_path / f"made{attempt}" / "out"
        (good_code, good_err), (bad_code, _) = convert_at_once(rich, bad, out=out)
        assert good_code == 0, good_err
        assert bad_code == 4
        assert names(out) == sorted([*WEIGHTS, *RICH, "vocab.txt"])


def test_a_directory_made_since_the_output_was_opened_is_refused_at_commit(tmp_path):
    out = tmp_path / "out"
    refusal = pytest.raises(OutputError, match="vocab.txt: is a directory")
    with refusal, files.OutputDir(out, ("vocab.txt",)) as output:
        output.stage("vocab.txt").write_text("[PAD]\n")
        (out / "vocab.txt").mkdir()
        output.commit()
    assert names(out) == ["vocab.txt"]


@pytest.mark.parametrize("under", ["", "sub"])
def test_a_dangling_link_as_out_is_named_with_its_missing_target(under, plain, tmp_path, cli):
    """--out a link to nothing (or a path under one) is no writer's doing: it is named, with
    the target it lacks, and nothing is made at the end of the link."""
    link, target = tmp_path / "out", tmp_path / "gone" / "models"
    link.symlink_to(target)
    code, _, err = cli("convert", plain, "--out", link / under)
    assert code == 7, err
    assert f"{link}: is a link to {target}, which does not exist" in err, err
    assert "other writers" not in err and not (tmp_path / "gone").exists()
    assert link.is_symlink() and names(tmp_path) == ["out"]


def test_a_link_to_a_directory_as_out_is_written_through(plain, tmp_path, cli):
    link, target = tmp_path / "out", tmp_path / "models"
    target.mkdir()
    link.symlink_to(target)
    assert cli("convert", plain, "--out", link)[0] == 0
    assert names(target) == sorted([*WEIGHTS, "vocab.txt"]) and link.is_symlink()


# The user's own files ------------------------------------------------------------------------

TRAINED = {  # a byte-level BPE tokenizer the user trained themselves
    "vocab.json": '{"<s>": 0, "</s>": 1, "hello": 2}\n',
    "merges.txt": "#version: 0.2\nh e\nhe llo\n",
    "tokenizer.json": '{"version": "1.0", "model": {"type": "BPE"}}\n',
}
BESIDE = {"README.md": "# my model\n", "train.py": "print('training')\n", "notes.txt": "lr 1e-4\n"}


@pytest.fixture
def users(tmp_path) -> Path:
    """A folder of the user's: a tokenizer of their own, and files bertconv never writes."""
    folder = tmp_path / "mine"
    folder.mkdir()
    for name, text in (TRAINED | BESIDE).items():
        (folder / name).write_text(text)
    return folder


def refused_intact(result, folder: Path, before: dict, named: dict[str, str]) -> None:
    """Exit 7 naming each file with why, and the folder byte for byte as it was: nothing
    written, nothing staged left, nothing removed."""
    code, _, err = result
    assert code == 7, err
    assert f"{folder}: holds files this conversion would replace or remove" in err, err
    for name, why in named.items():
        assert f"{name} ({why})" in err, err
    assert not [n for n in BESIDE if f"{n} (" in err], "files bertconv never writes are no reason"
    assert names(folder) == sorted(before) and snapshot(folder) == before


@pytest.mark.parametrize("to", ["minbert", "bertconv", "google-tf"])
def test_a_users_own_tokenizer_is_refused_never_deleted(to, users, plain, cli, monkeypatch):
    """`convert bert --to minbert --out .` in a folder of the user's used to delete their
    vocab.json, merges.txt and tokenizer.json without a word (a new vocab.txt beside them would
    make a folder of two tokenizers): refused, by name, before any work."""
    before = snapshot(users)
    monkeypatch.chdir(users)
    result = cli("convert", plain, "--to", to, "--out", ".")
    refused_intact(result, users, before, dict.fromkeys(TRAINED, "not bertconv's"))
    for name in TRAINED:  # moved away, as the message says: the conversion goes ahead
        (users / name).rename(users.parent / name)
    assert cli("convert", plain, "--to", to, "--out", ".")[0] == 0
    assert all((users / n).read_text() == text for n, text in BESIDE.items())


@pytest.mark.parametrize("to", ["google-tf", "bertconv"])
def test_the_users_own_weights_and_config_are_refused(to, users, plain, cli):
    """Their own model.safetensors and config.json (saved by transformers): --to google-tf
    would remove both, --to bertconv replace them."""
    for name in ("model.safetensors", "config.json"):
        (users / name).write_bytes((plain / name).read_bytes())
    before = snapshot(users)
    result = cli("convert", plain, "--to", to, "--out", users)
    named = dict.fromkeys(["model.safetensors", "config.json", *TRAINED], "not bertconv's")
    refused_intact(result, users, before, named)


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def edit_the_header(path: Path) -> None:
    """A letter of model.safetensors' metadata changed, its data and its seal as they were."""
    data = path.read_bytes()
    at = data.index(b'"bertconv.source":"/') + len(b'"bertconv.source":"')
    path.write_bytes(data[:at] + b"_" + data[at + 1 :])


def saved_again_keeping_the_metadata(path: Path) -> None:
    """Loaded, one weight changed, saved with the metadata it had (a common idiom)."""
    from safetensors.torch import load_file, save_file

    metadata, tensors = read_metadata(path), load_file(path)
    first = sorted(tensors)[0]
    tensors[first] = tensors[first] + 1
    save_file(tensors, path, metadata)


CHANGES = [
    ("bertconv", "vocab.txt", flip_last_byte),
    ("bertconv", "config.json", flip_last_byte),
    ("bertconv", "model.safetensors", flip_last_byte),
    ("bertconv", "model.safetensors", edit_the_header),
    ("bertconv", "model.safetensors", saved_again_keeping_the_metadata),
    ("google-tf", "vocab.txt", flip_last_byte),
    ("google-tf", "bert_config.json", flip_last_byte),
    ("google-tf", "bert_model.ckpt.index", flip_last_byte),
    ("google-tf", "bert_model.ckpt.data-00000-of-00001", flip_last_byte),
]


@pytest.mark.parametrize(
    "to, name, change", CHANGES, ids=[f"{t}-{n}-{c.__name__}" for t, n, c in CHANGES]
)
def test_a_file_bertconv_wrote_and_the_user_changed_is_theirs(
    to, name, change, rich, plain, tmp_path, cli
):
    """A file counts as bertconv's only as bertconv wrote it: one changed since (a vocabulary
    edited, weights saved over in place) is refused, not replaced."""
    out = tmp_path / "out"
    assert cli("convert", plain, "--to", to, "--out", out)[0] == 0
    change(hostile(out / name))
    before = snapshot(out)
    for again in ("bertconv", "google-tf"):
        result = cli("convert", rich, "--to", again, "--out", out)
        refused_intact(result, out, before, {name: "changed since bertconv wrote it"})


def test_an_output_without_bertconvs_record_is_not_replaced(plain, tmp_path, cli):
    """An earlier bertconv recorded nothing, and a tool saving over model.safetensors keeps no
    record: each file is named, to be removed by hand."""
    from safetensors.torch import load_file, save_file

    out = tmp_path / "out"
    assert cli("convert", plain, "--out", out)[0] == 0
    weights = out / "model.safetensors"
    save_file(load_file(weights), weights, {"format": "pt"})
    before = snapshot(out)
    result = cli("convert", plain, "--out", out)
    named = {"model.safetensors": "not bertconv's", "config.json": "not bertconv's"}
    refused_intact(result, out, before, named | {"vocab.txt": "not bertconv's"})


def test_a_users_file_come_during_the_conversion_is_refused_at_the_commit(
    rich, plain, tmp_path, cli, monkeypatch
):
    """Checked before the work and again at the commit, under the lock: a file the user puts
    there meanwhile is refused too, and every staged file removed."""
    out = tmp_path / "out"
    assert cli("convert", rich, "--out", out)[0] == 0
    before = snapshot(out)
    real = files.unchanged

    def user_saves_a_tokenizer(seen):
        (out / "vocab.json").write_text('{"mine": 0}')
        return real(seen)

    monkeypatch.setattr(files, "unchanged", user_saves_a_tokenizer)
    code, _, err = cli("convert", plain, "--out", out)
    assert code == 7 and "vocab.json (not bertconv's)" in err, err
    assert snapshot(out) == before | {"vocab.json": b'{"mine": 0}'}
    assert not [p for p in os.listdir(out) if files.PARTIAL.match(p)]


def test_an_earlier_conversion_is_still_replaced_whole_with_the_users_other_files(
    rich, plain, tmp_path, cli
):
    """What bertconv recorded writing goes (rich's tokenizer files); what it never writes
    stays (README.md, train.py, notes.txt), and is no reason to refuse."""
    out = tmp_path / "out"
    assert cli("convert", rich, "--to", "google-tf", "--out", out)[0] == 0
    for name, text in BESIDE.items():
        (out / name).write_text(text)
    assert cli("convert", plain, "--to", "minbert", "--out", out)[0] == 0
    assert names(out) == sorted([*WEIGHTS, "vocab.txt", *BESIDE])
    assert cli("convert", rich, "--out", out)[0] == 0
    assert names(out) == sorted([*WEIGHTS, *RICH, "vocab.txt", *BESIDE])


def test_a_record_is_held_to_what_a_record_is(plain, tmp_path, cli, monkeypatch):
    """A record is read like any stranger's file: a path it names is never opened, and one that
    is not JSON, or not a record, records nothing (the files are refused, none removed)."""
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    victim.write_text("mine")
    assert cli("convert", plain, "--to", "google-tf", "--out", out)[0] == 0
    manifest = out / "bertconv-manifest.json"
    record = json.loads(manifest.read_text())
    record["files"] |= {"../victim.txt": {"bytes": 4, "crc32c": "0"}, "/etc/passwd": {}}
    manifest.write_text(json.dumps(record))
    opened, checksum = [], files.checksum

    def spied(path, blank=None):
        opened.append(Path(path))
        return checksum(path, blank)

    monkeypatch.setattr(files, "checksum", spied)
    assert cli("convert", plain, "--to", "google-tf", "--out", out)[0] == 0
    assert victim.read_text() == "mine" and {p.parent for p in opened} == {out}
    for garbage in ("not json", "[]", '{"written by": "bertconv", "files": [1]}'):
        manifest.write_text(garbage)
        before = snapshot(out)
        named = dict.fromkeys(["bertconv-manifest.json", "bert_config.json"], "not bertconv's")
        refused_intact(cli("convert", plain, "--out", out), out, before, named)


def crc32c(data: bytes) -> dict:
    import google_crc32c

    return {"bytes": len(data), "crc32c": f"{google_crc32c.value(data):08x}"}


def test_each_output_records_the_files_it_wrote(rich, tmp_path, cli):
    """safetensors: in model.safetensors' metadata, which seals itself (its CRC32C, those 8
    digits read as 0s); google-tf: in bertconv-manifest.json. Checked here by CRC32C computed
    over each file's bytes as read back."""
    out = tmp_path / "out"
    assert cli("convert", rich, "--out", out)[0] == 0
    meta = read_metadata(out / "model.safetensors")
    record = json.loads(meta["bertconv.files"])
    before_it = [*RICH, "config.json", "vocab.txt"]
    assert record == {n: crc32c((out / n).read_bytes()) for n in before_it}
    data = (out / "model.safetensors").read_bytes()
    assert data.index(b'{"__metadata__":{"bertconv.crc32c":"') == 8  # the first field
    sealed = data.replace(meta["bertconv.crc32c"].encode(), b"00000000", 1)
    assert crc32c(sealed)["crc32c"] == meta["bertconv.crc32c"]
    assert cli("convert", rich, "--to", "google-tf", "--out", tmp_path / "tf")[0] == 0
    manifest = json.loads((tmp_path / "tf" / "bertconv-manifest.json").read_text())
    written = sorted(set(names(tmp_path / "tf")) - {"bertconv-manifest.json"})
    assert manifest["written by"] == "bertconv" and sorted(manifest["files"]) == written
    assert all(manifest["files"][n] == crc32c((tmp_path / "tf" / n).read_bytes()) for n in written)


def test_a_result_of_another_form_leaves_no_file_of_the_earlier_one(rich, tmp_path, cli):
    """transformers' names, then google-tf from a sentence-transformers directory into the same
    OUT: the earlier model.safetensors and config.json go, though the new result writes a
    config.json of its own, in 1_Pooling/ (the earlier result's files were told from this one's
    by their names alone)."""
    from st_dirs import encoder, written

    out = tmp_path / "out"
    assert cli("convert", rich, "--to", "transformers", "--out", out)[0] == 0
    st = written(encoder(tmp_path / "enc"), tmp_path / "st", "mean")
    code, _, err = cli("convert", st, "--to", "google-tf", "--out", out)
    assert code == 0, err
    assert not (out / "model.safetensors").exists() and not (out / "config.json").exists()
    assert (out / "bert_config.json").is_file() and (out / "1_Pooling" / "config.json").is_file()


def test_a_killed_conversions_staged_files_in_a_module_folder_are_cleared_never_carried(
    tmp_path, cli
):
    from bertconv.files import PARTIAL
    from st_dirs import encoder, written

    st = written(encoder(tmp_path / "enc"), tmp_path / "st", "mean")
    out = tmp_path / "out"
    assert cli("convert", st, "--out", out)[0] == 0
    left = out / "1_Pooling" / ".config.json.bertconv-0123456789ab.partial"
    left.write_text("{}")  # as a conversion killed while staging leaves it
    assert PARTIAL.match(left.name)
    assert cli("convert", out, "--to", "minbert", "--out", tmp_path / "again")[0] == 0
    assert not list((tmp_path / "again" / "1_Pooling").glob("*.partial"))  # not carried
    assert cli("convert", st, "--out", out)[0] == 0
    assert not left.exists()  # cleared as at the top level
