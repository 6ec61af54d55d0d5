"""Tensors as bytes: where they are, and how to read and transform them without torch.

Converting a checkpoint is mostly renaming, so it need not load a single tensor: a safetensors
file is an 8-byte length, a JSON header (name -> dtype, shape, byte range), then the data, and
`read_header` reads only the header (held to the format's rules: files come from strangers). Here
a tensor is a reference to its bytes (`Stored`: a range of a file; `InMemory`: bytes), and the
transforms the mapping tables declare are done on references (`split_rows`, `join_rows`,
`transpose`), their bytes computed only when read or written (writing.py writes them, copying
stored ranges file to file). `nonfinite` finds NaN and Inf without torch; `to_torch` and
`all_to_torch` (torch imported only there) read stored tensors into torch's memory, or map them.
"""

import contextvars
import json
import math
import mmap
import os
import struct
import threading
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from itertools import zip_longest
from pathlib import Path
from typing import NamedTuple

from . import files
from .errors import BertconvError, CheckpointError

ITEM_SIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
MAX_HEADER = 100_000_000  # bytes: safetensors' own limit
PAGE = 4096
CHUNK = 1 << 20
BAND = 4 << 20  # bytes: a transposed tensor is computed a block of this size at a time
TILE = 8  # source rows transposed at once


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
    return math.prod(t.shape) * ITEM_SIZE[t.dtype]


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


