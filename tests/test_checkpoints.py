"""Converted files: what is written, that the seeds' own models load them strictly and compute
the same thing, and that bad input fails clearly with nothing half-written."""

import json
import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import bertconv
import seed_models
from bertconv.api import Source, convert_checkpoint
from bertconv.checkpoint import LAYOUT_KEY, REVISION_KEY, SOURCE_KEY
from bertconv.errors import CheckpointError, NotFoundError, OutputError
from bertconv.verify import FLOAT32_MAX_ABS
from conftest import TINY
from hostile import hostile


def convert_dir(path, out, to="bertconv", heads=None):
    return convert_checkpoint(Source(str(path), path, "abc123"), out, to, None, heads)


def test_convert_writes_weights_config_tokenizer_and_provenance(checkpoints, tmp_path):
    converted = convert_dir(checkpoints["legacy"], tmp_path / "out")
    result, written = converted.conversion, converted.written
    assert sorted(p.name for p in written) == ["config.json", "model.safetensors", "vocab.txt"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in written)
    with safe_open(tmp_path / "out" / "model.safetensors", "pt") as f:
        meta = f.metadata()
        assert set(f.keys()) == set(result.state_dict)
    assert meta[LAYOUT_KEY] == "bertconv"
    assert meta[SOURCE_KEY] == str(checkpoints["legacy"]) and meta[REVISION_KEY] == "abc123"
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["hidden_size"] == TINY["hidden_size"]


def seed000_outputs(model, batch):
    with torch.no_grad():
        layers, pooled = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    return layers[-1], pooled


@pytest.mark.parametrize("variant, heads", [("base", None), ("legacy", False)])
def test_seed000_model_loads_the_file_strictly_and_agrees(
    variant, heads, checkpoints, reference, batch, tmp_path
):
    convert_dir(checkpoints[variant], tmp_path, heads=heads)
    model = seed_models.BertModel(seed_models.BertConfig(**TINY)).eval()
    model.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=True)
    last, pooled = seed000_outputs(model, batch)
    with torch.no_grad():
        expected = reference.bert(**batch)
    real = batch["attention_mask"].bool()
    assert (last[real] - expected.last_hidden_state[real]).abs().max() <= FLOAT32_MAX_ABS
    assert (pooled - expected.pooler_output).abs().max() <= FLOAT32_MAX_ABS


def test_minbert_model_loads_the_file_strictly_buffers_included(
    checkpoints, reference, batch, tmp_path
):
    result = convert_dir(checkpoints["pretraining"], tmp_path, to="minbert").conversion
    assert set(result.dropped) == {"mlm", "nsp"}
    model = seed_models.MinbertModel(seed_models.MinbertConfig(**TINY)).eval()
    model.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=True)
    zeros = torch.zeros_like(batch["input_ids"])  # minbert ignores token types, as written
    with torch.no_grad():
        ours = model(batch["input_ids"], batch["attention_mask"])
        expected = reference.bert(batch["input_ids"], batch["attention_mask"], zeros)
    real = batch["attention_mask"].bool()
    assert (
        ours["last_hidden_state"][real] - expected.last_hidden_state[real]
    ).abs().max() <= FLOAT32_MAX_ABS
    assert (ours["pooler_output"] - expected.pooler_output).abs().max() <= FLOAT32_MAX_ABS


def test_a_converted_directory_converts_on(checkpoints, tmp_path):
    convert_dir(checkpoints["pretraining"], tmp_path / "minbert", to="minbert")
    convert_dir(tmp_path / "minbert", tmp_path / "official", to="transformers")
    back = load_file(tmp_path / "official" / "model.safetensors")
    original = load_file(checkpoints["base"] / "model.safetensors")
    assert back.keys() == original.keys()
    assert all(torch.equal(back[k], original[k]) for k in original)


def broken_copy(src, dst, edit):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    tensors = load_file(dst / "model.safetensors")
    edit(tensors)
    save_file(tensors, dst / "model.safetensors")
    return dst


def test_bad_tensors_are_all_named_with_the_file_and_nothing_is_written(checkpoints, tmp_path):
    def edit(t):
        del t["bert.encoder.layer.0.attention.self.query.weight"]
        t["bert.encoder.layer.0.attention.self.key.bias"] = torch.zeros(31)
        t["lm_head.weight"] = torch.zeros(2, 32)

    bad = broken_copy(checkpoints["pretraining"], tmp_path / "bad", edit)
    with pytest.raises(CheckpointError) as err:
        convert_dir(bad, tmp_path / "out")
    message = str(err.value)
    assert str(bad) in message
    assert "encoder.layer.0.attention.self.query.weight" in message
    assert "encoder.layer.0.attention.self.key.bias is (31,), config.json implies (32,)" in message
    assert "lm_head.weight" in message
    assert not (tmp_path / "out").exists()


