"""Files from strangers, run as a user runs them: checkpoints, configs, shard indexes, pickles,
tables and links that break their format, try to escape the checkpoint or ask for unbounded
work. Each gives its documented exit code (never 70) and one message, never a traceback; the
source and the user's files are left as they were; no code from a file runs."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertconv
from bertconv.tables import TABLES
from hostile import (
    CANARY,
    CLI,
    RAW_HEADERS,
    SAFETENSORS_MUTATIONS,
    convert_fails,
    copy_checkpoint,
    duplicate_name,
    hostile,
    malicious_payloads,
    refused,
    save_torch,
    split_safetensors,
    stack_global_pickle,
    state_dict_of,
    write_safetensors,
    zip_bomb,
    zip_with_pickle,
)

ZOO = Path(__file__).parent / "zoo"


# Security: nothing in a file runs code or redirects a path ----------------------------------------


def test_planted_lock_files_redirect_nothing(source, tmp_path, monkeypatch):
    """Another user plants symlinks (and a directory of their own) where bertconv once kept its
    locks. bertconv keeps no lock file: the lock is the output directory's own."""
    tmp = tmp_path / "shared-tmp"
    locks = tmp / "bertconv-locks"
    locks.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    from binascii import crc32

    name = f"{out.name}-{crc32(str(out.resolve()).encode()):08x}.lock"
    (locks / name).symlink_to(victim)
    locks.chmod(0o500)
    env = os.environ | {"TMPDIR": str(tmp)}
    done = subprocess.run(
        [*CLI, "convert", source, "--out", out], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in tmp.rglob("*")) == ["bertconv-locks", name]


@pytest.mark.parametrize(
    "recorded", ["../../../../tmp/x", "/tmp/x", "minbert.toml", "transformers/../minbert", ""]
)
def test_a_layout_named_in_metadata_is_never_a_path(recorded, source, tmp_path, cli):
    planted = tmp_path / "x.toml"
    planted.write_text((TABLES / "minbert.toml").read_text())
    tensors = load_file(source / "model.safetensors")
    save_file(tensors, source / "model.safetensors", {"bertconv.layout": recorded})
    convert_fails(cli, source, tmp_path, 4, "not one bertconv ships", "--from")


@pytest.mark.parametrize("shard", ["/etc/passwd", "../../../../etc/passwd", "sub/x.bin", ".."])
def test_shard_names_are_plain_file_names(shard, source, tmp_path, cli):
    (source / "model.safetensors").unlink()
    (source / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"embeddings.word_embeddings.weight": shard}})
    )
    convert_fails(cli, source, tmp_path, 4, "only plain file names")


def malicious_files(tmp_path: Path) -> dict[str, Path]:
    """Real torch-format files (zip and legacy) whose loading would run code."""
    tmp_path.mkdir()
    files = {}
    for name, payload in malicious_payloads().items():
        for legacy in (False, True):
            path = tmp_path / f"{name}-{'legacy' if legacy else 'zip'}.bin"
            files[path.stem] = save_torch(
                {"embeddings.word_embeddings.weight": payload}, path, legacy
            )
    template = save_torch({"a": torch.zeros(2)}, tmp_path / "template.bin")
    files["stack-global"] = zip_with_pickle(template, stack_global_pickle(), tmp_path / "sg.bin")
    return files


def test_malicious_pickles_are_refused_and_never_run(source, tmp_path, cli, monkeypatch):
    canary = tmp_path / "canary"
    monkeypatch.setenv(CANARY, str(canary))
    (source / "model.safetensors").unlink()
    for name, path in malicious_files(tmp_path / "pickles").items():
        (source / "pytorch_model.bin").write_bytes(path.read_bytes())
        hostile(source / "pytorch_model.bin")
        err = convert_fails(cli, source, tmp_path, 4, "never runs code")
        assert not canary.exists(), f"{name}: the pickle's code ran"
        # torch's own advice (weights_only=False, allowlisting a global) is never passed on
        for advice in ("weights_only=False", "add_safe_globals", "safe_globals", "allowlist"):
            assert advice not in err, (name, err)


