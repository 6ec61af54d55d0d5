"""TensorFlow's checkpoint format (V2, the "tensor bundle"), read and written without TensorFlow.

A checkpoint PREFIX (google-research/bert's `bert_model.ckpt`) is two kinds of file:
- PREFIX.data-00000-of-0000N: the tensors' bytes, little-endian, one after another, in the
  order of their names;
- PREFIX.index: a sorted table (LevelDB's format) from each tensor's name to a BundleEntryProto
  (dtype, shape, shard, offset, size, and the CRC32C of its bytes), the empty name holding a
  BundleHeaderProto. The table is blocks of prefix-compressed entries with restart points, each
  block followed by its compression type and the masked CRC32C of both; then a metaindex block
  (empty), an index block, and a 48-byte footer ending in the table's magic number.

Reading checks every block's checksum and every tensor's, and holds the files to what TensorFlow
writes, so that a stranger's file costs no more than its size to read: the blocks one after
another (each read once), the keys sorted and each once, tensors within their data files and
never on the same bytes, nothing allocated for a size a file only claims. Tensors are handed on
as references to their bytes (storage.Stored), so a conversion streams. Writing produces what
TensorFlow's own BundleWriter produces for the same tensors, byte for byte (tests/fixtures/tf
holds bundles TensorFlow wrote, and the script that wrote them).
"""

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from . import files, storage, writing
from .errors import CheckpointError, NotFoundError

MAGIC = 0xDB4775248B80FB57  # LevelDB's table magic number, which TensorFlow's tables share
FOOTER = 48  # two block handles, padded to 40 bytes, then the magic number
TRAILER = 5  # after each block: its compression type and masked CRC32C
INDEX_LIMIT = 64 << 20  # bytes, read or spelt out: bert-large's index is 40 KB
# Entries of an index: a BERT with its optimizer's slots has ~1,200. Each costs a few hundred
# bytes once read, so that the tensors a 64 MB index could list (millions, of no size) would
# cost gigabytes.
MAX_ENTRIES = 100_000
MAX_SHARDS = 99999  # TensorFlow numbers data files with five digits
MAX_RANK = 254  # TensorFlow's TensorShape
VERSION = 1  # of the bundle format, which TensorFlow has written since 2016
BLOCK_SIZE = 262144  # TensorFlow's table::Options: the size a data block is cut at
RESTART_INTERVAL = 16  # entries between restart points (the index block: every entry)
HEADER_KEY = b""
READ = 256 << 10  # bytes read at a time to checksum
# TensorFlow's DataType enum -> safetensors' dtype names (the numeric types a BERT holds)
DTYPES = {1: "F32", 2: "F64", 3: "I32", 4: "U8", 5: "I16", 6: "I8", 9: "I64", 10: "BOOL",
          14: "BF16", 17: "U16", 19: "F16", 22: "U32", 23: "U64"}  # fmt: skip
TF_DTYPES = {v: k for k, v in DTYPES.items()}
STRING = 7  # DT_STRING: bytes with lengths, not a numeric tensor


class NotABundle(ValueError):
    """The files break the format; the message says where."""


class TooMany(NotABundle):
    """The files keep to the format, but list more than any model's checkpoint does."""


def crc32c(data: bytes, crc: int = 0) -> int:
    import google_crc32c

    return google_crc32c.extend(crc, data)


def mask(crc: int) -> int:
    """CRC32C as TensorFlow (and LevelDB) store it: masked, so that a CRC of data holding CRCs
    is not itself a weak one."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# Varints and the two protobuf messages, by hand: field numbers from tensor_bundle.proto.


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_varint(data: bytes, at: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if at >= len(data):
            raise NotABundle("a varint runs past its data")
        if shift > 63:
            raise NotABundle("a varint longer than the 10 bytes of a 64-bit one")
        byte = data[at]
        n |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return n & (1 << 64) - 1, at  # as protobuf reads it: the low 64 bits


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints, 64- and 32-bit values, bytes."""
    at = 0
    while at < len(data):
        tag, at = read_varint(data, at)
        number, kind = tag >> 3, tag & 7
        if kind == 0:
            value, at = read_varint(data, at)
        elif kind == 1:
            value, at = int.from_bytes(data[at : at + 8], "little"), at + 8
        elif kind == 5:
            value, at = int.from_bytes(data[at : at + 4], "little"), at + 4
        elif kind == 2:
            length, at = read_varint(data, at)
            value, at = data[at : at + length], at + length
        else:
            raise NotABundle(f"a protobuf field of wire type {kind}")
        if at > len(data):
            raise NotABundle("a protobuf field runs past its message")
        yield number, value


