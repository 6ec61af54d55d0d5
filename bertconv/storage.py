"""Tensors as bytes: where they are, and how to read, transform and write them without torch.

Converting a checkpoint is mostly renaming, so it need not load a single tensor: a safetensors
file is an 8-byte length, a JSON header (name -> dtype, shape, byte range), then the data. Here a
tensor is a reference to its bytes (`Stored`: a range of a file; `InMemory`: bytes), and the
transforms the mapping tables declare are done on references (`split_rows`, `join_rows`,
`transpose`). `write_safetensors` writes a new header and copies the data ranges file to file
with `os.copy_file_range`, so a rename-only conversion costs about what `cp` does and holds
almost nothing in memory. `to_torch` (torch imported only there) maps stored tensors into torch
without copying them.
"""

import errno
import json
import mmap
import os
import struct
import threading
from array import array
from collections.abc import Callable, Iterator
from functools import cache
from itertools import zip_longest
from pathlib import Path
from typing import NamedTuple

from .errors import CheckpointError

ITEM_SIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
MAX_HEADER = 100 << 20  # safetensors' own limit
PAGE = 4096
CHUNK = 1 << 20
ALIGN = 1 << 16  # the kernel's copy step: a pipe's 16 pages
STEP = 64 << 20  # bytes per copy call, so that progress moves
PARALLEL = 64 << 20  # ranges from this size are copied in two halves at once


class Stored(NamedTuple):
    """A tensor stored in a file: bytes [start, end) of `path`, row-major."""

    path: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


class InMemory(NamedTuple):
    """A tensor whose bytes are in memory (a generated buffer, a tensor read from a .bin file)."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes


class Joined(NamedTuple):
    """Tensors stacked along their first dimension (a fused projection, say)."""

    parts: tuple
    dtype: str
    shape: tuple[int, ...]


class Transposed(NamedTuple):
    """A 2-D tensor transposed; its bytes are computed when written or loaded."""

    source: object
    dtype: str
    shape: tuple[int, ...]


Tensor = Stored | InMemory | Joined | Transposed


def nbytes(t: Tensor) -> int:
    count = 1
    for d in t.shape:
        count *= d
    return count * ITEM_SIZE[t.dtype]


def split_rows(t: Tensor, rows: list[int]) -> list[Tensor]:
    """Split along the first dimension: for row-major data, consecutive byte ranges."""
    row_bytes = nbytes(t) // t.shape[0] if t.shape[0] else 0
    if not isinstance(t, Stored | InMemory):
        t = InMemory(t.dtype, t.shape, read_bytes(t))
    parts, at = [], 0
    for n in rows:
        shape, size = (n, *t.shape[1:]), n * row_bytes
        if isinstance(t, Stored):
            parts.append(Stored(t.path, t.dtype, shape, t.start + at, t.start + at + size))
        else:
            parts.append(InMemory(t.dtype, shape, t.data[at : at + size]))
        at += size
    return parts


def join_rows(parts: list[Tensor]) -> Joined:
    rows = sum(p.shape[0] for p in parts)
    return Joined(tuple(parts), parts[0].dtype, (rows, *parts[0].shape[1:]))


def transpose(t: Tensor) -> Transposed:
    return Transposed(t, t.dtype, t.shape[::-1])


def arange(n: int, shape: tuple[int, ...]) -> InMemory:
    """int64 0..n-1: the position_ids buffers some models keep."""
    return InMemory("I64", shape, array("q", range(n)).tobytes())


def pieces(t: Tensor) -> Iterator[bytes | Stored]:
    """A tensor's bytes in order: file ranges where they are stored, bytes otherwise."""
    if isinstance(t, Stored):
        yield t
    elif isinstance(t, InMemory):
        yield t.data
    elif isinstance(t, Joined):
        for part in t.parts:
            yield from pieces(part)
    else:
        yield from _transposed_rows(t)


def read_bytes(t: Tensor) -> bytes:
    return b"".join(_read(p) if isinstance(p, Stored) else p for p in pieces(t))


def _read(s: Stored) -> bytes:
    with open(s.path, "rb") as f:
        f.seek(s.start)
        return f.read(s.end - s.start)