def test_torchs_own_refusal_never_passes_on_its_advice(source, tmp_path, cli):
    """A pickle that names only what a state dict needs, but that torch's weights-only reader
    refuses (INST, an opcode it does not implement): torch's message advises weights_only=False;
    bertconv's says what was refused, and nothing more."""
    template = save_torch({"a": torch.zeros(2)}, tmp_path / "t.bin")
    inst = zip_with_pickle(template, b"(icollections\nOrderedDict\n.", tmp_path / "inst.bin")
    (source / "model.safetensors").unlink()
    (source / "pytorch_model.bin").write_bytes(inst.read_bytes())
    hostile(source / "pytorch_model.bin")
    err = convert_fails(cli, source, tmp_path, 4, "torch's weights-only reader refused it")
    for advice in ("weights_only", "safe_globals", "can still be loaded", "trust the source"):
        assert advice not in err, err


def test_a_compressed_bin_or_zip_bomb_is_refused_unread(source, tmp_path, cli):
    (source / "model.safetensors").unlink()
    template = save_torch({"a": torch.zeros(4)}, tmp_path / "t.bin")
    for path in (
        zip_bomb(template, tmp_path / "bomb.bin"),
        zip_with_pickle(template, b"", tmp_path / "deflated.bin", compress=True),
    ):
        (source / "pytorch_model.bin").write_bytes(path.read_bytes())
        hostile(source / "pytorch_model.bin")
        convert_fails(cli, source, tmp_path, 4, "compressed members")


# The safetensors reader is as strict as the format ------------------------------------------------


@pytest.mark.parametrize("mutation", SAFETENSORS_MUTATIONS)
def test_a_header_breaking_the_format_is_refused(mutation, source, tmp_path, cli):
    header, data = split_safetensors(source / "model.safetensors")
    header, data = SAFETENSORS_MUTATIONS[mutation](header, data)
    write_safetensors(source / "model.safetensors", header, data)
    convert_fails(cli, source, tmp_path, 4, "not a readable safetensors file")


def test_a_name_twice_in_the_header_is_refused(source, tmp_path, cli):
    header, data = split_safetensors(source / "model.safetensors")
    write_safetensors(source / "model.safetensors", duplicate_name(header), data)
    convert_fails(cli, source, tmp_path, 4, "twice")


@pytest.mark.parametrize("kind", RAW_HEADERS)
def test_a_header_that_is_no_object_of_entries_is_refused(kind, source, tmp_path, cli):
    write_safetensors(source / "model.safetensors", RAW_HEADERS[kind], b"")
    convert_fails(cli, source, tmp_path, 4, "not a readable safetensors file")


@pytest.mark.parametrize(
    "content",
    [b"", b"\x07", (200_000_000).to_bytes(8, "little") + b"{}", b"\x03" + bytes(7) + b"{}"],
)
def test_short_empty_or_oversized_header_files(content, source, tmp_path, cli):
    (source / "model.safetensors").write_bytes(content)
    hostile(source / "model.safetensors")
    convert_fails(cli, source, tmp_path, 4, "not a readable safetensors file")


def test_written_metadata_is_strings_even_from_odd_sources(source, tmp_path, cli):
    tensors = load_file(source / "model.safetensors")
    save_file(tensors, source / "model.safetensors", {"bertconv.revision": "x" * 3, "k": ""})
    assert cli("convert", source, "--out", tmp_path / "out")[0] == 0
    from safetensors import safe_open

    with safe_open(tmp_path / "out" / "model.safetensors", "pt") as f:
        assert all(isinstance(v, str) for v in f.metadata().values())


# One message, never a traceback -------------------------------------------------------------------

