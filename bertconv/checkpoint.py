"""Checkpoint directories: which files hold the weights, config and tokenizer; reading them,
and writing converted ones whole or not at all. The bytes of the tensors are storage.py's.

A checkpoint directory holds config.json and the weights, in the first of these forms found:
model.safetensors, model.safetensors.index.json (shards), pytorch_model.bin,
pytorch_model.bin.index.json (shards). `.bin` files are read with `weights_only=True`.
"""

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from . import storage
from .config import BertConfig
from .errors import CheckpointError, NotFoundError, OutputError
from .mapping import OFFICIAL

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


@dataclass
class Checkpoint:
    path: Path
    config: BertConfig
    config_dict: dict
    state_dict: dict  # name -> storage.Tensor (a reference to its bytes), as the files hold them
    layout: str  # bertconv's metadata says which; official otherwise
    metadata: dict[str, str]


def weight_files(directory: Path) -> list[Path]:
    """The weight files of a checkpoint directory, safetensors first."""
    if not directory.is_dir():
        raise NotFoundError(f"{directory}: no such directory")
    for name in WEIGHT_FILES:
        path = directory / name
        if path.is_file():
            return _shards(path) if name.endswith(".index.json") else [path]
    raise NotFoundError(
        f"{directory}: no weights found; a checkpoint directory holds one of "
        + ", ".join(WEIGHT_FILES)
    )


def _shards(index: Path) -> list[Path]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{index}: not a valid shard index ({e!r}); download it again") from e
    shards = [index.parent / name for name in sorted(set(weight_map.values()))]
    missing = [str(s) for s in shards if not s.is_file()]
    if missing:
        raise NotFoundError(f"{index}: lists shards that are not there: {', '.join(missing)}")
    return shards


def read_tensors(files: list[Path]) -> tuple[dict, dict[str, str]]:
    """All tensors of the files, and the first file's safetensors metadata."""
    state_dict, metadata = {}, {}
    for path in files:
        tensors, meta = (
            _read_safetensors(path) if path.suffix == ".safetensors" else _read_bin(path)
        )
        clash = state_dict.keys() & tensors.keys()
        if clash:
            raise CheckpointError(f"{path}: repeats tensors of another shard: {sorted(clash)[:5]}")
        state_dict.update(tensors)
        metadata = metadata or meta
    return state_dict, metadata


def _progress(total: int, what: str):
    """A progress bar on stderr for work large enough to wait for, where stderr is a terminal."""
    if total < BIG or not sys.stderr.isatty():
        return nullcontext(SimpleNamespace(update=lambda n: None))
    from tqdm import tqdm

    return tqdm(total=total, desc=what, unit="B", unit_scale=True)


def _read_safetensors(path: Path) -> tuple[dict, dict[str, str]]:
    try:
        return storage.read_header(path)
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, OSError) as e:
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({e}). {_diagnose(path)}"
        ) from e


def _diagnose(path: Path) -> str:
    """What a file that should hold weights holds instead, and what to do about it."""
    try:
        head = path.read_bytes()[:512].lstrip().lower()
    except OSError:
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
    import pickle
    import zipfile

    import torch

    try:
        # mmap needs the zip format of torch >= 1.6; older files are read whole
        mmap = zipfile.is_zipfile(path)
        state_dict = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{path}: cannot be read with weights_only=True ({e}). bertconv never runs code from "
            "a pickle; use the model's safetensors file instead."
        ) from e
    except (RuntimeError, OSError, EOFError) as e:
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint ({e}). {_diagnose(path)}"
        ) from e
    if not isinstance(state_dict, dict):
        raise CheckpointError(f"{path}: holds a {type(state_dict).__name__}, not a state dict")
    return {name: storage.from_torch(t) for name, t in state_dict.items()}, {}


def read_checkpoint(directory: Path, layout: str | None = None) -> Checkpoint:
    """config.json and every tensor of a checkpoint directory."""
    directory = Path(directory)
    files = weight_files(directory)
    config_path = directory / "config.json"
    config = BertConfig.from_json_file(config_path)
    state_dict, metadata = read_tensors(files)
    layout = layout or metadata.get(LAYOUT_KEY, OFFICIAL)
    config_dict = json.loads(config_path.read_text())
    return Checkpoint(directory, config, config_dict, state_dict, layout, metadata)


def write_checkpoint(
    out: Path, state_dict: dict, config_dict: dict, metadata: dict[str, str], tokenizer_from: Path
) -> list[Path]:
    """Write model.safetensors, config.json and the tokenizer files into `out`.

    Every file is written aside first, then renamed into place, model.safetensors last: a failure
    leaves `out` as it was."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{out}: cannot create the output directory ({e.strerror})") from e
    for stale in out.glob(".*.partial"):  # left by a writer that was killed; we hold the lock
        stale.unlink(missing_ok=True)
    staged: list[tuple[Path, Path]] = []
    try:
        for name in TOKENIZER_FILES:
            if (tokenizer_from / name).is_file():
                _stage(staged, out / name).write_bytes((tokenizer_from / name).read_bytes())
        config_json = json.dumps(config_dict, indent=2) + "\n"
        _stage(staged, out / "config.json").write_text(config_json)
        weights = _stage(staged, out / "model.safetensors")
        with _progress(sum(map(storage.nbytes, state_dict.values())), "writing") as bar:
            storage.write_safetensors(weights, state_dict, {"format": "pt", **metadata}, bar.update)
        for tmp, final in staged:
            os.replace(tmp, final)
    except OSError as e:
        reason = e.strerror or e
        raise OutputError(
            f"{out}: writing the converted checkpoint failed ({reason}); nothing in it was changed"
        ) from e
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return [final for _, final in staged]


def _stage(staged: list[tuple[Path, Path]], final: Path) -> Path:
    """A path beside `final` to write to, remembered for the rename (or the clean-up)."""
    tmp = final.with_name(f".{final.name}.{os.getpid()}.partial")
    staged.append((tmp, final))
    return tmp


@contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Hold the lock on an output directory: of two conversions into it at once, the second
    waits for the first, then finds it done. The lock file lives in the temp directory, named
    after the output's absolute path, so that nothing is left beside the output."""
    import fcntl
    from binascii import crc32

    # One lock per output path; a rare clash between two paths only makes them take turns.
    where = Path(os.environ.get("TMPDIR", "/tmp")) / "bertconv-locks"
    where.mkdir(exist_ok=True)
    path = Path(out).resolve()
    with open(where / f"{path.name}-{crc32(str(path).encode()):08x}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, or the process ends
        yield


def read_metadata(path: Path) -> dict[str, str]:
    """The safetensors metadata of a file; empty where there is none or no such file."""
    try:
        return storage.read_header(path)[1]
    except (ValueError, KeyError, TypeError, OSError):
        return {}