def _message(data: bytes, kinds: dict[int, type]) -> dict[int, int | bytes]:
    """The fields of a protobuf message named in `kinds`, each of its type (int: a number,
    bytes: a message), the last of each kept, as protobuf does; others are skipped."""
    out = {}
    for number, value in fields(data):
        if number in kinds:
            if not isinstance(value, kinds[number]):
                raise NotABundle(f"field {number} of a message is not of its type")
            out[number] = value
    return out


def _signed(n: int) -> int:
    """An int64 field's value: protobuf writes negative ones as 2**64 + n."""
    return n - (1 << 64) if n >> 63 else n


def entry_proto(dtype: int, shape: tuple[int, ...], offset: int, size: int, crc: int) -> bytes:
    """A BundleEntryProto as protobuf serialises it: fields in order, zeros left out (shard_id
    is always 0 here), the shape present even when it has no dimension."""
    dims = b"".join(b"\x12" + _length(b"\x08" + varint(d) if d else b"") for d in shape)
    out = b"\x08" + varint(dtype) + b"\x12" + _length(dims)
    out += (b"\x20" + varint(offset) if offset else b"") + (b"\x28" + varint(size) if size else b"")
    return out + b"\x35" + struct.pack("<I", crc)


def _length(data: bytes) -> bytes:
    return varint(len(data)) + data


HEADER_PROTO = b"\x08\x01\x1a\x02\x08\x01"  # num_shards 1, little-endian, version {producer 1}


class Entry:
    """A tensor's BundleEntryProto, parsed: dtype 1, shape 2, shard_id 3, offset 4, size 5,
    crc32c 6, slices 7."""

    __slots__ = ("name", "dtype", "shape", "shard", "offset", "size", "crc", "sliced")

    def __init__(self, key: bytes, data: bytes):
        try:
            self.name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise NotABundle(f"a tensor name that is not UTF-8 text ({key[:60]!r})") from None
        message = _message(data, {1: int, 2: bytes, 3: int, 4: int, 5: int, 6: int, 7: bytes})
        self.dtype = message.get(1, 0)
        self.shape = _shape(message.get(2, b""))
        self.shard, self.offset, self.size = (_signed(message.get(n, 0)) for n in (3, 4, 5))
        self.crc = message.get(6)
        self.sliced = 7 in message
        if min(self.shard, self.offset, self.size) < 0:
            raise NotABundle(f"tensor {self.name!r} has a negative shard, offset or size")


def _shape(data: bytes) -> tuple[int, ...]:
    """A TensorShapeProto's dimensions (dim 2, each a Dim of size 1; unknown_rank 3)."""
    dims = []
    for number, value in fields(data):
        if number == 2 and isinstance(value, bytes):
            dims.append(_signed(_message(value, {1: int}).get(1, 0)))
        elif number == 3 and value:
            raise NotABundle("a shape of unknown rank")
        if len(dims) > MAX_RANK:
            raise NotABundle(f"a shape of more than {MAX_RANK} dimensions")
    if any(d < 0 for d in dims):
        raise NotABundle(f"a shape with a dimension of unknown size {dims}")
    return tuple(dims)


# The sorted table (LevelDB's format) --------------------------------------------------------------


def read_sstable(path: Path) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of an .index file, in order, held to the format TensorFlow writes:
    each block's checksum checked, the blocks one after another from the file's start (so that
    no byte is read twice), the keys strictly increasing, INDEX_LIMIT bytes of them at most, and
    MAX_ENTRIES tensors (and the header)."""
    with files.open_regular(path) as f:
        data = f.read(min(os.fstat(f.fileno()).st_size, INDEX_LIMIT))  # not a buffer of 64 MB
        if f.read(1):
            raise NotABundle(f"larger than {INDEX_LIMIT >> 20} MB, more than an index of tensors")
    out, end, budget = [], 0, INDEX_LIMIT
    for offset, size in block_handles(data):
        if offset != end:
            raise NotABundle(f"the index points to a block at byte {offset}, not at {end}")
        entries = _block_entries(_block(data, offset, size), budget, MAX_ENTRIES + 1 - len(out))
        budget -= sum(len(k) + len(v) for k, v in entries)
        out += entries
        end = offset + size + TRAILER
    # Sorted, each key once: a name twice would leave which tensor it means to the order of reading.
    for (before, _), (key, _) in zip(out, out[1:], strict=False):
        if key == before:
            raise NotABundle(f"it names {_text(key)!r} twice")
        if key < before:
            raise NotABundle(f"its keys are out of order ({_text(key)!r} after {_text(before)!r})")
    return out


def block_handles(data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of each data block of a table, as its index block lists them."""
    if len(data) < FOOTER or int.from_bytes(data[-8:], "little") != MAGIC:
        raise NotABundle("it does not end with the table's magic number")
    footer, handles, at = data[-FOOTER:], [], 0
    for _ in range(4):  # the metaindex block's offset and size, then the index block's
        value, at = read_varint(footer, at)
        handles.append(value)
    out = []
    # A data block holds an entry at least: no more blocks than entries.
    for _, handle in _block_entries(_block(data, *handles[2:]), INDEX_LIMIT, MAX_ENTRIES + 1):
        offset, at = read_varint(handle, 0)
        out.append((offset, read_varint(handle, at)[0]))
    return out