BAD_FIELDS = {  # one field of a real config.json, spoiled
    "no heads": ({"num_attention_heads": 0}, "num_attention_heads=0 is outside"),
    "a float size": ({"hidden_size": 32.0}, "hidden_size=32.0 is not an integer"),
    "a string size": ({"hidden_size": "32"}, "hidden_size='32' is not an integer"),
    "a bool size": ({"vocab_size": True}, "vocab_size=True is not an integer"),
    "a billion layers": ({"num_hidden_layers": 10**9}, "num_hidden_layers=1000000000"),
    "negative layers": ({"num_hidden_layers": -1}, "num_hidden_layers=-1"),
    "a null size": ({"hidden_size": None}, "hidden_size=None is not an integer"),
    "a string epsilon": ({"layer_norm_eps": "x"}, "layer_norm_eps='x'"),
    "a dropout of 2": ({"hidden_dropout_prob": 2}, "hidden_dropout_prob=2"),
    "a list activation": ({"hidden_act": ["gelu"]}, "hidden_act=['gelu']"),
    "a pad id past the vocabulary": ({"pad_token_id": 1000}, "pad_token_id=1000"),
    "rotary positions": ({"position_embedding_type": "rotary"}, "'rotary' is not supported"),
}


@pytest.mark.parametrize("kind", BAD_FIELDS)
def test_a_bad_config_field_is_one_message_naming_it(kind, source, tmp_path, cli):
    field, message = BAD_FIELDS[kind]
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps(config | field))
    convert_fails(cli, source, tmp_path, 4, message)


BAD_CONFIG_FILES = {
    "a list": (b"[1, 2]", "holds a JSON array, not an object"),
    "null": (b"null", "holds a JSON null, not an object"),
    "a string": (b'"bert"', "holds a JSON string, not an object"),
    "NaN": (b'{"layer_norm_eps": NaN}', "not valid JSON"),
    "a huge number": (b'{"hidden_size": 1' + b"0" * 5000 + b"}", "not valid JSON"),
    "deeply nested": (b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}", "not valid JSON"),
    "not UTF-8": (b'{"a": "\xff"}', "not valid JSON"),
    "empty": (b"", "not valid JSON"),
}


@pytest.mark.parametrize("kind", BAD_CONFIG_FILES)
def test_a_config_that_is_no_json_object_is_one_message(kind, source, tmp_path, cli):
    content, message = BAD_CONFIG_FILES[kind]
    (source / "config.json").write_bytes(content)
    convert_fails(cli, source, tmp_path, 4, message)


def test_a_config_larger_than_any_config_is_not_read_whole(source, tmp_path, cli):
    with open(source / "config.json", "wb") as f:
        f.truncate(1 << 30)  # sparse: a gigabyte of nothing on disk
    convert_fails(cli, source, tmp_path, 4, "larger than 64 MB")


@pytest.mark.parametrize(
    "index, code, message",
    [
        ({"weight_map": ["model-1.safetensors"]}, 4, "not a shard index"),
        ({"metadata": {}}, 4, "not a shard index"),
        ({"weight_map": {"a": 1}}, 4, "not a shard index"),
        ([], 4, "not an object"),
        ({"weight_map": {"a": "model-1.safetensors"}}, 3, "lists shards that are not there"),
    ],
)
def test_a_bad_shard_index_is_one_message(index, code, message, source, tmp_path, cli):
    (source / "model.safetensors").rename(source / "model-0.safetensors")
    (source / "model.safetensors.index.json").write_text(json.dumps(index))
    convert_fails(cli, source, tmp_path, code, message)


def test_an_index_that_does_not_match_its_shards(checkpoints, tmp_path, cli):
    src = copy_checkpoint(checkpoints["sharded"], tmp_path / "src")
    index = json.loads((src / "model.safetensors.index.json").read_text())
    first, second = sorted(set(index["weight_map"].values()))[:2]
    moved = next(k for k, v in index["weight_map"].items() if v == first)
    index["weight_map"][moved] = second
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    convert_fails(cli, src, tmp_path, 4, "does not match its shards", moved)


