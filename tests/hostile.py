"""Hostile files, made the way strangers' files really come: safetensors headers that break the
format, pickles that would run code, configs and indexes of the wrong shape. Shared by
the tests of files from strangers and of outputs, and the fuzzer (fuzz.py).

Every file a test makes on purpose to be unreadable is registered with `hostile()`, so that the
session's last check (conftest.py) can open every other safetensors file the suite wrote with
safetensors' own reader."""

import hashlib
import io
import json
import os
import pickle
import struct
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

import bertconv
from bertconv.errors import BertconvError

HOSTILE: set[Path] = set()
CANARY = "BERTCONV_CANARY"  # the environment variable naming the file a pickle's code would make


def hostile(path: Path) -> Path:
    """Register a file that is unreadable on purpose."""
    HOSTILE.add(Path(path).resolve())
    return path


def copy_checkpoint(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def split_safetensors(path: Path) -> tuple[dict, bytes]:
    """The header of a safetensors file as a dict, and its data section."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def join_safetensors(header, data: bytes, pad: bool = True) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def write_safetensors(path: Path, header, data: bytes) -> Path:
    path.write_bytes(join_safetensors(header, data))
    return hostile(path)


def first_tensors(header: dict, n: int = 2) -> list[str]:
    """The first n tensor names in data order."""
    names = sorted(
        (k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"]
    )
    return names[:n]


# Each mutation breaks one rule of the safetensors format; (header, data) -> (header, data).
def _negative_offset(h, d):
    a = first_tensors(h, 1)[0]
    h[a]["data_offsets"] = [-8, h[a]["data_offsets"][1] - 8]
    return h, d


def _overlap(h, d):
    a, b = first_tensors(h)
    h[b]["data_offsets"] = list(h[a]["data_offsets"])
    h[b]["shape"], h[b]["dtype"] = h[a]["shape"], h[a]["dtype"]
    return h, d


def _gap(h, d):
    for name in h:
        if name != "__metadata__":
            h[name]["data_offsets"] = [x + 4 for x in h[name]["data_offsets"]]
    return h, b"\0" * 4 + d


def _trailing_bytes(h, d):
    return h, d + b"\0" * 16


def _truncated(h, d):
    return h, d[:-3]


def _float_in_shape(h, d):
    a = first_tensors(h, 1)[0]
    h[a]["shape"] = [float(x) for x in h[a]["shape"]]
    return h, d


def _bool_in_shape(h, d):
    a = first_tensors(h, 1)[0]
    h[a]["shape"] = [True] * len(h[a]["shape"])
    return h, d


def _unknown_dtype(h, d):
    h[first_tensors(h, 1)[0]]["dtype"] = "F128"
    return h, d


def _dtype_of_wrong_size(h, d):
    h[first_tensors(h, 1)[0]]["dtype"] = "F16"
    return h, d


def _extra_field(h, d):
    h[first_tensors(h, 1)[0]]["offsets"] = [0, 0]
    return h, d


def _missing_field(h, d):
    del h[first_tensors(h, 1)[0]]["dtype"]
    return h, d


def _three_offsets(h, d):
    a = first_tensors(h, 1)[0]
    h[a]["data_offsets"] = [*h[a]["data_offsets"], 0]
    return h, d


def _metadata_not_strings(h, d):
    h["__metadata__"] = {"format": "pt", "bertconv.revision": 5}
    return h, d


def _metadata_a_list(h, d):
    h["__metadata__"] = ["format", "pt"]
    return h, d


def _all_tensors_one_range(h, d):
    names = first_tensors(h, len(h))
    a = names[0]
    for name in names[1:]:
        h[name] = dict(h[a])
    return h, d[: h[a]["data_offsets"][1]]


SAFETENSORS_MUTATIONS = {
    "negative offset": _negative_offset,
    "overlapping tensors": _overlap,
    "a gap before the data": _gap,
    "bytes after the last tensor": _trailing_bytes,
    "data cut short": _truncated,
    "a float in a shape": _float_in_shape,
    "a bool in a shape": _bool_in_shape,
    "an unknown dtype": _unknown_dtype,
    "a dtype of another size": _dtype_of_wrong_size,
    "an extra field": _extra_field,
    "a missing field": _missing_field,
    "three offsets": _three_offsets,
    "metadata not strings": _metadata_not_strings,
    "metadata a list": _metadata_a_list,
    "every tensor on one range": _all_tensors_one_range,
}


def duplicate_name(header: dict) -> bytes:
    """The header's JSON text with its first tensor written twice (JSON parsers keep one)."""
    a = first_tensors(header, 1)[0]
    text = json.dumps(header)
    entry = json.dumps({a: header[a]})[1:-1]
    return text[:-1].encode() + b", " + entry.encode() + b"}"


RAW_HEADERS = {  # header texts that are not an object of entries at all
    "null": b"null",
    "a list": b"[1, 2]",
    "a number": b"42",
    "not UTF-8": b'{"\xff\xfe": 1}',
    "NaN": b'{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}',
    "nested deeply": b"{" + b'"a":[' * 100000 + b"]" * 100000 + b"}",
}


# Pickles. torch.save writes what an object's __reduce__ returns, so each of these is a real
# torch-format file whose loading would call the named function.
class Reduce:
    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args

    def __call__(self):  # pickle wants a callable where a nested reduction stands for one
        raise NotImplementedError


def canary_command() -> str:
    return f'touch "${CANARY}"'


def malicious_payloads() -> dict[str, object]:
    """Objects whose unpickling would run code (each would create the canary file), including
    the routes that past weights_only escapes took: a global torch allows for other uses, a
    nested torch.load, a legacy storage loader."""
    import subprocess

    command = canary_command()
    exec_code = f"import os; open(os.environ[{CANARY!r}], 'w').close()"
    inner = io.BytesIO()
    pickle.dump(Reduce(os.system, command), inner, protocol=2)
    return {
        "os.system": Reduce(os.system, command),
        "builtins.exec": Reduce(exec, exec_code),
        "builtins.eval": Reduce(eval, f"exec({exec_code!r})"),
        "subprocess.call": Reduce(subprocess.call, ["sh", "-c", command]),
        "builtins.getattr": Reduce(Reduce(getattr, Reduce(__import__, "os"), "system"), command),
        "torch.load": Reduce(torch.load, io.BytesIO(inner.getvalue())),
        "torch.storage._load_from_bytes": Reduce(torch.storage._load_from_bytes, inner.getvalue()),
        "pickle.loads": Reduce(pickle.loads, inner.getvalue()),
    }


def save_torch(obj, path: Path, legacy: bool = False) -> Path:
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy)
    return hostile(path)