def _block(data: bytes, offset: int, size: int) -> bytes:
    """A block's contents, its trailer checked: compression type 0 and the masked CRC32C."""
    end = offset + size
    if end + TRAILER > len(data) - FOOTER:
        raise NotABundle("a block handle points past the end of the file")
    contents, kind = data[offset:end], data[end]
    if kind != 0:
        raise NotABundle(f"a block compressed with method {kind}; TensorFlow writes them plain")
    stored = int.from_bytes(data[end + 1 : end + TRAILER], "little")
    if mask(crc32c(data[offset : end + 1])) != stored:
        raise NotABundle(f"the block at byte {offset} does not match its checksum")
    return contents


def _block_entries(block: bytes, budget: int, room: int) -> list[tuple[bytes, bytes]]:
    """A block's entries, prefix-compressed keys made whole. `budget`: the bytes they may take
    (a key may share its every byte with the one before, so a small block could otherwise
    spell out keys of any total size); `room`: how many there may be."""
    if len(block) < 4:
        raise NotABundle("a block too short to hold its restart count")
    restarts = int.from_bytes(block[-4:], "little")
    end = len(block) - 4 - 4 * restarts
    if restarts < 1 or end < 0:
        raise NotABundle("a block's restart count does not fit it")
    out, key, at = [], b"", 0
    while at < end:
        shared, at = read_varint(block, at)
        unshared, at = read_varint(block, at)
        length, at = read_varint(block, at)
        if shared > len(key) or at + unshared + length > end:
            raise NotABundle("a table entry runs past its block")
        key = key[:shared] + block[at : at + unshared]
        value = block[at + unshared : at + unshared + length]
        at += unshared + length
        budget -= len(key) + len(value)
        if budget < 0:
            raise NotABundle(f"its entries spell out more than {INDEX_LIMIT >> 20} MB")
        if len(out) == room:
            raise TooMany(
                f"it lists more than {MAX_ENTRIES} tensors, where a BERT's index (its optimizer's "
                "slots included) lists ~1,200; bertconv reads no larger index"
            )
        out.append((key, value))
    return out


def _text(key: bytes) -> str:
    return key.decode("utf-8", "replace")


class TableBuilder:
    """Writes a sorted table as TensorFlow's table::TableBuilder does, with its options."""

    def __init__(self):
        self.out = bytearray()
        self.block = _BlockBuilder(RESTART_INTERVAL)
        self.index = _BlockBuilder(1)
        self.last_key = b""
        self.pending: bytes | None = None  # the handle of a block whose index entry waits

    def add(self, key: bytes, value: bytes) -> None:
        if self.pending is not None:
            self.index.add(_shortest_separator(self.last_key, key), self.pending)
            self.pending = None
        self.block.add(key, value)
        self.last_key = key
        if self.block.size_estimate() >= BLOCK_SIZE:
            self._flush()

    def _flush(self) -> None:
        if not self.block.entries:
            return
        self.pending = self._write_block(self.block)
        self.block = _BlockBuilder(RESTART_INTERVAL)

    def _write_block(self, block: "_BlockBuilder") -> bytes:
        contents = block.finish()
        handle = varint(len(self.out)) + varint(len(contents))
        trailer = b"\x00"
        self.out += contents + trailer + struct.pack("<I", mask(crc32c(contents + trailer)))
        return handle

    def finish(self) -> bytes:
        self._flush()
        meta = self._write_block(_BlockBuilder(RESTART_INTERVAL))  # no meta blocks
        if self.pending is not None:
            self.index.add(_short_successor(self.last_key), self.pending)
        index = self._write_block(self.index)
        footer = (meta + index).ljust(40, b"\x00") + struct.pack("<Q", MAGIC)
        return bytes(self.out + footer)


