"""Tensors written into files: a safetensors file (a header, then the data) and TensorFlow's
data files (the data alone). The bytes are storage.py's references: stored ranges are copied file
to file by the kernel (`os.copy_file_range`), adjacent ranges in one call and a large one in two
halves at once, so that a rename-only conversion costs about what `cp` does and holds almost
nothing in memory; transformed tensors are computed a block at a time as they are written.
"""

import errno
import json
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from .storage import (
    CHUNK,
    PAGE,
    Joined,
    Stored,
    Tensor,
    descriptor,
    ended_early,
    nbytes,
    on_two_cores,
    pieces,
)

ALIGN = 1 << 16  # the kernel's copy step: a pipe's 16 pages
STEP = 64 << 20  # bytes per copy call, so that progress moves
PARALLEL = 64 << 20  # ranges from this size are copied in two halves at once
# Where the kernel will not copy between two files (other file systems, no support): by hand.
UNCOPYABLE = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}


class EndedEarly(Exception):
    """A copy found the source `missing` bytes shorter than its range."""

    def __init__(self, missing: int):
        self.missing = missing


def write_safetensors(
    path: Path, tensors: dict[str, Tensor], metadata: dict[str, str], progress: Callable = None
) -> None:
    """Write a safetensors file: the header, then each tensor's bytes, stored ones copied file
    to file by the kernel. Tensors go in the order of their bytes in the source, so that runs of
    them are copied in one call; the header is padded so the data keeps its page offset."""
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError("safetensors metadata maps strings to strings")
    order = sorted(tensors, key=lambda name: _source_position(tensors[name]))
    header, offset = {"__metadata__": metadata}, 0
    for name in order:
        t = tensors[name]
        end = offset + nbytes(t)
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, end]}
        offset = end
    first = _source_position(tensors[order[0]])[1] if order else 0
    encoded = _padded(json.dumps(header, separators=(",", ":")).encode(), first)
    head = struct.pack("<Q", len(encoded)) + encoded
    write_raw(path, [tensors[name] for name in order], progress, head)


def write_raw(
    path: Path, tensors: list[Tensor], progress: Callable | None = None, head: bytes = b""
) -> None:
    """Write `head`, then the tensors' bytes one after another with nothing between them (a
    TensorFlow data file is only these): stored ones copied file to file by the kernel."""
    with open(path, "wb") as out:
        _reserve(out.fileno(), len(head) + sum(map(nbytes, tensors)))
        out.write(head)
        # A generator: transformed tensors are computed one at a time, as they are written.
        parts = (p for t in tensors for p in pieces(t))
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
        if isinstance(run, bytes | bytearray | memoryview):
            out.write(run)
            progress(len(run))
            continue
        out.flush()
        path, start, end = run
        position = out.tell()
        with descriptor(path) as src:
            try:
                _copy_range(src, out.fileno(), start, position, end - start, progress)
            except EndedEarly as e:
                raise ended_early(path, e.missing) from None
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

    def copy(spans: list[tuple[int, int, int]], report) -> None:
        for span in spans:
            _copy_span(src, dst, *span, report)

    on_two_cores(copy, _spans(offset, position, count), progress)


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
        except TypeError:  # no copy_file_range here
            done = os.pwrite(dst, os.pread(src, min(step, CHUNK), offset), position)
        except OSError as e:
            if e.errno not in UNCOPYABLE:  # a full disk, say: the write's own error
                raise
            done = os.pwrite(dst, os.pread(src, min(step, CHUNK), offset), position)
        if done == 0:
            raise EndedEarly(count)
        offset, position, count = offset + done, position + done, count - done
        progress(done)
