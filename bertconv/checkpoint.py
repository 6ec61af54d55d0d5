"""Checkpoint directories: which files hold the weights, config and tokenizer; reading them,
and writing converted ones whole or not at all. The bytes of the tensors are storage.py's.

A checkpoint directory holds config.json and the weights, in the first of these forms found:
model.safetensors, model.safetensors.index.json (shards), pytorch_model.bin,
pytorch_model.bin.index.json (shards). `.bin` files are pickles: their globals are checked against
the few a state dict needs before torch reads them, with `weights_only=True`.
"""

import os
import pickletools
import zipfile
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from . import files, storage
from .config import BertConfig
from .errors import BertconvError, CheckpointError, NotFoundError
from .mapping import OFFICIAL, layout_names

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
# Keys of the safetensors metadata that bertconv writes.
LAYOUT_KEY, SOURCE_KEY, REVISION_KEY = "bertconv.layout", "bertconv.source", "bertconv.revision"
HEADS_KEY = "bertconv.heads"
BIG = 256 << 20  # bytes: writing this much or more gets a progress bar

# What a pickled state dict needs, and all that bertconv lets a pickle name: torch.save writes
# these for tensors, parameters and their storages. Anything else is refused before torch runs.
STORAGES = ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
PICKLE_GLOBALS = {
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    *(f"torch.{kind}Storage" for kind in STORAGES),
}
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the first pickle of torch's pre-1.6 format


@dataclass
class Checkpoint:
    path: Path
    config: BertConfig
    config_dict: dict
    state_dict: dict  # name -> storage.Tensor (a reference to its bytes), as the files hold them
    layout: str  # bertconv's metadata says which; official otherwise
    metadata: dict[str, str]
    files: list[Path]  # every file read: config.json and the weights


def weight_files(directory: Path) -> tuple[Path | None, list[Path]]:
    """The weight files of a checkpoint directory, safetensors first: the shard index if the
    weights are sharded, and the files that hold the tensors."""
    if not directory.is_dir():
        raise NotFoundError(f"{directory}: no such directory")
    for name in WEIGHT_FILES:
        path = directory / name
        if files.is_present(path):
            return (path, _shards(path)) if name.endswith(".index.json") else (None, [path])
    raise NotFoundError(
        f"{directory}: no weights found; a checkpoint directory holds one of "
        + ", ".join(WEIGHT_FILES)
    )


def _shards(index: Path) -> list[Path]:
    """The shard files an index names: plain file names beside it, each there."""
    weight_map = _weight_map(index)
    names = sorted({files.plain_name(name, str(index)) for name in weight_map.values()})
    shards = [index.parent / name for name in names]
    missing = [str(s) for s in shards if not files.is_present(s)]
    if missing:
        raise NotFoundError(f"{index}: lists shards that are not there: {', '.join(missing)}")
    return shards


def _weight_map(index: Path) -> dict[str, str]:
    weight_map = files.read_json_object(index).get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(v, str) for v in weight_map.values())
    ):
        raise CheckpointError(
            f"{index}: not a shard index: its weight_map is not an object of tensor names to "
            "file names; download it again"
        )
    return weight_map


def read_tensors(paths: list[Path], index: Path | None = None) -> tuple[dict, dict[str, str]]:
    """All tensors of the files, and the first file's safetensors metadata. Shards must agree
    with their index: each tensor in the shard the index names, and no other tensor."""
    state_dict, metadata, where = {}, {}, {}
    for path in paths:
        tensors, meta = (
            _read_safetensors(path) if path.suffix == ".safetensors" else _read_bin(path)
        )
        clash = state_dict.keys() & tensors.keys()
        if clash:
            raise CheckpointError(f"{path}: repeats tensors of another shard: {sorted(clash)[:5]}")
        state_dict.update(tensors)
        where.update(dict.fromkeys(tensors, path.name))
        metadata = metadata or meta
    if index is not None:
        listed = _weight_map(index)
        wrong = sorted(n for n in where.keys() | listed.keys() if where.get(n) != listed.get(n))
        if wrong:
            raise CheckpointError(
                f"{index}: does not match its shards: {len(wrong)} tensors are not where it "
                f"says ({', '.join(wrong[:5])}). Download the checkpoint again."
            )
    return state_dict, metadata


def _progress(total: int, what: str):
    """A progress bar on stderr for work large enough to wait for, where stderr is a terminal."""
    import sys

    if total < BIG or not sys.stderr.isatty():
        return nullcontext(SimpleNamespace(update=lambda n: None))
    from tqdm import tqdm

    return tqdm(total=total, desc=what, unit="B", unit_scale=True)