def test_a_failed_write_leaves_the_old_output_intact(checkpoints, tmp_path, monkeypatch):
    out = tmp_path / "out"
    convert_dir(checkpoints["pretraining"], out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def disk_full(src, dst, count, offset, position):
        os.pwrite(dst, b"partial", position)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "copy_file_range", disk_full)
    with pytest.raises(OutputError, match="No space left on device.*nothing in it was changed"):
        convert_dir(checkpoints["legacy"], out, to="minbert")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_git_lfs_pointer_in_place_of_the_weights(checkpoints, tmp_path):
    bad = tmp_path / "lfs"
    bad.mkdir()
    (bad / "config.json").write_bytes((checkpoints["base"] / "config.json").read_bytes())
    (bad / "model.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:4b0c...\nsize 440473133\n"
    )
    hostile(bad / "model.safetensors")
    with pytest.raises(CheckpointError, match="Git LFS pointer"):
        convert_dir(bad, tmp_path / "out")


def test_missing_pieces_are_not_found(checkpoints, tmp_path):
    with pytest.raises(NotFoundError, match="no such directory"):
        convert_dir(tmp_path / "nowhere", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFoundError, match="no weights found"):
        convert_dir(tmp_path / "empty", tmp_path / "out")
    (tmp_path / "noconfig").mkdir()
    (tmp_path / "noconfig" / "model.safetensors").write_bytes(
        (checkpoints["base"] / "model.safetensors").read_bytes()
    )
    with pytest.raises(NotFoundError, match="no config.json"):
        convert_dir(tmp_path / "noconfig", tmp_path / "out")


def test_a_users_own_minbert_file_loads_with_from(checkpoints, batch, tmp_path):
    """No bertconv metadata: the layout is named by the user, and without it the error says how."""
    model = seed_models.MinbertModel(seed_models.MinbertConfig(**TINY))
    save_file(model.state_dict(), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_bytes((checkpoints["base"] / "config.json").read_bytes())
    with pytest.raises(CheckpointError, match="name it with --from"):
        bertconv.load(tmp_path)
    ours = bertconv.load(tmp_path, layout="minbert")
    model.eval()
    with torch.no_grad():
        a = ours(batch["input_ids"], batch["attention_mask"]).last_hidden_state
        b = model(batch["input_ids"], batch["attention_mask"])["last_hidden_state"]
    real = batch["attention_mask"].bool()
    assert (a - b)[real].abs().max() <= FLOAT32_MAX_ABS


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_a_weights_file_names_its_checkpoint(tasks, weights, tmp_path, cli):
    """A weights file as the source: config.json and the tokenizer are read beside it."""
    form = "safetensors" if weights.endswith("safetensors") else "bin"
    src = tasks["BertForSequenceClassification", form] / weights
    code, out, err = cli("convert", src, "--out", tmp_path / "out")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json",
        "model.safetensors",
        "vocab.txt",
    ]
    model = bertconv.load(src)
    assert type(model).__name__ == "BertForSequenceClassification"
    assert cli("verify", src, "--device", "cpu")[0] == 0
    assert bertconv.inspect(src).model_class == "BertForSequenceClassification"


def test_a_renamed_state_dict_beside_its_config_converts(tasks, tmp_path, cli):
    src = tmp_path / "mine"
    src.mkdir()
    original = tasks["BertModel", "bin"]
    (src / "config.json").write_bytes((original / "config.json").read_bytes())
    (src / "bert.pt").write_bytes((original / "pytorch_model.bin").read_bytes())
    code, out, err = cli("convert", src / "bert.pt", "--to", "minbert", "--out", tmp_path / "o")
    assert code == 0, err


def test_a_weights_file_is_never_its_own_output(tasks, cli):
    src = tasks["BertModel", "safetensors"]
    code, _, err = cli("convert", src / "model.safetensors", "--out", src)
    assert code == 2 and "is the source directory" in err


def test_a_path_that_is_not_there_says_so(tmp_path, cli):
    code, _, err = cli("convert", tmp_path / "nothing.pt", "--out", tmp_path / "o")
    assert code == NotFoundError.exit_code
    assert "no such directory or file, and not a Hub model id" in err


# Another process writes over every tensor's bytes, in place, then cuts the file short; the model
# loaded before runs again. In a process of its own: a model mapping the file dies of SIGBUS.
REWRITTEN_UNDER_IT = """
import os, sys, torch, bertconv
from bertconv import storage

out = sys.argv[1]
model = bertconv.load(out)
ids = torch.tensor([[2, 7, 9, 3, 0]])
mask = (ids != 0).long()
with torch.no_grad():
    before = model(ids, mask).prediction_logits
    path = os.path.join(out, "model.safetensors")
    tensors = storage.read_header(path)[0].values()
    with open(path, "r+b") as f:
        for t in tensors:
            f.seek(t.start)
            f.write(b"\\x7f" * (t.end - t.start))  # NaN in every float
        f.flush()
        os.fsync(f.fileno())
        f.truncate(min(t.start for t in tensors) + 8)
    after = model(ids, mask).prediction_logits
print("unchanged" if torch.equal(before, after) else "changed")
"""