def _transposed_rows(t: Transposed) -> Iterator[bytes]:
    """The rows of a transposed tensor, about CHUNK bytes at a time: the source is held once,
    the result never whole."""
    cols = t.source.shape[1]
    item = ITEM_SIZE[t.dtype]
    # Column j of the source is every cols-th item from j on; memoryview strides pick it in C.
    items = memoryview(read_bytes(t.source)).cast({1: "B", 2: "H", 4: "I", 8: "Q"}[item])
    per_chunk = max(1, CHUNK // (item * t.source.shape[0] or 1))
    for j in range(0, cols, per_chunk):
        yield b"".join(items[c::cols].tobytes() for c in range(j, min(j + per_chunk, cols)))


def equal(a: Tensor, b: Tensor) -> bool:
    """Same dtype, shape and bytes, compared a chunk at a time."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    return all(x == y for x, y in zip_longest(_chunks(a), _chunks(b)))


def _chunks(t: Tensor) -> Iterator[bytes]:
    """The bytes of `t` in chunks of exactly CHUNK (the last one shorter)."""
    buffer = b""
    for p in pieces(t):
        for block in _stream(p) if isinstance(p, Stored) else [p]:
            buffer += block
            while len(buffer) >= CHUNK:
                yield buffer[:CHUNK]
                buffer = buffer[CHUNK:]
    if buffer:
        yield buffer


def _stream(s: Stored) -> Iterator[bytes]:
    with open(s.path, "rb") as f:
        f.seek(s.start)
        left = s.end - s.start
        while left:
            block = f.read(min(CHUNK, left))
            if not block:
                raise CheckpointError(f"{s.path}: ends before the data its header promises")
            left -= len(block)
            yield block


def read_header(path: Path) -> tuple[dict[str, Stored], dict[str, str]]:
    """The tensors a safetensors file holds, as references, and its metadata. Only the header
    is read."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        (length,) = struct.unpack("<Q", raw) if len(raw) == 8 else (size,)
        if length > min(MAX_HEADER, size - 8):
            raise ValueError("the header length it starts with is larger than the file")
        header = json.loads(f.read(length))
    metadata = header.pop("__metadata__", None) or {}
    base, tensors = 8 + length, {}
    for name, entry in header.items():
        start, end = entry["data_offsets"]
        t = Stored(path, entry["dtype"], tuple(entry["shape"]), base + start, base + end)
        if t.dtype not in ITEM_SIZE or nbytes(t) != end - start or t.end > size:
            raise ValueError(f"tensor {name!r} does not fit the file (truncated download?)")
        tensors[name] = t
    return tensors, metadata


def write_safetensors(
    path: Path, tensors: dict[str, Tensor], metadata: dict[str, str], progress: Callable = None
) -> None:
    """Write a safetensors file: the header, then each tensor's bytes, stored ones copied file
    to file by the kernel. Tensors go in the order of their bytes in the source, so that runs of
    them are copied in one call; the header is padded so the data keeps its page offset."""
    order = sorted(tensors, key=lambda name: _source_position(tensors[name]))
    header, offset = {"__metadata__": metadata}, 0
    for name in order:
        size = nbytes(tensors[name])
        header[name] = {
            "dtype": tensors[name].dtype,
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    first = _source_position(tensors[order[0]])[1] if order else 0
    encoded = _padded(json.dumps(header, separators=(",", ":")).encode(), first)
    with open(path, "wb") as out:
        _reserve(out.fileno(), 8 + len(encoded) + offset)
        out.write(struct.pack("<Q", len(encoded)) + encoded)
        # A generator: transformed tensors are computed one at a time, as they are written.
        parts = (p for name in order for p in pieces(tensors[name]))
        _copy(parts, out, progress or (lambda n: None))


def _reserve(fd: int, size: int) -> None:
    """Allocate the file's blocks before writing it. On ext4 the copy is then ~25% faster than
    with blocks allocated as pages are written back, and a full disk fails here, before a byte is
    written. File systems that cannot preallocate are written as they are."""
    allocate = getattr(os, "posix_fallocate", None)  # not on macOS
    try:
        allocate and allocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise


def _source_position(t: Tensor) -> tuple[str, int]:
    first = next(pieces(t), b"") if isinstance(t, Stored | Joined) else b""
    return (str(first.path), first.start) if isinstance(first, Stored) else ("\uffff", 0)


def _padded(header: bytes, data_start: int) -> bytes:
    """Pad with spaces (the format allows them) so that the data section starts at the same
    offset within a page as in the source, and at a multiple of 8 in any case."""
    target = data_start % PAGE if data_start % 8 == 0 else 0
    pad = (target - (8 + len(header))) % PAGE
    return header + b" " * pad


def _copy(parts: Iterator, out, progress: Callable[[int], None]) -> None:
    """Write bytes as they are and file ranges by the kernel, merging adjacent ranges."""
    for run in _merged(parts):
        if isinstance(run, bytes):
            out.write(run)
            progress(len(run))
            continue
        out.flush()
        path, start, end = run
        position = out.tell()
        with open(path, "rb") as src:
            _copy_range(src.fileno(), out.fileno(), start, position, end - start, progress)
        out.seek(position + end - start)


def _merged(parts: Iterator) -> Iterator[bytes | tuple[Path, int, int]]:
    run = None
    for p in parts:
        if isinstance(p, Stored) and run and run[0] == p.path and run[2] == p.start:
            run = (run[0], run[1], p.end)
            continue
        if run:
            yield run
        run = (p.path, p.start, p.end) if isinstance(p, Stored) else None
        if not isinstance(p, Stored):
            yield p
    if run:
        yield run


def _copy_range(src: int, dst: int, offset: int, position: int, count: int, progress) -> None:
    """Copy `count` bytes at `offset` in `src` to `position` in `dst`, a large range in two
    halves at once: the kernel's copy is CPU work, and a second core makes it ~10% faster."""
    lock, failed = threading.Lock(), []

    def report(n: int) -> None:
        with lock:  # a progress bar is not made for two threads
            progress(n)

    def copy(spans: list[tuple[int, int, int]]) -> None:
        try:
            for span in spans:
                _copy_span(src, dst, *span, report)
        except BaseException as e:  # raised again in the calling thread
            failed.append(e)

    mine, *others = _spans(offset, position, count)
    helpers = [threading.Thread(target=copy, args=(spans,)) for spans in others]
    for helper in helpers:
        helper.start()
    copy(mine)
    for helper in helpers:
        helper.join()
    if failed:
        raise failed[0]


def _spans(offset: int, position: int, count: int) -> list[list[tuple[int, int, int]]]:
    """The (offset, position, count) pieces to copy, a list per thread: up to the output's next
    64 KiB boundary, then the rest, in two halves where it is large. The kernel copies 64 KiB at
    a time; steps that start on such a boundary fill whole large pages of the page cache (~25%
    faster on ext4)."""
    head = min(count, -position % ALIGN)
    rest = count - head
    split = head + rest // 2 // ALIGN * ALIGN if rest >= PARALLEL else count

    def span(start: int, end: int) -> tuple[int, int, int]:
        return offset + start, position + start, end - start

    threads = [[span(0, head), span(head, split)], [span(split, count)]]
    return [[s for s in spans if s[2]] for spans in threads[: 2 if split < count else 1]]


def _copy_span(src: int, dst: int, offset: int, position: int, count: int, progress) -> None:
    kernel_copy = getattr(os, "copy_file_range", None)  # Linux only
    while count:
        step = min(count, STEP)
        try:
            done = kernel_copy(src, dst, step, offset, position)
        except (OSError, TypeError):  # none here, or not across these file systems
            done = os.pwrite(dst, os.pread(src, min(step, CHUNK), offset), position)
        if done == 0:
            raise CheckpointError(f"source file ended {count} bytes early")
        offset, position, count = offset + done, position + done, count - done
        progress(done)


def to_torch(t: Tensor, maps: dict | None = None):
    """A torch tensor of `t`. Stored tensors are mapped from their file, not copied: the pages
    are read on first use and shared with the page cache. Writes stay private to the process.
    `maps` caches one mapping per file across calls."""
    import torch

    if isinstance(t, Joined):
        return torch.cat([to_torch(p, maps) for p in t.parts])
    if isinstance(t, Transposed):
        return to_torch(t.source, maps).T.contiguous()
    dtype = torch_dtypes()[t.dtype]
    count = nbytes(t) // ITEM_SIZE[t.dtype]
    if count == 0:
        return torch.empty(t.shape, dtype=dtype)
    if isinstance(t, InMemory):
        return torch.frombuffer(bytearray(t.data), dtype=dtype).view(t.shape)
    maps = {} if maps is None else maps
    if t.path not in maps:
        with open(t.path, "rb") as f:
            maps[t.path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    return torch.frombuffer(maps[t.path], dtype=dtype, count=count, offset=t.start).view(t.shape)


def from_torch(tensor) -> InMemory:
    """The bytes of a torch tensor (a .bin file's), copied out."""
    import ctypes

    tensor = tensor.detach().cpu().contiguous()
    code = {v: k for k, v in torch_dtypes().items()}[tensor.dtype]
    data = ctypes.string_at(tensor.data_ptr(), tensor.nbytes) if tensor.nbytes else b""
    return InMemory(code, tuple(tensor.shape), data)


@cache
def torch_dtypes() -> dict:
    """safetensors' dtype names -> torch's; a function, so that torch is imported on use only."""
    import torch

    return {
        "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
        "I32": torch.int32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16,
        "F32": torch.float32, "F64": torch.float64, "U16": torch.uint16, "U32": torch.uint32,
        "U64": torch.uint64, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    }  # fmt: skip
