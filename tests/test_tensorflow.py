"""TensorFlow's formats without TensorFlow: checkpoints TensorFlow itself wrote
(tests/fixtures/tf, made by make_tf_fixtures.py) are read exactly, every checksum checked;
bertconv's writer produces the bytes TensorFlow produced; google-research/bert's directories
convert as shipped; transformers' tf_model.h5 is read with h5py."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import bertconv
from bertconv import tfbundle, writing
from bertconv.errors import CheckpointError
from bertconv.verify import verify
from hostile import hostile

FIXTURES = Path(__file__).parent / "fixtures" / "tf"
TINY_TF = FIXTURES / "bert_tiny"
BUNDLES = {"bert_tiny": TINY_TF / "bert_model.ckpt", "many": FIXTURES / "many" / "model.ckpt"}


def tensors_of(prefix: Path) -> dict[str, torch.Tensor]:
    return {n: bertconv.storage.to_torch(t) for n, t in tfbundle.read_bundle(prefix).items()}


def test_reading_gives_exactly_the_tensors_tensorflow_wrote():
    got = tensors_of(BUNDLES["bert_tiny"])
    expected = load_file(TINY_TF / "expected.safetensors")
    for name, value in expected.items():
        assert torch.equal(got[name], value), name
        assert torch.equal(got[f"{name}/adam_m"], (value * 0.01).to(torch.float32))
    assert got["global_step"].dtype == torch.int64 and int(got["global_step"]) == 1000
    assert len(got) == 3 * len(expected) + 1


def test_every_dtype_reads_exactly_as_tensorflow_wrote_it():
    """`many`'s values, made again by numpy from the seed make_tf_fixtures.py gave it: every
    numeric dtype, and shapes (), (3,), (2, 2), (1, 0, 2), read as TensorFlow wrote them."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(1)
    dtypes = [np.float32, np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8, np.int16]
    expected = {}
    for n in range(2500):
        shape = [(), (3,), (2, 2), (1, 0, 2)][n % 4]
        name = f"{rng.integers(1 << 62):016x}/" + "".join(rng.choice(list("abcdefgh_"), 120))
        expected[name] = (rng.standard_normal(shape) * 50).astype(dtypes[n % len(dtypes)])
    got = tfbundle.read_bundle(BUNDLES["many"])
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        t = got[name]
        assert (t.dtype, t.shape) == (TF_NAMES[value.dtype.name], value.shape), name
        assert bertconv.storage.read_bytes(t) == value.tobytes(), name


TF_NAMES = {"float32": "F32", "float16": "F16", "float64": "F64", "int32": "I32", "int64": "I64",
            "int8": "I8", "uint8": "U8", "int16": "I16"}  # fmt: skip


@pytest.mark.parametrize("name", BUNDLES)
def test_the_writer_produces_the_bytes_tensorflow_produced(name, tmp_path):
    prefix = BUNDLES[name]
    index, data = tmp_path / "w.index", tmp_path / "w.data"
    tfbundle.write_bundle(index, data, tfbundle.read_bundle(prefix))
    assert index.read_bytes() == Path(f"{prefix}.index").read_bytes()
    assert data.read_bytes() == Path(f"{prefix}.data-00000-of-00001").read_bytes()


def test_a_writer_that_fails_midway_writes_no_index_and_leaves_no_thread(tmp_path, monkeypatch):
    """Checksums are taken beside the writing, by a thread following it: where the writing
    fails (a full disk, say), the failure is the one raised, and the thread has ended."""
    import errno
    import threading

    from bertconv import storage

    tensors = tfbundle.read_bundle(BUNDLES["many"])
    for name in sorted(tensors)[::2]:  # bytes between the copied ranges: many runs, not one
        t = tensors[name]
        tensors[name] = storage.InMemory(t.dtype, t.shape, storage.read_bytes(t))
    calls = []

    def full_disk(*args):
        calls.append(args)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(*args)

    original = writing._copy_span
    monkeypatch.setattr(writing, "_copy_span", full_disk)
    before = threading.active_count()
    index, data = tmp_path / "w.index", tmp_path / "w.data"
    with pytest.raises(OSError, match="No space left"):
        tfbundle.write_bundle(index, data, tensors)
    assert not index.exists() and len(calls) > 3
    assert threading.active_count() == before