def reshape(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The same row-major bytes under another shape of as many elements (a leading 1 added)."""
    if not isinstance(t, Stored | InMemory):
        t = InMemory(t.dtype, t.shape, read_bytes(t))
    return t._replace(shape=tuple(shape))


def arange(n: int, shape: tuple[int, ...]) -> InMemory:
    """int64 0..n-1: the position_ids buffers some models keep."""
    return InMemory("I64", shape, array("q", range(n)).tobytes())


def pieces(t: Tensor) -> Iterator[bytes | bytearray | memoryview | Stored]:
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
    # each piece copied as it comes: a transposed tensor's blocks share one buffer
    return b"".join(_read(p) if isinstance(p, Stored) else bytes(p) for p in pieces(t))


def _read(s: Stored) -> bytes:
    data = bytearray(s.end - s.start)
    with descriptor(s.path) as fd:
        got = _pread_into(fd, memoryview(data), s.start)
    if got != len(data):
        raise ended_early(s.path, len(data) - got)
    return bytes(data)


# Within reading(), each file storage reads is opened once, and every tensor of it read through
# that descriptor by its offset (from any of the command's threads), not opened once a tensor:
# bert-base's 199 tensors are one open, and a file replaced meanwhile (renamed over) is read
# whole from the version first opened (files.held_still tells that it changed).
_OPEN: contextvars.ContextVar[dict | None] = contextvars.ContextVar("open", default=None)
_OPENING = threading.Lock()


@contextmanager
def reading():
    """Each file read inside it opened once, and closed at its end (within an outer one: that
    one's)."""
    if _OPEN.get() is not None:
        yield
        return
    held: dict[Path, int] = {}
    token = _OPEN.set(held)
    try:
        yield
    finally:
        _OPEN.reset(token)
        with _OPENING:
            for fd in held.values():
                os.close(fd)
            held.clear()


@contextmanager
def descriptor(path: Path):
    """A descriptor to read `path` by offset: reading()'s, else one of its own for the call."""
    held = _OPEN.get()
    if held is None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)
        return
    with _OPENING:
        if path not in held:
            held[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        fd = held[path]
    yield fd


def _pread_into(fd: int, into: memoryview, offset: int) -> int:
    """Bytes of `fd` from `offset` into `into`, as many as there are: how many."""
    done = 0
    while done < len(into):
        n = os.preadv(fd, [into[done:]], offset + done)
        if n == 0:
            break
        done += n
    return done


def in_thread(target: Callable, *args) -> threading.Thread:
    """A thread running `target(*args)` in the caller's context (its reading() among it)."""
    return threading.Thread(target=contextvars.copy_context().run, args=(target, *args))


def _read_range(t: Tensor, start: int, end: int) -> bytes:
    """Bytes [start, end) of a tensor's row-major data, reading only those."""
    if isinstance(t, Stored):
        return _read(Stored(t.path, t.dtype, (), t.start + start, t.start + end))
    if isinstance(t, InMemory):
        return t.data[start:end]
    if isinstance(t, Joined):
        out, at = [], 0
        for part in t.parts:
            low, high = max(start, at), min(end, at + nbytes(part))
            if low < high:
                out.append(_read_range(part, low - at, high - at))
            at += nbytes(part)
        return b"".join(out)
    return read_bytes(t)[start:end]  # a transposed tensor transposed again: no table makes one


def _transposed_rows(t: Transposed) -> Iterator[memoryview]:
    """The rows of a transposed tensor in blocks of about BAND bytes, in memory bounded whatever
    its size (bert-large's feed-forward kernels are 16 MB, larger models' larger still): a block
    is some columns of the source, gathered by numpy from its rows, read a band of about BAND
    bytes at a time into one buffer. (Read, not mapped: a file mapped and then cut short kills
    the process with SIGBUS when its pages are touched; a read says it ended early.)"""
    import numpy as np  # here only: --help and renaming conversions never need it

    rows, cols = t.source.shape
    item = ITEM_SIZE[t.dtype]
    kind = np.dtype(f"<u{item}")  # the bytes as they are: any dtype of that width
    width = max(1, BAND // (item * rows or 1))  # source columns per block
    height = max(1, BAND // (item * cols or 1))  # source rows per band
    block = np.empty(min(width, cols) * rows, dtype=kind)
    band = np.empty(min(height, rows) * cols, dtype=kind)
    for j in range(0, cols, width):
        out = block[: min(width, cols - j) * rows].reshape(-1, rows)
        for r in range(0, rows, height):
            n = min(height, rows - r)
            _read_into(t.source, r * cols * item, memoryview(band[: n * cols]).cast("B"))
            _transpose_into(out, band[: n * cols].reshape(n, cols)[:, j : j + out.shape[0]], r)
        yield memoryview(out).cast("B")


def _transpose_into(out, columns, r: int) -> None:
    """out[:, r:r+n] = columns.T, a few rows at a time: their columns stay in the cache while
    written (~3x faster than one transposing copy)."""
    for i in range(0, columns.shape[0], TILE):
        out[:, r + i : r + min(i + TILE, len(columns))] = columns[i : i + TILE].T


def _read_into(t: Tensor, start: int, into: memoryview) -> None:
    """Bytes start.. of a tensor's data, as many as `into` holds, into it: a file's read from
    the page cache straight into the buffer, others' copied."""
    if not isinstance(t, Stored):
        into[:] = _read_range(t, start, start + len(into))
        return
    with descriptor(t.path) as fd:
        got = _pread_into(fd, into, t.start + start)
    if got != len(into):
        raise ended_early(t.path, len(into) - got)


def ended_early(path: Path, missing: int) -> CheckpointError:
    """A source found shorter while being read than when its header or index was (its sizes
    are checked then): changed on disk meanwhile."""
    return CheckpointError(
        f"{path}: the source ended {missing} bytes early, as it was read; was it changed or cut "
        "short meanwhile?"
    )


def equal(a: Tensor, b: Tensor) -> bool:
    """Same dtype, shape and bytes, compared a chunk at a time."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    return all(x == y for x, y in zip_longest(_chunks(a), _chunks(b)))


def _chunks(t: Tensor) -> Iterator[bytes]:
    """The bytes of `t` in chunks of exactly CHUNK (the last one shorter)."""
    buffer = b""
    for block in blocks(t):
        buffer += block
        while len(buffer) >= CHUNK:
            yield buffer[:CHUNK]
            buffer = buffer[CHUNK:]
    if buffer:
        yield buffer


class NotSafetensors(ValueError):
    """The file breaks the safetensors format; the message says where."""


def read_header(path: Path) -> tuple[dict[str, Stored], dict[str, str]]:
    """The tensors a safetensors file holds, as references, and its metadata. Only the header
    is read, and held to the format's rules: a JSON object of entries (each a known dtype, a
    shape of non-negative ints, two offsets that span exactly the tensor's bytes), names unique,
    the tensors contiguous from the start of the data with no gap or overlap and ending where the
    file ends, metadata strings to strings, the header at most 100 MB."""
    with files.open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(8)
        if len(raw) < 8:
            raise NotSafetensors(
                f"{size} bytes, shorter than the 8 every safetensors file opens with"
            )
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise NotSafetensors(f"its header would be {length} bytes; the format allows 100 MB")
        if 8 + length > size:
            raise NotSafetensors("the header length it starts with is larger than the file")
        header = _parse_header(f.read(length))
    metadata = _metadata(header.pop("__metadata__", None))
    base, tensors = 8 + length, {}
    for name, entry in header.items():
        dtype, shape, (begin, end) = _entry(name, entry)
        tensors[name] = Stored(path, dtype, shape, base + begin, base + end)
    _check_coverage(tensors, base, size)
    return tensors, metadata


def read_metadata(path: Path) -> dict[str, str]:
    """The safetensors metadata of a file; empty where there is none, no such file, or a file
    that is not safetensors."""
    try:
        return read_header(path)[1]
    except (NotSafetensors, BertconvError, OSError):
        return {}


def _unique_names(pairs: list[tuple[str, object]]) -> dict:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise NotSafetensors(f"its header names {key!r} twice")
        seen.add(key)
    return dict(pairs)


def _parse_header(raw: bytes) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotSafetensors("its header is not UTF-8 text") from None
    if not text.startswith("{"):
        raise NotSafetensors("its header is not a JSON object")
    try:
        return json.loads(text, object_pairs_hook=_unique_names, parse_constant=_no_constant)
    except RecursionError:
        raise NotSafetensors("its header is nested too deeply") from None
    except NotSafetensors:
        raise
    except ValueError as e:
        raise NotSafetensors(f"its header is not valid JSON ({e})") from None


def _no_constant(name: str):
    raise NotSafetensors(f"its header holds {name}, which is not JSON")


def _metadata(value) -> dict[str, str]:
    if value is not None and (
        not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())
    ):
        raise NotSafetensors("its __metadata__ is not an object of strings")
    return value or {}


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _entry(name: str, entry) -> tuple[str, tuple[int, ...], tuple[int, int]]:
    """dtype, shape and offsets of one header entry, each checked."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise NotSafetensors(
            f"tensor {name!r}: an entry holds exactly dtype, shape and data_offsets"
        )
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in ITEM_SIZE:
        raise NotSafetensors(f"tensor {name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(map(_is_count, shape)):
        raise NotSafetensors(f"tensor {name!r}: shape {shape!r} is not a list of counts")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_count, offsets)):
        raise NotSafetensors(f"tensor {name!r}: data_offsets {offsets!r} are not two counts")
    begin, end = offsets
    size = math.prod(shape) * ITEM_SIZE[dtype]
    if end - begin != size:
        raise NotSafetensors(
            f"tensor {name!r}: {dtype} of shape {tuple(shape)} is {size} "
            f"bytes, but its offsets span {end - begin}"
        )
    return dtype, tuple(shape), (begin, end)


def _check_coverage(tensors: dict[str, Stored], base: int, size: int) -> None:
    """The tensors tile the data section exactly: each starts where the one before it ends."""
    at = base
    for name, t in sorted(tensors.items(), key=lambda item: (item[1].start, item[1].end)):
        if t.start != at:
            how = "overlaps the tensor before it" if t.start < at else "leaves a gap before it"
            raise NotSafetensors(f"tensor {name!r} {how} (offset {t.start - base})")
        at = t.end
    if at != size:
        how = f"{size - at} bytes follow the last tensor" if at < size else "the file is too short"
        raise NotSafetensors(f"the tensors do not cover the file exactly: {how} (truncated?)")


# NaN and Inf are the floats whose exponent bits are all set. Those bits lie in the top two bytes
# of an element (little-endian): (the mask in the top byte, the mask in the byte below it).
EXPONENT = {"F16": (0x7C, 0x00), "BF16": (0x7F, 0x80), "F32": (0x7F, 0x80), "F64": (0x7F, 0xF0)}
SCAN = 1 << 20  # bytes read at a time: a block and its slices stay in the CPU's cache


def nonfinite(
    tensors: dict[str, Tensor], vectorised: bool = False, checksums: bool = False
) -> list[str]:
    """The names of the floating-point tensors that hold a NaN or an Inf, found without torch:
    a C-speed pass over the top byte of each element, and an exact test of the exponent only
    where the top byte allows one (~0.1 s for bert-base's 440 MB). `vectorised`: by numpy,
    for a conversion that imports it anyway (it transposes): as fast, and it lets go of the
    GIL, so that a scan beside the transposition does not hold it up. `checksums`: every stored
    tensor is read whole, and its CRC32C taken as its blocks pass (files.remember_range), so
    that what a conversion writes is checksummed without reading its source again."""
    test = has_nonfinite_vectorised if vectorised else has_nonfinite
    found = []
    for name, t in tensors.items():
        if checksums and isinstance(t, Stored):
            if _scan_stored(t, test):
                found.append(name)
        elif t.dtype in EXPONENT and any(test(b, t.dtype) for b in blocks(t)):
            found.append(name)
    return found


def _scan_stored(t: Stored, test: Callable) -> bool:
    """Whether a stored tensor holds a NaN or an Inf (floats only), its checksum remembered."""
    import google_crc32c

    crc, bad, floats = 0, False, t.dtype in EXPONENT
    with descriptor(t.path) as fd:
        at = t.start
        while at < t.end:
            block = os.pread(fd, min(SCAN, t.end - at), at)  # bytes: google_crc32c reads no other
            if not block:
                raise ended_early(t.path, t.end - at)
            crc = google_crc32c.extend(crc, block)
            bad = bad or (floats and test(block, t.dtype))
            at += len(block)
    files.remember_range(t.path, t.start, t.end, crc)
    return bad


def nonfinite_soon(tensors: dict[str, Tensor], vectorised: bool = False) -> Callable[[], list[str]]:
    """Start `nonfinite(tensors, vectorised)` in a thread, each stored tensor's checksum taken
    as it passes, and return a function that waits for its answer (a failure raised there).
    The copy of a conversion runs in the kernel, outside the GIL, so the scan overlaps it."""
    answer, done = [], threading.Event()
    files.SCANS.append(done)  # a checksum of its ranges waits for it (files.range_checksum)

    def scan() -> None:
        try:
            answer.append(nonfinite(tensors, vectorised, checksums=True))
        except BaseException as e:  # raised again by the waiting function
            answer.append(e)
        finally:
            files.SCANS.remove(done)
            done.set()

    def result() -> list[str]:
        done.wait()
        if isinstance(answer[0], BaseException):
            raise answer[0]
        return answer[0]

    scanner = in_thread(scan)
    scanner.daemon = True
    scanner.start()
    return result


def transposes(tensors: dict[str, Tensor]) -> bool:
    """Whether writing these tensors transposes any (and so imports numpy)."""

    def transposed(t: Tensor) -> bool:
        return isinstance(t, Transposed) or (
            isinstance(t, Joined) and any(map(transposed, t.parts))
        )

    return any(map(transposed, tensors.values()))


@cache
def _exponent_tests(dtype: str) -> tuple[list[int], bytes, bytes]:
    """The top-byte values that may start a NaN or an Inf, and two 256-byte tables mapping a
    byte to 1 where it has the top (resp. next) byte's exponent bits all set."""
    high, low = EXPONENT[dtype]
    candidates = [b for b in range(256) if b & high == high]
    top = bytes(int(b & high == high) for b in range(256))
    below = bytes(int(b & low == low) for b in range(256))
    return candidates, top, below


def has_nonfinite(block: bytes | bytearray, dtype: str) -> bool:
    item = ITEM_SIZE[dtype]
    candidates, top_table, below_table = _exponent_tests(dtype)
    top = block[item - 1 :: item]
    if not any(top.find(b) >= 0 for b in candidates):
        return False  # the usual case: no element is near the top of the range
    # Per element, 1 where the top byte's exponent bits are all set, and likewise the next
    # byte's: a NaN or an Inf is an element with both, found by ANDing them as big integers.
    high = int.from_bytes(top.translate(top_table), "little")
    low = int.from_bytes(block[item - 2 :: item].translate(below_table), "little")
    return bool(high & low)


def has_nonfinite_vectorised(block: bytes | bytearray, dtype: str) -> bool:
    """has_nonfinite by numpy: elements whose exponent bits are all set."""
    import numpy as np

    item = ITEM_SIZE[dtype]
    high, low = EXPONENT[dtype]
    exponent = high << 8 * (item - 1) | low << 8 * (item - 2)
    values = np.frombuffer(block, dtype=f"<u{item}")
    return bool(np.any(values & exponent == exponent))


def blocks(t: Tensor) -> Iterator[bytes | bytearray]:
    """A tensor's bytes in blocks of whole elements."""
    if not isinstance(t, Stored):
        for p in pieces(t):
            yield from blocks(p) if isinstance(p, Stored) else [p]
        return
    buffer = bytearray(min(SCAN, t.end - t.start))
    with descriptor(t.path) as fd:
        at, left = t.start, t.end - t.start
        while left:
            n = _pread_into(fd, memoryview(buffer)[: min(len(buffer), left)], at)
            if not n:
                raise ended_early(t.path, left)
            yield buffer if n == len(buffer) else buffer[:n]
            at, left = at + n, left - n


def on_two_cores(work: Callable, shares: list, progress: Callable[[int], None]) -> None:
    """`work(share, report)` for each of one or two shares at once, the second on a thread of
    its own (for work that lets go of the GIL: the kernel's copies, reads); `report` passes
    progress on from either thread. The first failure is raised here."""
    lock, failed = threading.Lock(), []

    def report(n: int) -> None:
        with lock:  # a progress bar is not made for two threads
            progress(n)

    def run(share) -> None:
        try:
            work(share, report)
        except BaseException as e:  # raised again in the calling thread
            failed.append(e)

    mine, *others = shares
    helpers = [in_thread(run, share) for share in others]
    for helper in helpers:
        helper.start()
    run(mine)
    for helper in helpers:
        helper.join()
    if failed:
        raise failed[0]


def all_to_torch(tensors: dict[str, Tensor], mmap: bool = False, read: dict | None = None) -> dict:
    """Every tensor as torch's (to_torch): read into memory, the stored ones in two shares of
    about equal bytes on two cores at once (the reads let go of the GIL, and most of their time
    is the kernel's, faulting in the new memory and copying the page cache into it); or, with
    `mmap`, mapped from their files, one mapping per file. `read`: the tensors read by earlier
    calls, which two models that only read their weights share (verify's and transformers'),
    and this call's added to it."""
    if read is not None:
        new = all_to_torch({n: t for n, t in tensors.items() if id(t) not in read}, mmap)
        read.update({id(tensors[n]): (tensors[n], t) for n, t in new.items()})
        return {name: read[id(t)][1] for name, t in tensors.items()}
    if mmap:
        maps = {}
        return {name: to_torch(t, maps) for name, t in tensors.items()}
    out = {}
    stored = [name for name, t in tensors.items() if isinstance(t, Stored)]
    half, at = sum(nbytes(tensors[n]) for n in stored) / 2, 0
    shares: list[list[str]] = [[], []]
    for name in stored:
        shares[at >= half].append(name)
        at += nbytes(tensors[name])

    def read(names: list[str], report) -> None:
        out.update({name: to_torch(tensors[name]) for name in names})

    on_two_cores(read, [s for s in shares if s] or [[]], lambda n: None)
    return {name: out[name] if name in out else to_torch(t) for name, t in tensors.items()}


def to_torch(t: Tensor, maps: dict | None = None):
    """A torch tensor of `t`. A stored tensor is read into memory of its own: the file may be
    rewritten or cut short later, and the tensor stays as it was read. Where `maps` is given
    (a cache of one mapping per file, across calls), it is mapped from its file instead: its
    pages are read on first use and shared with the page cache, writes stay private to the
    process, but a later write to the file shows in it, and a file cut short kills the process
    (SIGBUS) when a page past its end is touched."""
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
    if maps is None:
        return _read_tensor(t).view(dtype).view(t.shape)
    if t.path not in maps:
        with open(t.path, "rb") as f:
            maps[t.path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    return torch.frombuffer(maps[t.path], dtype=dtype, count=count, offset=t.start).view(t.shape)


def _read_tensor(t: Stored):
    """A stored tensor's bytes, read from its file straight into a torch tensor's memory (no
    buffer between, no zeroing first)."""
    import ctypes

    import torch

    out = torch.empty(t.end - t.start, dtype=torch.uint8)
    _read_into(t, 0, memoryview((ctypes.c_char * out.numel()).from_address(out.data_ptr())))
    return out


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