def _read_safetensors(path: Path) -> tuple[dict, dict[str, str]]:
    try:
        return storage.read_header(path)
    except storage.NotSafetensors as e:
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({e}). {_diagnose(path)}"
        ) from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None


def _diagnose(path: Path) -> str:
    """What a file that should hold weights holds instead, and what to do about it."""
    try:
        with files.open_regular(path) as f:
            head = f.read(512).lstrip().lower()
    except (BertconvError, OSError):
        return "It cannot be read."
    if head.startswith(b"version https://git-lfs"):
        return (
            "It is a Git LFS pointer, a small text file standing in for the weights: they were "
            "never downloaded, or the pointer was committed in their place. In a git clone, run "
            "`git lfs pull`."
        )
    if head.startswith((b"<!doctype html", b"<html")):
        return (
            "It is an HTML page (an error or login page?) saved in place of the weights. "
            "Download the file again."
        )
    return "It may be truncated or damaged: download it again."


def _read_bin(path: Path) -> tuple[dict, dict[str, str]]:
    """A pickled state dict, vetted before torch reads it (torch itself with weights_only)."""
    import torch

    with files.open_regular(path) as f:
        is_zip = zipfile.is_zipfile(f)
        f.seek(0)
        names = _zip_globals(path, f) if is_zip else _legacy_globals(path, f)
    refused = sorted(names - PICKLE_GLOBALS)
    if refused:
        raise CheckpointError(
            f"{path}: its pickle asks for {', '.join(refused)}, which a state dict never needs; "
            "it was not read. bertconv reads pickles that hold tensors only, and never runs code "
            "from one. Use the model's safetensors file instead."
        )
    try:
        # mmap needs the zip format of torch >= 1.6; older files are read whole
        loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=is_zip)
    except Exception as e:  # torch's reader raises many kinds; none of them is the user's bug
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint ({reason[:200]}). {_diagnose(path)}"
        ) from None
    return _state_dict(path, loaded), {}


def _state_dict(path: Path, loaded) -> dict[str, storage.Tensor]:
    import torch

    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path}: holds a {type(loaded).__name__}, not a state dict")
    nested = [k for k, v in loaded.items() if isinstance(v, dict)]
    if nested:
        raise CheckpointError(
            f"{path}: holds dicts under {nested[:3]} (a training checkpoint?), not a state dict "
            "of tensors. Save the model's state_dict() alone, or convert that."
        )
    bad = [
        f"{k!r} ({_what(v)})"
        for k, v in loaded.items()
        if not isinstance(k, str)
        or not isinstance(v, torch.Tensor)
        or v.layout != torch.strided
        or v.is_quantized
        or v.dtype not in storage.torch_dtypes().values()
    ]
    if bad:
        raise CheckpointError(
            f"{path}: holds entries that are not plain tensors bertconv can read: "
            + ", ".join(bad[:5])
        )
    return {name: storage.from_torch(t) for name, t in loaded.items()}


def _what(value) -> str:
    return f"{value.dtype}, {value.layout}" if hasattr(value, "dtype") else type(value).__name__


def _zip_globals(path: Path, f) -> set[str]:
    """The globals of the pickle in a zip-format .bin. torch writes every member stored, not
    compressed; a compressed member is refused, so that a small file cannot inflate."""
    try:
        archive = zipfile.ZipFile(f)
        members = archive.infolist()
        if any(m.compress_type != zipfile.ZIP_STORED for m in members):
            raise CheckpointError(
                f"{path}: has compressed members, which torch.save never writes; not read"
            )
        pickles = [m for m in members if m.filename.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise CheckpointError(f"{path}: a zip file, but not one torch.save wrote")
        with archive.open(pickles[0]) as pkl:
            return _globals(path, Bounded(pkl, pickles[0].file_size))
    # zipfile's errors for a damaged archive: bad records, unsupported versions, encryption
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({e})") from None


def _legacy_globals(path: Path, f) -> set[str]:
    """torch's pre-1.6 format is pickles in a row: a magic number, the protocol, system info,
    then the state dict. Anything else (a text file, an HTML page) is refused here."""
    try:
        magic = _first_value(Bounded(f, os.fstat(f.fileno()).st_size))
    except (ValueError, EOFError, IndexError, KeyError, OverflowError) as e:
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint ({e or type(e).__name__}). "
            f"{_diagnose(path)}"
        ) from None
    if magic != LEGACY_MAGIC:
        raise CheckpointError(
            f"{path}: not a PyTorch checkpoint (neither torch's zip format nor its legacy "
            f"one). {_diagnose(path)}"
        )
    found = set()
    size = os.fstat(f.fileno()).st_size
    for _ in range(3):  # protocol, system info, state dict
        found |= _globals(path, Bounded(f, size - f.tell()))
    return found


