"""Tensors written into files: a safetensors file (a header, then the data) and TensorFlow's
data files (the data alone). The bytes are storage.py's references: stored ranges are copied file
to file by the kernel (`os.copy_file_range`), adjacent ranges in one call and a large one in two
halves at once, so that a rename-only conversion costs about what `cp` does and holds almost
nothing in memory; transformed tensors are computed a block at a time as they are written.
"""

import bisect
import errno
import json
import os
import struct
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path

from . import files
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
) -> str:
    """Write a safetensors file: the header, then each tensor's bytes, stored ones copied file
    to file by the kernel. Tensors go in the order of their bytes in the source, so that runs of
    them are copied in one call; the header is padded so the data keeps its page offset. Returns
    the file's CRC32C as written (files.checksum's digits)."""
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
    checksum = Checksum()
    write_raw(path, [tensors[name] for name in order], progress, head, checksum)
    return checksum.result()


def write_raw(
    path: Path,
    tensors: list[Tensor],
    progress: Callable | None = None,
    head: bytes = b"",
    checksum: "Checksum | None" = None,
) -> None:
    """Write `head`, then the tensors' bytes one after another with nothing between them (a
    TensorFlow data file is only these): stored ones copied file to file by the kernel. Where a
    `checksum` is given, every byte written goes through it too."""
    seen = checksum.add if checksum else _unseen
    with open(path, "wb") as out:
        _reserve(out.fileno(), len(head) + sum(map(nbytes, tensors)))
        out.write(head)
        seen(head)
        # A generator: transformed tensors are computed one at a time, as they are written.
        parts = (p for t in tensors for p in pieces(t))
        _copy(parts, out, progress or (lambda n: None), seen)


def _unseen(part) -> None:
    pass


class Checksum:
    """The CRC32C of a file as it is written (files.checksum's), and of each of its `segments`
    (their lengths in bytes, in order: a bundle's tensors; by default the file is one), never
    read back from it. Blocks written are checksummed as they pass (they are in the cache;
    google_crc32c reads bytes only: a 4 MB block's copy and checksum cost 0.5 ms). A range the
    kernel copies takes the checksum a conversion's scan of its source took as it read it
    (storage.nonfinite): the source is read once. A range no scan read is read here. The
    checksums of the parts are joined by files.crc32c_combine."""

    def __init__(self, segments: list[int] | None = None):
        self.lengths = segments
        self._ends = _ends(segments)
        self._parts: list[tuple] = []  # (crc, length) of a block; (path, start, end) of a range
        self._position = 0

    def add(self, part: bytes | bytearray | memoryview | tuple[Path, int, int]) -> None:
        """Bytes written next, or a range (path, start, end) of a file copied next."""
        import google_crc32c

        if isinstance(part, tuple):
            for cut in self._cut(part[2] - part[1]):
                self._parts.append((part[0], part[1] + cut[0], part[1] + cut[1]))
            return
        view = memoryview(part).cast("B")
        for low, high in self._cut(len(view)):
            piece = _readable(part) if high - low == len(view) else None
            piece = bytes(view[low:high]) if piece is None else piece
            self._parts.append((google_crc32c.value(piece), high - low))

    def _cut(self, length: int) -> list[tuple[int, int]]:
        """[low, high) pieces of the next `length` bytes, cut where a segment ends."""
        cuts, done = [], 0
        while done < length:
            i = bisect.bisect_right(self._ends, self._position)  # the segment it lies in
            end = self._ends[i] if i < len(self._ends) else None
            step = length - done if end is None else min(length - done, end - self._position)
            cuts.append((done, done + step))
            done, self._position = done + step, self._position + step
        return cuts

    @property
    def _lengths(self) -> list[int]:
        return self.lengths if self.lengths is not None else [self._position]

    @cached_property
    def segments(self) -> list[int]:
        """Each segment's CRC32C (the whole file's where none were given), once all is added."""
        lengths = self._lengths
        if sum(lengths) != self._position:
            raise ValueError(f"{self._position} bytes written for segments of {sum(lengths)}")
        found, parts = [], iter(self._parts)
        for length in lengths:
            crc, left = 0, length
            while left:
                part_crc, size = _checksum(next(parts))
                crc, left = files.crc32c_combine(crc, part_crc, size), left - size
            found.append(crc)
        return found

    def result(self) -> str:
        """The file's checksum's digits."""
        crc = 0
        for found, length in zip(self.segments, self._lengths, strict=True):
            crc = files.crc32c_combine(crc, found, length)
        return f"{crc:08x}"


def _readable(block: bytes | bytearray | memoryview) -> object | None:
    """What google_crc32c reads of `block` as it is, without a copy: bytes, or the numpy array
    a view of a transposed block is of (it takes buffers without a release hook, so not a
    memoryview; a view of fewer bytes than its array is a part of it); None where only a copy
    will do."""
    if isinstance(block, bytes):
        return block
    owner = block.obj if isinstance(block, memoryview) else None
    if type(owner).__name__ != "ndarray" or not block.contiguous:
        return None
    whole = memoryview(owner)
    return owner if whole.contiguous and whole.nbytes == block.nbytes else None


def _checksum(part: tuple) -> tuple[int, int]:
    """A part's (CRC32C, length): a block's as taken; a range's as its source's scan found it,
    or read now."""
    if len(part) == 2:
        return part
    path, start, end = part
    known = files.range_checksum(path, start, end)
    if known is None:
        import google_crc32c

        known = 0
        for block in _blocks(part):
            known = google_crc32c.extend(known, block)
    return known, end - start


def _ends(segments: list[int] | None) -> list[int]:
    ends, at = [], 0
    for length in segments or []:
        at += length
        ends.append(at)
    return ends


def _blocks(part: tuple[Path, int, int]) -> Iterator[bytes]:
    path, start, end = part
    with descriptor(path) as fd:
        while start < end:
            block = os.pread(fd, min(end - start, CHUNK), start)
            if not block:
                raise ended_early(path, end - start)
            yield block
            start += len(block)


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


def _copy(parts: Iterator, out, progress: Callable[[int], None], seen: Callable) -> None:
    """Write bytes as they are and file ranges by the kernel, merging adjacent ranges; each
    part written is `seen` too."""
    for run in _merged(parts):
        seen(run)
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