class _BlockBuilder:
    def __init__(self, restart_interval: int):
        self.interval = restart_interval
        self.buffer = bytearray()
        self.restarts = [0]
        self.count = 0  # entries since the last restart
        self.entries = 0
        self.last = b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = len(os.path.commonprefix([key, self.last])) if self.count < self.interval else 0
        if self.count >= self.interval:
            self.restarts.append(len(self.buffer))
            self.count = 0
        self.buffer += varint(shared) + varint(len(key) - shared) + varint(len(value))
        self.buffer += key[shared:] + value
        self.last, self.count, self.entries = key, self.count + 1, self.entries + 1

    def size_estimate(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        restarts = b"".join(struct.pack("<I", r) for r in self.restarts)
        return bytes(self.buffer) + restarts + struct.pack("<I", len(self.restarts))


def _shortest_separator(start: bytes, limit: bytes) -> bytes:
    """LevelDB's bytewise comparator: a short key >= start and < limit."""
    n = len(os.path.commonprefix([start, limit]))
    if n < min(len(start), len(limit)) and start[n] < 0xFF and start[n] + 1 < limit[n]:
        return start[:n] + bytes([start[n] + 1])
    return start


def _short_successor(key: bytes) -> bytes:
    for n, byte in enumerate(key):
        if byte != 0xFF:
            return key[:n] + bytes([byte + 1])
    return key


# Bundles ------------------------------------------------------------------------------------------


def data_file(prefix: Path, shard: int = 0, shards: int = 1) -> Path:
    return prefix.with_name(f"{prefix.name}.data-{shard:05d}-of-{shards:05d}")


def read_bundle(prefix: Path, progress: Callable[[int], None] = lambda n: None) -> dict:
    """The tensors of the checkpoint PREFIX, as references to their bytes, every checksum
    checked (the tensors' by reading them once, in blocks). String tensors are left out (a
    BERT holds none; TF 2's object graph is one)."""
    index = prefix.with_name(prefix.name + ".index")
    shards, entries = _entries(index)
    paths: dict[int, Path] = {}  # a data file's path, made once (not once per tensor)
    tensors, crcs = {}, {}
    for e in entries:
        if e.dtype != STRING:
            tensors[e.name] = _stored(index, prefix, e, shards, paths)
            crcs[e.name] = e.crc
    del entries
    by_file: dict[Path, list[str]] = {}  # each data file's tensors, in the order of their bytes
    for name in sorted(tensors, key=lambda n: (tensors[n].start, tensors[n].end)):
        by_file.setdefault(tensors[name].path, []).append(name)
    _check_data_files(index, tensors, by_file)
    _check_crcs(tensors, crcs, by_file, progress)
    return tensors


def _entries(index: Path) -> tuple[int, list[Entry]]:
    """The number of data files, and each tensor's entry, of an .index file."""
    try:
        table = read_sstable(index)
        return _header(table), [Entry(key, value) for key, value in table[1:]]
    except TooMany as e:  # a file that keeps to the format: no advice on damaged downloads
        raise CheckpointError(f"{index}: {e}") from None
    except NotABundle as e:
        raise CheckpointError(
            f"{index}: not a TensorFlow checkpoint index ({e}). {files.diagnose(index)}"
        ) from None


def _header(table: list[tuple[bytes, bytes]]) -> int:
    """The number of shards the BundleHeaderProto, the first entry, gives (num_shards 1,
    endianness 2, version 3), the rest of it checked."""
    if not table or table[0][0] != HEADER_KEY:
        raise NotABundle("it has no bundle header; not a TensorFlow V2 checkpoint")
    header = _message(table[0][1], {1: int, 2: int, 3: bytes})
    shards = _signed(header.get(1, 0))
    if not 1 <= shards <= MAX_SHARDS:
        raise NotABundle(f"its header gives {shards} data files; TensorFlow writes 1 to 99999")
    if header.get(2, 0) != 0:
        raise NotABundle("a big-endian checkpoint, which bertconv does not read")
    needs = _signed(_message(header.get(3, b""), {2: int}).get(2, 0))  # version.min_consumer
    if needs > VERSION:
        raise NotABundle(f"written for readers of version {needs} and up; bertconv reads {VERSION}")
    return shards


def _stored(
    index: Path, prefix: Path, entry: Entry, shards: int, paths: dict[int, Path]
) -> storage.Stored:
    where = f"{index}: tensor {entry.name!r}"
    if entry.sliced:
        raise CheckpointError(f"{where} is partitioned into slices, which bertconv does not read")
    if entry.dtype not in DTYPES:
        raise CheckpointError(
            f"{where} has TensorFlow dtype {entry.dtype}, not a number bertconv reads"
        )
    if entry.shard >= shards:
        raise CheckpointError(f"{where} names data file {entry.shard} of {shards}")
    if entry.crc is None:
        raise CheckpointError(f"{where} has no checksum")
    if entry.shard not in paths:
        paths[entry.shard] = data_file(prefix, entry.shard, shards)
    end = entry.offset + entry.size
    t = storage.Stored(paths[entry.shard], DTYPES[entry.dtype], entry.shape, entry.offset, end)
    if storage.nbytes(t) != entry.size:
        raise CheckpointError(
            f"{where}: {t.dtype} of shape {entry.shape} is {storage.nbytes(t)} bytes, but the "
            f"index gives {entry.size}"
        )
    return t


def _check_data_files(index: Path, tensors: dict, by_file: dict[Path, list[str]]) -> None:
    """Each tensor within its data file, and no two on the same bytes (TensorFlow writes each
    once; overlapping ones would be read and checked again and again)."""
    for path, names in by_file.items():
        try:
            with files.open_regular(path) as f:
                size = os.fstat(f.fileno()).st_size
        except NotFoundError:
            raise NotFoundError(f"{index}: its data file {path.name} is not there") from None
        if max(tensors[name].end for name in names) > size:
            raise CheckpointError(
                f"{path}: ends before the tensors its index names. {files.diagnose(path)}"
            )
        for before, name in zip(names, names[1:], strict=False):
            if tensors[name].start < tensors[before].end:
                raise CheckpointError(f"{index}: tensors {before!r} and {name!r} overlap")


def _check_crcs(tensors: dict, crcs: dict[str, int], by_file: dict, progress) -> None:
    """Every tensor's bytes against its checksum, each data file read once, in the order of its
    bytes."""
    for path, names in by_file.items():
        found = checksums(path, [tensors[name] for name in names], progress)
        for name, crc in zip(names, found, strict=True):
            if mask(crc) != crcs[name]:
                raise CheckpointError(
                    f"{path}: tensor {name!r} does not match the checksum its index gives; the "
                    "checkpoint is damaged: download it again"
                )


def checksums(path: Path, spans: list[storage.Stored], progress=lambda n: None) -> list[int]:
    """The CRC32C of each range of the file `path`, the ranges read in two halves at once (the
    reads let go of the GIL; the checksum is ~10x faster than the read)."""
    found = [0] * len(spans)
    half, at = sum(t.end - t.start for t in spans) // 2, 0
    split = next((i for i, t in enumerate(spans) if (at := at + t.end - t.start) > half), 0)

    def work(indices: range, report) -> None:
        with open(path, "rb", buffering=0) as f:
            for i in indices:
                found[i] = _crc_of(f.fileno(), spans[i], report)

    shares = [range(0, split), range(split, len(spans))]
    storage.on_two_cores(work, [s for s in shares if s] or [range(0)], progress)
    return found


def _crc_of(fd: int, t: storage.Stored, progress) -> int:
    """The CRC32C of a stored tensor's bytes, read from the open file `fd` (in reads of
    READ bytes: larger ones are each a fresh allocation the kernel must fault in). Remembered
    (files.remember_range): what a conversion copies of it is not read again to checksum. (The
    scan for NaN and Inf reads the bundle again, beside the transposition, where it costs
    nothing; looked for here, before it, bert-large's check took 0.6 s, not 0.25 s.)"""
    crc, at = 0, t.start
    while at < t.end:
        block = os.pread(fd, min(READ, t.end - at), at)
        if not block:
            raise storage.ended_early(t.path, t.end - at)
        crc = crc32c(block, crc)
        progress(len(block))
        at += len(block)
    files.remember_range(t.path, t.start, t.end, crc)
    return crc


def write_bundle(index: Path, data: Path, tensors: dict, progress=lambda n: None) -> None:
    """Write tensors (storage references) as a checkpoint of one shard, as TensorFlow's
    BundleWriter writes them: the data file (the tensors in the order of their names), then the
    index file. The index names no file: the data is found beside it, by its name."""
    names = sorted(tensors, key=lambda n: n.encode())
    sizes = [storage.nbytes(tensors[n]) for n in names]
    checksum = writing.Checksum(sizes)  # each tensor's, and the file's for its record
    writing.write_raw(data, [tensors[n] for n in names], progress, checksum=checksum)
    files.remember(data, checksum.result())
    builder, offset = TableBuilder(), 0
    builder.add(HEADER_KEY, HEADER_PROTO)
    for name, size, crc in zip(names, sizes, checksum.segments, strict=True):
        t = tensors[name]
        builder.add(
            name.encode(), entry_proto(TF_DTYPES[t.dtype], t.shape, offset, size, mask(crc))
        )
        offset += size
    index.write_bytes(builder.finish())