def test_the_large_index_spans_several_table_blocks():
    """`many` has an index of ~390 KB: TensorFlow cut its table into blocks of 256 KB, and the
    writer must cut it where TensorFlow did (the byte-for-byte test above)."""
    raw = Path(f"{BUNDLES['many']}.index").read_bytes()
    assert len(tfbundle.block_handles(raw)) >= 2


def spoiled(tmp_path: Path, file: str, at: int, value: int = 0xFF) -> Path:
    directory = shutil.copytree(TINY_TF, tmp_path / "spoiled")
    data = bytearray((directory / file).read_bytes())
    data[at] ^= value
    (directory / file).write_bytes(bytes(data))
    return hostile(directory / file).parent


@pytest.mark.parametrize(
    "file, at, message",
    [
        ("bert_model.ckpt.data-00000-of-00001", 100, "does not match the checksum its index gives"),
        ("bert_model.ckpt.index", 10, "does not match its checksum"),
        ("bert_model.ckpt.index", -1, "does not end with the table's magic number"),
    ],
)
def test_every_checksum_is_checked(file, at, message, tmp_path, cli):
    directory = spoiled(tmp_path, file, at)
    code, _, err = cli("convert", directory, "--out", tmp_path / "out")
    assert code == 4 and message in err, err
    assert not (tmp_path / "out").exists()