def test_a_loaded_model_keeps_its_weights_whatever_happens_to_the_file(checkpoints, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    convert_dir(checkpoints["pretraining"], out)
    hostile(out / "model.safetensors")
    done = subprocess.run(
        [sys.executable, "-c", REWRITTEN_UNDER_IT, str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["unchanged"]


def test_load_with_mmap_maps_the_file_as_documented(checkpoints, tmp_path):
    """mmap=True: the weights are the file's pages, and a write to the file shows in them."""
    out = tmp_path / "out"
    convert_dir(checkpoints["base"], out)
    mapped = bertconv.load(out, mmap=True)
    read = bertconv.load(out)
    weight = "encoder.layer.0.attention.self.Wq.weight"
    assert torch.equal(mapped.state_dict()[weight], read.state_dict()[weight])
    from bertconv import storage

    stored = storage.read_header(out / "model.safetensors")[0]
    t = next(t for name, t in stored.items() if name.endswith(weight))
    with open(hostile(out / "model.safetensors"), "r+b") as f:
        f.seek(t.start)
        f.write(b"\x00" * (t.end - t.start))
    assert not mapped.state_dict()[weight].any()  # the mapping follows the file
    assert read.state_dict()[weight].any()  # the copy read into memory does not


EVERY_READ = 10**6  # writes: more than any number of tensors read


class RewrittenWhileRead:
    """Another process writing over a weights file in place (same size, a new time) once the
    first tensor of a read (or a mapping) is in: zeros into every tensor, then 0.75s, and so on.
    Each write is given a time of its own, so that it shows whatever the file system's clock."""

    def __init__(self, monkeypatch, path, times: int, renamed: bool = False):
        from bertconv import storage

        self.path, self.left, self.versions, self.renamed = path, times, 0, renamed
        self.tensors = list(storage.read_header(hostile(path))[0].values())
        os.utime(path, ns=(10**9, 10**9))  # as first looked at
        real = storage.to_torch

        def read_then_rewrite(t, maps=None):
            tensor = real(t, maps)
            if self.left:
                self.left -= 1
                self.rewrite()
            return tensor

        monkeypatch.setattr(storage, "to_torch", read_then_rewrite)

    def rewrite(self):
        self.versions += 1
        fill = b"\x00" if self.versions % 2 else b"\x3f"  # float32 0.0, or 0.75 where 4 in a row
        target = self.path.with_name("new") if self.renamed else self.path
        if self.renamed:  # a new file put in its place, as a download or a save does
            target.write_bytes(self.path.read_bytes())
        with open(target, "r+b") as f:
            for t in self.tensors:
                f.seek(t.start)
                f.write(fill * (t.end - t.start))
        os.utime(target, ns=((self.versions + 1) * 10**9,) * 2)
        os.replace(target, self.path)


@pytest.mark.parametrize("mmap, renamed", [(False, False), (True, False), (False, True)])
def test_load_reads_again_a_file_rewritten_while_it_is_read(
    checkpoints, tmp_path, monkeypatch, mmap, renamed
):
    """The first read mixes the tensors read before the write (or the rename of a new file over
    it) with those read after: it is read again, and the model is the new version whole."""
    out = tmp_path / "out"
    convert_dir(checkpoints["base"], out)
    writer = RewrittenWhileRead(monkeypatch, out / "model.safetensors", 1, renamed)
    model = bertconv.load(out, mmap=mmap)
    assert writer.versions == 1
    assert all(not p.any() for p in model.state_dict().values())  # every tensor the new zeros


@pytest.mark.parametrize("mmap", [False, True])
def test_load_refuses_a_file_rewritten_under_every_read(checkpoints, tmp_path, monkeypatch, mmap):
    out = tmp_path / "out"
    convert_dir(checkpoints["base"], out)
    weights = out / "model.safetensors"
    RewrittenWhileRead(monkeypatch, weights, times=EVERY_READ)
    with pytest.raises(CheckpointError, match=f"{weights}: changed while it was being read, 3 "):
        bertconv.load(out, mmap=mmap)


def test_verify_refuses_a_file_rewritten_under_every_read(checkpoints, tmp_path, monkeypatch, cli):
    out = tmp_path / "out"
    convert_dir(checkpoints["pretraining"], out)
    weights = out / "model.safetensors"
    RewrittenWhileRead(monkeypatch, weights, times=EVERY_READ)
    code, _, err = cli("verify", out, "--device", "cpu")
    assert code == 4, err
    assert f"{weights}: changed while it was being verified, 3 times in a row" in err, err