def bin_checkpoint(source: Path, content) -> Path:
    (source / "model.safetensors").unlink()
    path = source / "pytorch_model.bin"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    return hostile(path)


@pytest.mark.parametrize(
    "kind, message",
    [
        ("text", "not a readable PyTorch checkpoint"),
        ("html", "HTML page"),
        ("a training checkpoint", "holds dicts under ['model']"),
        ("a complex tensor", "which a state dict never needs"),
        ("a sparse tensor", "which a state dict never needs"),
        ("a list", "holds a list, not a state dict"),
        ("an int key", "not plain tensors"),
        ("truncated", "not a readable PyTorch checkpoint"),
    ],
)
def test_a_bad_bin_is_one_message(kind, message, source, tmp_path, cli):
    sd = state_dict_of(source / "model.safetensors")
    name = "bert.embeddings.word_embeddings.weight"
    content = {
        "text": b"just some text\n",
        "html": b"<!DOCTYPE html><html>Sign in</html>",
        "a training checkpoint": {"model": sd, "step": 3},
        "a complex tensor": sd | {name: sd[name].to(torch.complex64)},
        "a sparse tensor": sd | {name: sd[name].to_sparse()},
        "a list": list(sd.values()),
        "an int key": {0: sd[name]},
        "truncated": None,
    }[kind]
    if kind == "truncated":
        torch.save(sd, tmp_path / "whole.bin")
        content = (tmp_path / "whole.bin").read_bytes()[:5000]
    bin_checkpoint(source, content)
    convert_fails(cli, source, tmp_path, 4, message)


# Links out of the checkpoint ----------------------------------------------------------------------


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


def test_a_config_linking_out_of_the_checkpoint_is_refused(source, tmp_path, cli):
    private = tmp_path / "private.json"
    private.write_text((source / "config.json").read_text()[:-1] + ', "token": "secret"}')
    (source / "config.json").unlink()
    (source / "config.json").symlink_to(private)
    refused(cli("convert", source, "--out", tmp_path / "o"), 4, "outside the checkpoint")
    assert not (tmp_path / "o").exists()


# Unbounded reads and bombs ------------------------------------------------------------------------


def run_with_timeout(*args, timeout=60):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_a_fifo_is_refused_not_waited_on(name, source, tmp_path):
    (source / name).unlink()
    os.mkfifo(source / name)
    done = run_with_timeout("convert", source, "--out", tmp_path / "out")
    assert done.returncode == 4 and "is a FIFO" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "vocab.txt"])
def test_a_device_is_refused_not_read_forever(name, source, tmp_path, cli):
    (source / name).unlink()
    (source / name).symlink_to("/dev/zero")
    convert_fails(cli, source, tmp_path, 4, "is a character device", load=name != "vocab.txt")