def test_a_damaged_tensor_is_named_wherever_it_lies(tmp_path):
    """The checksums are read in two halves at once: damage in the first tensor, one in the
    middle and the last is each found, and named, whichever half read it."""
    from bertconv import checkpoint

    data = "bert_model.ckpt.data-00000-of-00001"
    tensors = tfbundle.read_bundle(TINY_TF / "bert_model.ckpt")
    by_place = sorted(tensors.items(), key=lambda item: item[1].start)
    for n, (name, t) in enumerate([by_place[0], by_place[len(by_place) // 2], by_place[-1]]):
        directory = spoiled(tmp_path / str(n), data, t.end - 1)
        with pytest.raises(CheckpointError, match="does not match the checksum") as e:
            checkpoint.read_checkpoint(directory)
        assert repr(name) in str(e.value)


def test_a_truncated_data_file_is_named(tmp_path, cli):
    directory = shutil.copytree(TINY_TF, tmp_path / "cut")
    data = directory / "bert_model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])
    code, _, err = cli("convert", directory, "--out", tmp_path / "out")
    assert code == 4 and "ends before the tensors its index names" in err, err


def test_google_researchs_directory_converts_as_shipped_and_verifies(tmp_path, cli):
    """bert_config.json and vocab.txt, no config.json; Adam's slots and global_step skipped and
    said to be; kernels transposed."""
    code, _, err = cli("convert", TINY_TF, "--out", tmp_path / "out")
    assert code == 0, err
    assert "skipped 92 optimizer slots (adam_m, adam_v)" in err
    assert "skipped global_step: not weights" in err
    written = load_file(tmp_path / "out" / "model.safetensors")
    expected = load_file(TINY_TF / "expected.safetensors")
    query = "bert/encoder/layer_1/attention/self/query/kernel"
    assert torch.equal(written["encoder.layer.1.attention.self.Wq.weight"], expected[query].T)
    assert torch.equal(
        written["cls.seq_relationship.weight"], expected["cls/seq_relationship/output_weights"]
    )
    report = verify(str(tmp_path / "out"), "cpu")
    assert report.passed and report.model_class == "BertForPreTraining"
    assert verify(str(TINY_TF), "cpu").passed  # the TensorFlow directory itself


def test_load_reads_tensorflow_checkpoints_as_they_are(tmp_path):
    """bertconv.load on google-research/bert's directory and on tf_model.h5, unconverted:
    every weight where the conversion puts it."""
    model = bertconv.load(TINY_TF)
    assert type(model).__name__ == "BertForPreTraining"
    expected = load_file(TINY_TF / "expected.safetensors")
    kernel = "bert/encoder/layer_1/intermediate/dense/kernel"
    assert torch.equal(model.encoder.layer[1].intermediate.dense.weight, expected[kernel].T)
    assert torch.equal(model.cls.predictions.bias, expected["cls/predictions/output_bias"])
    masked = bertconv.load(H5)
    assert type(masked).__name__ == "BertForMaskedLM"
    weights = load_file(H5 / "expected.safetensors")
    beta = weights["mlm___cls/predictions/transform/LayerNorm/beta:0"]
    assert torch.equal(masked.cls.predictions.transform.LayerNorm.beta, beta)


def sharded(tmp_path: Path) -> Path:
    """bert_tiny with its tensors in two data files, as a sharded Saver writes them: the
    second half of the names in shard 1, each file's offsets from its own start."""
    directory = shutil.copytree(TINY_TF, tmp_path / "sharded")
    for f in directory.glob("bert_model.ckpt.*"):
        f.unlink()
    prefix = directory / "bert_model.ckpt"
    tensors = tfbundle.read_bundle(BUNDLES["bert_tiny"])
    names = sorted(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
    builder = tfbundle.TableBuilder()
    builder.add(b"", b"\x08\x02\x1a\x02\x08\x01")  # num_shards 2
    entries = {}
    for shard, half in enumerate(halves):
        data = tfbundle.data_file(prefix, shard, 2)
        writing.write_raw(data, [tensors[n] for n in half])
        offset = 0
        for name in half:
            t, size = tensors[name], bertconv.storage.nbytes(tensors[name])
            crc = tfbundle.mask(tfbundle.crc32c(bertconv.storage.read_bytes(t)))
            proto = tfbundle.entry_proto(tfbundle.TF_DTYPES[t.dtype], t.shape, offset, size, crc)
            entries[name] = proto + (b"\x18\x01" if shard else b"")  # shard_id 1
            offset += size
    for name in names:
        builder.add(name.encode(), entries[name])
    Path(f"{prefix}.index").write_bytes(builder.finish())
    return directory


def test_a_checkpoint_in_several_data_files_is_read_from_each(tmp_path, cli):
    directory = sharded(tmp_path)
    assert sorted(p.name for p in directory.glob("*.data-*")) == [
        "bert_model.ckpt.data-00000-of-00002",
        "bert_model.ckpt.data-00001-of-00002",
    ]
    got = tensors_of(directory / "bert_model.ckpt")
    expected = tensors_of(BUNDLES["bert_tiny"])
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[n], expected[n]) for n in expected)
    (directory / "bert_model.ckpt.data-00001-of-00002").unlink()
    code, _, err = cli("convert", directory, "--out", tmp_path / "out")
    assert code == 3 and "its data file bert_model.ckpt.data-00001-of-00002 is not there" in err


TF_WRITTEN = [
    "bert_config.json",
    "bert_model.ckpt.data-00000-of-00001",
    "bert_model.ckpt.index",
    "bertconv-manifest.json",  # what bertconv wrote, for its next conversion into the directory
    "vocab.txt",
]


def test_writing_a_tensorflow_checkpoint_and_reading_it_back_is_exact(checkpoints, tmp_path, cli):
    out = tmp_path / "tf"
    code, _, err = cli("convert", checkpoints["pretraining"], "--to", "google-tf", "--out", out)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == TF_WRITTEN
    assert "bert/encoder/layer_0/attention/self/query/kernel" in tensors_of(out / "bert_model.ckpt")
    assert cli("convert", out, "--to", "transformers", "--out", tmp_path / "back")[0] == 0
    back = load_file(tmp_path / "back" / "model.safetensors")
    original = load_file(checkpoints["pretraining"] / "model.safetensors")
    assert back.keys() == original.keys()
    assert all(torch.equal(back[k], original[k]) for k in original)
    assert verify(str(out), "cpu").passed


def test_a_tensorflow_checkpoint_is_never_written_beside_other_weights(checkpoints, tmp_path, cli):
    """Weights bertconv did not write are refused; an earlier conversion's are replaced."""
    out = tmp_path / "mixed"
    assert cli("convert", checkpoints["base"], "--out", out)[0] == 0
    shutil.copy(checkpoints["legacy-bin"] / "pytorch_model.bin", out)
    code, _, err = cli("convert", checkpoints["base"], "--to", "google-tf", "--out", out)
    assert code == 2 and "holds pytorch_model.bin, which bertconv would read before" in err, err
    assert not (out / "bert_model.ckpt.index").exists()
    (out / "pytorch_model.bin").unlink()
    code, _, err = cli("convert", checkpoints["base"], "--to", "google-tf", "--out", out)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == TF_WRITTEN


def test_bertconv_does_not_write_h5(checkpoints, tmp_path, cli):
    code, _, err = cli(
        "convert", checkpoints["base"], "--to", "transformers-tf", "--out", tmp_path / "x"
    )
    assert code == 2 and "does not write them" in err


def test_several_checkpoints_in_one_directory_need_the_checkpoint_file(tmp_path, cli):
    directory = shutil.copytree(TINY_TF, tmp_path / "two")
    for f in list(directory.glob("bert_model.ckpt.*")):
        shutil.copy(f, directory / f.name.replace("bert_model.ckpt", "model.ckpt-2"))
    code, _, err = cli("convert", directory, "--out", tmp_path / "o")
    assert code == 4 and "holds 2 TensorFlow checkpoints" in err
    (directory / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-2"\n')
    assert cli("convert", directory, "--out", tmp_path / "o")[0] == 0


H5 = FIXTURES / "h5_masked_lm"


def test_tf_model_h5_is_read_exactly_and_verifies(tmp_path, cli):
    from bertconv.h5weights import read_h5

    got = {n: bertconv.storage.to_torch(t) for n, t in read_h5(H5 / "tf_model.h5").items()}
    expected = load_file(H5 / "expected.safetensors")
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[n], expected[n]) for n in expected)
    code, _, err = cli("convert", H5, "--out", tmp_path / "out")
    assert code == 0 and "(BertForMaskedLM: mlm)" in err, err
    assert verify(str(H5), "cpu").passed


def test_without_h5py_reading_h5_says_which_extra():
    probe = (
        "import sys; sys.modules['h5py'] = None\n"
        f"sys.argv = ['bertconv', 'inspect', {str(H5)!r}]\n"
        "from bertconv.cli import main; main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 6, done.stderr
    assert "needs h5py: pip install 'bertconv[h5]'" in done.stderr


# What fetch downloads of each: the config, the tokenizer, and the one form of weights.
TF_ONLY = {
    "bert_config.json",
    "vocab.txt",
    "bert_model.ckpt.index",
    "bert_model.ckpt.data-00000-of-00001",
}
H5_ONLY = {"config.json", "vocab.txt", "tf_model.h5"}
OFFLINE = {"HF_HUB_OFFLINE": "1"}
DECOYS = {"README.md": b"# a model\n", "flax_model.msgpack": b"\0" * 64, "onnx/model.onnx": b"x"}


@pytest.mark.parametrize("repo, wanted", [("tf-only", TF_ONLY), ("h5-only", H5_ONLY)])
def test_fetch_takes_a_repository_with_only_tensorflow_weights(repo, wanted, tmp_path):
    """Only the files the conversion reads are downloaded; a second fetch, offline, finds them
    in the cache by the config's name (bert_config.json for a TensorFlow release)."""
    from test_fetch import bertconv as run
    from test_fetch import hub_env

    from localhub import LocalHub

    source = TINY_TF if repo == "tf-only" else H5
    files = {p.name: p for p in source.iterdir() if not p.name.startswith("expected")}
    with LocalHub() as hub:
        hub.add_repo(f"org/{repo}", files | DECOYS)
        env = hub_env(hub.url, tmp_path / "hf")
        done = run("fetch", f"org/{repo}", "--out", str(tmp_path / "out"), env=env)
        asked = {r.path.split("/resolve/")[1].split("/", 1)[1] for r in hub.requests
                 if r.method == "GET" and "/resolve/" in r.path}  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert asked == wanted
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["hidden_size"] == 8
    if repo == "tf-only":
        assert "skipped 92 optimizer slots (adam_m, adam_v)" in done.stderr
    again = run("fetch", f"org/{repo}", "--out", str(tmp_path / "again"), env=env | OFFLINE)
    assert again.returncode == 0 and "using the cached copy" in again.stderr, again.stderr
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (
        tmp_path / "out" / "model.safetensors"
    ).read_bytes()
