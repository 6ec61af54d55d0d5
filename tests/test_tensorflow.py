"""TensorFlow's formats without TensorFlow (issue 11): checkpoints TensorFlow itself wrote
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
from bertconv import tfbundle
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


@pytest.mark.parametrize("name", BUNDLES)
def test_the_writer_produces_the_bytes_tensorflow_produced(name, tmp_path):
    prefix = BUNDLES[name]
    index, data = tmp_path / "w.index", tmp_path / "w.data"
    tfbundle.write_bundle(index, data, tfbundle.read_bundle(prefix))
    assert index.read_bytes() == Path(f"{prefix}.index").read_bytes()
    assert data.read_bytes() == Path(f"{prefix}.data-00000-of-00001").read_bytes()


def test_the_large_index_spans_several_table_blocks():
    """`many` has an index of ~390 KB: TensorFlow cut its table into blocks of 256 KB, and the
    writer must cut it where TensorFlow did (the byte-for-byte test above)."""
    raw = Path(f"{BUNDLES['many']}.index").read_bytes()
    handles, at = [], 0
    for _ in range(4):
        value, at = tfbundle.read_varint(raw[-tfbundle.FOOTER :], at)
        handles.append(value)
    index_block = tfbundle._block(raw, handles[2], handles[3])
    assert len(tfbundle._block_entries(index_block)) >= 2


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


def test_writing_a_tensorflow_checkpoint_and_reading_it_back_is_exact(checkpoints, tmp_path, cli):
    out = tmp_path / "tf"
    code, _, err = cli("convert", checkpoints["pretraining"], "--to", "google-tf", "--out", out)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        "bert_config.json",
        "bert_model.ckpt.data-00000-of-00001",
        "bert_model.ckpt.index",
        "vocab.txt",
    ]
    assert "bert/encoder/layer_0/attention/self/query/kernel" in tensors_of(out / "bert_model.ckpt")
    assert cli("convert", out, "--to", "transformers", "--out", tmp_path / "back")[0] == 0
    back = load_file(tmp_path / "back" / "model.safetensors")
    original = load_file(checkpoints["pretraining"] / "model.safetensors")
    assert back.keys() == original.keys()
    assert all(torch.equal(back[k], original[k]) for k in original)
    assert verify(str(out), "cpu").passed


def test_a_tensorflow_checkpoint_is_never_written_beside_other_weights(checkpoints, tmp_path, cli):
    out = tmp_path / "mixed"
    assert cli("convert", checkpoints["base"], "--out", out)[0] == 0
    code, _, err = cli("convert", checkpoints["base"], "--to", "google-tf", "--out", out)
    assert code == 2 and "would read before a TensorFlow checkpoint" in err
    assert not (out / "bert_model.ckpt.index").exists()


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


@pytest.mark.parametrize("repo", ["tf-only", "h5-only"])
def test_fetch_takes_a_repository_with_only_tensorflow_weights(repo, tmp_path):
    from test_fetch import bertconv as run
    from test_fetch import hub_env

    from localhub import LocalHub

    source = TINY_TF if repo == "tf-only" else H5
    files = {p.name: p for p in source.iterdir() if not p.name.startswith("expected")}
    with LocalHub() as hub:
        hub.add_repo(f"org/{repo}", files)
        done = run(
            "fetch",
            f"org/{repo}",
            "--out",
            str(tmp_path / "out"),
            env=hub_env(hub.url, tmp_path / "hf"),
        )
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["hidden_size"] == 8