def test_a_huge_tokenizer_file_is_copied_in_constant_memory(source, tmp_path):
    with open(source / "tokenizer.json", "wb") as f:
        f.truncate(256 << 20)  # sparse
    probe = textwrap.dedent(f"""
        import resource, sys
        from bertconv.cli import run
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        code = run(["convert", {str(source)!r}, "--out", {str(tmp_path / "out")!r}])
        grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10
        print(code, grew)
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    code, grew_mb = map(int, done.stdout.splitlines()[-1].split())
    assert code == 0, done.stderr
    assert grew_mb < 64, f"copying a 256 MB tokenizer.json grew memory by {grew_mb} MB"
    assert (tmp_path / "out" / "tokenizer.json").stat().st_size == 256 << 20


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


# Tables from strangers ----------------------------------------------------------------------------


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


# Convert refuses what load could not use ----------------------------------------------------------


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t["bert.pooler.dense.bias"].long(), "bert.pooler.dense.bias is I64"),
        (lambda t: t["bert.pooler.dense.bias"].half(), "bert.pooler.dense.bias is F16, the other"),
    ],
)
def test_dtypes_load_cannot_use_are_refused(edit, message, source, tmp_path, cli):
    tensors = load_file(source / "model.safetensors")
    tensors["bert.pooler.dense.bias"] = edit(tensors)
    save_file(tensors, source / "model.safetensors")
    convert_fails(cli, source, tmp_path, 4, "wrong dtypes", message)


def test_one_floating_dtype_throughout_converts_and_runs(source, tmp_path, cli, batch):
    tensors = {k: v.double() for k, v in load_file(source / "model.safetensors").items()}
    save_file(tensors, source / "model.safetensors")
    assert cli("convert", source, "--out", tmp_path / "out")[0] == 0
    model = bertconv.load(tmp_path / "out")
    assert model(**batch).last_hidden_state.dtype == torch.float64


# NaN and Inf --------------------------------------------------------------------------------------


def spoil(source: Path, values: dict[str, tuple[tuple, float]]) -> None:
    tensors = load_file(source / "model.safetensors")
    for name, (index, value) in values.items():
        tensors[name][index] = value
    save_file(tensors, source / "model.safetensors")


def test_convert_names_tensors_holding_nan_or_inf_and_keeps_their_bytes(source, tmp_path, cli):
    spoil(
        source,
        {
            "bert.embeddings.position_embeddings.weight": ((63, 5), float("nan")),
            "bert.encoder.layer.1.output.dense.bias": ((0,), float("-inf")),
        },
    )
    code, _, err = cli("convert", source, "--to", "transformers", "--out", tmp_path / "out")
    assert code == 0, err
    assert "2 tensors of the source hold NaN or Inf, copied as they are" in err
    assert "bert.embeddings.position_embeddings.weight" in err
    assert "bert.encoder.layer.1.output.dense.bias" in err
    original = load_file(source / "model.safetensors")
    written = load_file(tmp_path / "out" / "model.safetensors")
    assert written.keys() == original.keys()
    assert all(
        torch.equal(written[k].view(torch.uint8), v.view(torch.uint8)) for k, v in original.items()
    )
    assert torch.isnan(written["bert.embeddings.position_embeddings.weight"][63, 5])


def test_a_conversion_that_transposes_names_them_too(source, tmp_path, cli):
    """Writing TensorFlow's layout transposes the kernels, and the scan beside it is numpy's."""
    kernel = "bert.encoder.layer.0.intermediate.dense.weight"
    spoil(source, {kernel: ((3, 7), float("inf"))})
    code, _, err = cli("convert", source, "--to", "google-tf", "--out", tmp_path / "out")
    assert code == 0, err
    assert "1 tensors of the source hold NaN or Inf" in err and kernel in err


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_the_scan_finds_nan_and_inf_in_every_float_dtype(dtype, tmp_path):
    from bertconv import storage

    clean = torch.randn(1000, 9, generator=torch.Generator().manual_seed(0)).to(dtype)
    clean[3, 3] = torch.finfo(dtype).max  # the largest finite value is not Inf
    tensors = {"clean": clean}
    for i, value in enumerate([float("nan"), float("inf"), float("-inf")]):
        spoiled = clean.clone()
        spoiled[997 - i, 8] = value
        tensors[f"bad{i}"] = spoiled
    save_file(tensors, tmp_path / "t.safetensors")
    stored, _ = storage.read_header(tmp_path / "t.safetensors")
    assert storage.nonfinite(stored) == ["bad0", "bad1", "bad2"]
    # numpy's scan, for conversions that transpose, finds the same
    assert storage.nonfinite(stored, vectorised=True) == ["bad0", "bad1", "bad2"]


def test_verify_fails_naming_a_nan_weight_even_one_the_inputs_never_touch(source, cli):
    spoil(source, {"bert.embeddings.position_embeddings.weight": ((63, 0), float("nan"))})
    code, out, err = cli("verify", source)
    assert code == 1, err
    assert "bert.embeddings.position_embeddings.weight" in out
    assert out.rstrip().endswith("FAILED: weights hold NaN or Inf")


# Odd but valid files are not blamed ---------------------------------------------------------------


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
