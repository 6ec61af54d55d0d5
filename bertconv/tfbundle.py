"""TensorFlow's checkpoint format (V2, the "tensor bundle"), read and written without TensorFlow.

A checkpoint PREFIX (google-research/bert's `bert_model.ckpt`) is two kinds of file:
- PREFIX.data-00000-of-0000N: the tensors' bytes, little-endian, one after another, in the
  order of their names;
- PREFIX.index: a sorted table (LevelDB's format) from each tensor's name to a BundleEntryProto
  (dtype, shape, shard, offset, size, and the CRC32C of its bytes), the empty name holding a
  BundleHeaderProto. The table is blocks of prefix-compressed entries with restart points, each
  block followed by its compression type and the masked CRC32C of both; then a metaindex block
  (empty), an index block, and a 48-byte footer ending in the table's magic number.

Reading checks every block's checksum and every tensor's; tensors are handed on as references
to their bytes (storage.Stored), so a conversion streams. Writing produces what TensorFlow's own
BundleWriter produces for the same tensors, byte for byte (tests/fixtures/tf holds bundles
TensorFlow wrote, and the script that wrote them).
"""

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from . import files, storage
from .errors import CheckpointError

MAGIC = 0xDB4775248B80FB57  # LevelDB's table magic number, which TensorFlow's tables share
FOOTER = 48  # two block handles, padded to 40 bytes, then the magic number
BLOCK_SIZE = 262144  # TensorFlow's table::Options: the size a data block is cut at
RESTART_INTERVAL = 16  # entries between restart points (the index block: every entry)
HEADER_KEY = b""
# TensorFlow's DataType enum -> safetensors' dtype names (the numeric types a BERT holds)
DTYPES = {1: "F32", 2: "F64", 3: "I32", 4: "U8", 5: "I16", 6: "I8", 9: "I64", 10: "BOOL",
          14: "BF16", 17: "U16", 19: "F16", 22: "U32", 23: "U64"}  # fmt: skip
TF_DTYPES = {v: k for k, v in DTYPES.items()}
STRING = 7  # DT_STRING: bytes with lengths, not a numeric tensor


class NotABundle(ValueError):
    """The files break the format; the message says where."""


# CRC32C, as TensorFlow (and LevelDB) store it: masked, so that a CRC of data holding CRCs
# is not itself a weak one.


def crc32c(data: bytes, crc: int = 0) -> int:
    import google_crc32c

    return google_crc32c.extend(crc, data)


def mask(crc: int) -> int:
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
        if at >= len(data) or shift > 63:
            raise NotABundle("a varint runs past its data")
        byte = data[at]
        n |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return n, at


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
    """A tensor's BundleEntryProto, parsed."""

    def __init__(self, name: str, data: bytes):
        self.name = name
        self.dtype, self.shape, self.shard, self.offset, self.size, self.crc = 0, [], 0, 0, 0, None
        self.sliced = False
        for number, value in fields(data):
            if number == 1:
                self.dtype = value
            elif number == 2:
                self.shape = _shape(value)
            elif number == 3:
                self.shard = value
            elif number == 4:
                self.offset = value
            elif number == 5:
                self.size = value
            elif number == 6:
                self.crc = value
            elif number == 7:
                self.sliced = True


def _shape(data: bytes) -> list[int]:
    dims = []
    for number, value in fields(data):
        if number == 2:
            sizes = [v for n, v in fields(value) if n == 1]
            dims.append(sizes[0] if sizes else 0)
        elif number == 3 and value:
            raise NotABundle("a shape of unknown rank")
    return dims


# The sorted table (LevelDB's format) --------------------------------------------------------------


def read_table(path: Path) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of an .index file, in order, each block's checksum checked."""
    with files.open_regular(path) as f:
        data = f.read(64 << 20)
        if f.read(1):
            raise NotABundle("larger than 64 MB, more than an index of tensors")
    if len(data) < FOOTER or int.from_bytes(data[-8:], "little") != MAGIC:
        raise NotABundle("it does not end with the table's magic number")
    footer, handles, at = data[-FOOTER:], [], 0
    for _ in range(4):  # the metaindex block's offset and size, then the index block's
        value, at = read_varint(footer, at)
        handles.append(value)
    _, _, index_offset, index_size = handles
    out = []
    for _, handle in _block_entries(_block(data, index_offset, index_size)):
        offset, at = read_varint(handle, 0)
        size, _ = read_varint(handle, at)
        out += _block_entries(_block(data, offset, size))
    return out