class Bounded:
    """A stream that never reads past `size` bytes from where it starts. A pickle opcode may
    claim a string of 2**64 bytes; reading it from this gives what is there, not an attempt to
    allocate the claim."""

    def __init__(self, stream, size: int):
        self.stream, self.left = stream, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.stream.read(n)
        self.left -= len(data)
        return data

    def readline(self) -> bytes:
        line = self.stream.readline(self.left)
        self.left -= len(line)
        return line


def _first_value(f):
    """The value of a pickle that holds one plain number, read without unpickling."""
    ops = list(pickletools.genops(f))
    values = [arg for op, arg, _ in ops if op.name not in ("PROTO", "STOP", "FRAME")]
    if len(values) != 1 or not isinstance(values[0], int):
        raise ValueError("it does not start with torch's magic number")
    return values[0]


def _globals(path: Path, stream) -> set[str]:
    """The globals one pickle names, read from its opcodes without running it. A global built on
    the stack (STACK_GLOBAL) is resolved from the strings pushed before it; one that cannot be,
    or an extension code, is refused."""
    found, strings, memo = set(), [], {}
    try:
        for op, arg, _ in pickletools.genops(stream):
            name = op.name
            if name in ("GLOBAL", "INST"):
                found.add(arg.replace(" ", "."))
            elif name == "STACK_GLOBAL":
                if len(strings) < 2 or not all(isinstance(s, str) for s in strings[-2:]):
                    raise ValueError("a global whose name cannot be read")
                found.add(f"{strings[-2]}.{strings[-1]}")
            elif name.startswith("EXT"):
                raise ValueError("an extension code, which names code by number")
            elif "UNICODE" in name or "STRING" in name:
                strings.append(arg)
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[arg] = strings[-1] if strings else None
            elif name == "MEMOIZE":
                memo[len(memo)] = strings[-1] if strings else None
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                strings.append(memo.get(arg))
    except (ValueError, EOFError, IndexError, KeyError, OverflowError, UnicodeDecodeError) as e:
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint (its pickle: {e or type(e).__name__})"
        ) from None
    return found


def read_checkpoint(directory: Path, layout: str | None = None) -> Checkpoint:
    """config.json and every tensor of a checkpoint directory."""
    directory = Path(directory)
    index, weights = weight_files(directory)
    config_path = directory / "config.json"
    if not files.is_present(config_path):
        raise NotFoundError(f"{config_path}: no config.json; a checkpoint directory needs one")
    config_dict = files.read_json_object(config_path)
    config = BertConfig.from_dict(config_dict, source=str(config_path))
    state_dict, metadata = read_tensors(weights, index)
    layout = layout or _recorded_layout(weights[0], metadata)
    read = [config_path, *([index] if index else []), *weights]
    return Checkpoint(directory, config, config_dict, state_dict, layout, metadata, read)


def _recorded_layout(path: Path, metadata: dict[str, str]) -> str:
    """The layout bertconv recorded in a file it wrote. It is a name, never a path: only the
    layouts bertconv ships are taken from a file."""
    recorded = metadata.get(LAYOUT_KEY, OFFICIAL)
    if recorded not in layout_names():
        raise CheckpointError(
            f"{path}: its metadata says it is in layout {recorded!r}, which is not one bertconv "
            f"ships ({', '.join(layout_names())}). Name the layout it is in with --from."
        )
    return recorded


def tokenizer_files(directory: Path) -> Iterator[Path]:
    for name in TOKENIZER_FILES:
        if files.is_present(directory / name):
            yield directory / name


def write_checkpoint(
    out: files.Output,
    state_dict: dict,
    config_dict: dict,
    metadata: dict[str, str],
    tokenizer_from: Path,
) -> list[Path]:
    """Write model.safetensors, config.json and the tokenizer files into the locked output
    directory `out`: each written aside, then all renamed into place, model.safetensors last, so
    that a failure leaves the directory as it was."""
    import json

    for source in tokenizer_files(tokenizer_from):
        out.copy_in(source.name, source)  # copied, never read into memory
    out.stage("config.json").write_text(json.dumps(config_dict, indent=2) + "\n")
    weights = out.stage("model.safetensors")
    with _progress(sum(map(storage.nbytes, state_dict.values())), "writing") as bar:
        storage.write_safetensors(weights, state_dict, {"format": "pt", **metadata}, bar.update)
    return out.commit()


def read_metadata(path: Path) -> dict[str, str]:
    """The safetensors metadata of a file; empty where there is none, no such file, or a file
    that is not safetensors."""
    try:
        return storage.read_header(path)[1]
    except (storage.NotSafetensors, BertconvError, OSError):
        return {}