def stack_global_pickle() -> bytes:
    """A protocol-4 pickle naming os.system through STACK_GLOBAL, the names memoised first."""
    command = canary_command().encode()
    return (
        b"\x80\x04"  # PROTO 4
        + b"\x8c\x02os\x94"  # SHORT_BINUNICODE 'os', MEMOIZE
        + b"\x8c\x06system\x94"  # SHORT_BINUNICODE 'system', MEMOIZE
        + b"\x93"  # STACK_GLOBAL
        + b"\x8c"
        + bytes([len(command)])
        + command
        + b"\x85R."  # TUPLE1, REDUCE, STOP
    )


def zip_with_pickle(template: Path, pickle_bytes: bytes, path: Path, compress=False) -> Path:
    """A copy of the torch zip file `template` with its data.pkl replaced."""
    with zipfile.ZipFile(template) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = pickle_bytes if info.filename.endswith("/data.pkl") else src.read(info)
            kind = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
            dst.writestr(info.filename, data, compress_type=kind)
    return hostile(path)


def zip_bomb(template: Path, path: Path, size: int = 256 << 20) -> Path:
    """A torch zip whose storages are deflated runs of `size` zeros: a few KB on disk each."""
    with zipfile.ZipFile(template) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            if "/data/" not in info.filename or info.filename.endswith("serialization_id"):
                dst.writestr(info, src.read(info))
                continue
            member = zipfile.ZipInfo(info.filename)
            member.compress_type = zipfile.ZIP_DEFLATED
            with dst.open(member, "w", force_zip64=True) as f:
                zeros = bytes(1 << 20)
                for _ in range(size >> 20):
                    f.write(zeros)
    return hostile(path)


def state_dict_of(path: Path) -> OrderedDict:
    from safetensors.torch import load_file

    return OrderedDict(load_file(path))


CLI = [sys.executable, "-c", "from bertconv.cli import main; main()"]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under `directory`, by relative path, its bytes (a large one's SHA-256, hashed
    as it is read, never held whole): to show that nothing changed."""
    out = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as f:
                small = p.stat().st_size <= 1 << 20
                found = f.read() if small else hashlib.file_digest(f, "sha256").digest()
            out[str(p.relative_to(directory))] = found
    return out


def refused(result, code: int, *fragments: str) -> str:
    """The command failed with `code` and one message naming each fragment."""
    exit_code, out, err = result
    assert exit_code == code, err
    assert err.startswith("bertconv: error: ") and "Traceback" not in err, err
    assert err.count("bertconv: error: ") == 1, err
    for fragment in fragments:
        assert fragment in err, err
    return err


def convert_fails(cli, src: Path, tmp_path: Path, code: int, *fragments, load=True) -> str:
    """convert SRC refuses with `code`; the source is untouched; no output directory is left;
    bertconv.load (which needs no tokenizer) refuses with the same kind of error."""
    before = snapshot(src)
    out = tmp_path / "made" / "out"
    err = refused(cli("convert", src, "--out", out), code, str(src), *fragments)
    assert snapshot(src) == before
    assert not (tmp_path / "made").exists(), "an output directory outlived the failure"
    if load:
        with pytest.raises(BertconvError) as raised:
            bertconv.load(src)
        assert raised.value.exit_code == code
    return err