def _block(data: bytes, offset: int, size: int) -> bytes:
    """A block's contents, its trailer checked: compression type 0 and the masked CRC32C."""
    end = offset + size
    if end + 5 > len(data) - FOOTER:
        raise NotABundle("a block handle points past the end of the file")
    contents, kind = data[offset:end], data[end]
    if kind != 0:
        raise NotABundle(f"a block compressed with method {kind}; TensorFlow writes them plain")
    stored = int.from_bytes(data[end + 1 : end + 5], "little")
    if mask(crc32c(data[offset : end + 1])) != stored:
        raise NotABundle(f"the block at byte {offset} does not match its checksum")
    return contents


def _block_entries(block: bytes) -> list[tuple[bytes, bytes]]:
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
        out.append((key, value))
    return out


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
        shared = 0
        if self.count < self.interval:
            while shared < min(len(key), len(self.last)) and key[shared] == self.last[shared]:
                shared += 1
        else:
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
    n = 0
    while n < min(len(start), len(limit)) and start[n] == limit[n]:
        n += 1
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
    try:
        table = read_table(index)
    except NotABundle as e:
        raise CheckpointError(f"{index}: not a TensorFlow checkpoint index ({e})") from None
    header = dict(table).get(HEADER_KEY)
    if header is None:
        raise CheckpointError(f"{index}: has no bundle header; not a TensorFlow V2 checkpoint")
    shards = dict(fields(header)).get(1, 1)
    if dict(fields(header)).get(2, 0) != 0:
        raise CheckpointError(f"{index}: a big-endian checkpoint, which bertconv does not read")
    tensors = {}
    for key, value in table:
        if key == HEADER_KEY:
            continue
        try:
            entry = Entry(key.decode("utf-8"), value)
        except (NotABundle, UnicodeDecodeError) as e:
            raise CheckpointError(f"{index}: an entry that cannot be read ({e})") from None
        if entry.dtype == STRING:
            continue
        tensors[entry.name] = _stored(index, prefix, entry, shards)
    _check_crcs(index, tensors, {k.decode(): v for k, v in table if k}, progress)
    return tensors


def _stored(index: Path, prefix: Path, entry: Entry, shards: int) -> storage.Stored:
    where = f"{index}: tensor {entry.name!r}"
    if entry.sliced:
        raise CheckpointError(f"{where} is partitioned into slices, which bertconv does not read")
    if entry.dtype not in DTYPES:
        raise CheckpointError(
            f"{where} has TensorFlow dtype {entry.dtype}, not a number bertconv reads"
        )
    if not 0 <= entry.shard < shards:
        raise CheckpointError(f"{where} names shard {entry.shard} of {shards}")
    t = storage.Stored(
        data_file(prefix, entry.shard, shards),
        DTYPES[entry.dtype],
        tuple(entry.shape),
        entry.offset,
        entry.offset + entry.size,
    )
    if storage.nbytes(t) != entry.size or entry.crc is None:
        raise CheckpointError(f"{where}: its size does not fit its dtype and shape")
    return t


def _check_crcs(index: Path, tensors: dict, entries: dict, progress) -> None:
    sizes = {}
    for t in tensors.values():
        if t.path not in sizes:
            try:
                with files.open_regular(t.path) as f:
                    sizes[t.path] = os.fstat(f.fileno()).st_size
            except CheckpointError as e:
                raise CheckpointError(f"{index}: its data file {e}") from None
        if t.end > sizes[t.path]:
            raise CheckpointError(f"{t.path}: ends before the tensors its index names (truncated?)")
    for name, t in tensors.items():
        crc = 0
        for block in storage.blocks(t):
            crc = crc32c(bytes(block), crc)
            progress(len(block))
        if mask(crc) != Entry(name, entries[name]).crc:
            raise CheckpointError(
                f"{t.path}: tensor {name!r} does not match the checksum its index gives; the "
                "checkpoint is damaged: download it again"
            )


def write_bundle(index: Path, data: Path, tensors: dict, progress=lambda n: None) -> None:
    """Write tensors (storage references) as a checkpoint of one shard, as TensorFlow's
    BundleWriter writes them: the data file (the tensors in the order of their names), then the
    index file. The index names no file: the data is found beside it, by its name."""
    names = sorted(tensors, key=lambda n: n.encode())
    storage.write_raw(data, [tensors[n] for n in names], progress)
    builder, offset = TableBuilder(), 0
    builder.add(HEADER_KEY, HEADER_PROTO)
    for name in names:
        t = tensors[name]
        size = storage.nbytes(t)
        stored = storage.Stored(data, t.dtype, t.shape, offset, offset + size)
        crc = 0
        for block in storage.blocks(stored):
            crc = crc32c(bytes(block), crc)
        builder.add(
            name.encode(), entry_proto(TF_DTYPES[t.dtype], t.shape, offset, size, mask(crc))
        )
        offset += size
    index.write_bytes(builder.finish())
