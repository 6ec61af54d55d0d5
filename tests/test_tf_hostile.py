"""Hostile TensorFlow files, class by class: bundles whose index or data break the
format (each spoiled index rebuilt with valid checksums, so that the check behind them is the
one that answers), and tf_model.h5 files that lead elsewhere or claim more than they hold. Each
gives one message and its documented exit code, never a traceback, a hang, unbounded memory, or
a file outside the checkpoint opened."""

import json
import os
import shutil
import struct
import time
import tracemalloc
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import h5weights, storage, tfbundle
from bertconv.errors import CheckpointError
from hostile import hostile, refused, snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "tf"
INDEX, DATA = "bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"
TABLE = tfbundle.read_sstable(FIXTURES / "bert_tiny" / INDEX)  # TensorFlow's (key, value)s
NAME = "bert/embeddings/LayerNorm/beta"  # the first tensor: F32 (8,) at offset 0
LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 27524\n"
HTML = b"<!DOCTYPE html><html><body>Sign in to continue</body></html>"


def copied(tmp_path: Path, name: str = "bert_tiny") -> Path:
    """A fixture directory as shipped (without the tests' expected values)."""
    ignore = shutil.ignore_patterns("expected*")
    return shutil.copytree(FIXTURES / name, tmp_path / "src", ignore=ignore)


def convert(cli, src: Path, tmp_path: Path):
    """Convert as a user would; the source must be left as it was, and no output made."""
    before = snapshot(src)
    result = cli("convert", src, "--out", tmp_path / "out")
    assert snapshot(src) == before
    assert result[0] == 0 or not (tmp_path / "out").exists()
    return result


def dims(*sizes: bytes) -> bytes:
    """A TensorShapeProto of these dimensions (each a size, as varint bytes)."""
    return b"".join(b"\x12" + tfbundle.varint(len(size) + 1) + b"\x08" + size for size in sizes)


def entry(dtype: int = 1, shape: bytes = dims(b"\x08"), fields: bytes = b"", crc=True) -> bytes:
    """A BundleEntryProto by hand: a dtype (F32), a shape ((8,)), other fields as they are
    given, a checksum."""
    out = b"\x08" + tfbundle.varint(dtype) + b"\x12" + tfbundle.varint(len(shape)) + shape
    return out + fields + (b"\x35" + struct.pack("<I", 0) if crc else b"")


def write_index(src: Path, table: list[tuple[bytes, bytes]]) -> None:
    """The index rewritten with these entries, in this order, its checksums valid."""
    builder = tfbundle.TableBuilder()
    for key, value in table:
        builder.add(key, value)
    (src / INDEX).write_bytes(builder.finish())


def replaced(name: str, value: bytes) -> list[tuple[bytes, bytes]]:
    return [(k, value if k == name.encode() else v) for k, v in TABLE]


def header(fields: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"", fields), *TABLE[1:]]


SIZE = b"\x28" + tfbundle.varint(32)  # size: 32 bytes, what F32 (8,) takes
MILLIONS = dims(tfbundle.varint(1 << 22), tfbundle.varint(1 << 22))  # 2**22 x 2**22
NEGATIVE = tfbundle.varint((1 << 64) - 8)  # -8, as protobuf writes a negative int64

# (what is wrong, how the index's entries are spoiled, what is said)
ENTRY_CASES = [
    ("a name twice", [*TABLE[:2], TABLE[1], *TABLE[2:]], f"it names '{NAME}' twice"),
    ("keys out of order", [TABLE[0], TABLE[2], TABLE[1], *TABLE[3:]], "keys are out of order"),
    ("no header", TABLE[1:], "it has no bundle header"),
    ("a name not UTF-8", sorted([*TABLE, (b"bert/\xff\xfe", TABLE[1][1])]), "not UTF-8 text"),
    ("no data files", header(b"\x08\x00"), "its header gives 0 data files"),
    ("-1 data files", header(b"\x08" + NEGATIVE), "its header gives -8 data files"),
    ("10**9 data files", header(b"\x08" + tfbundle.varint(10**9)), "gives 1000000000 data"),
    ("big-endian", header(b"\x08\x01\x10\x01"), "a big-endian checkpoint"),
    ("a newer format", header(b"\x08\x01\x1a\x04\x08\x05\x10\x02"), "readers of version 2"),
    ("a shard of none", replaced(NAME, entry(fields=b"\x18\x03" + SIZE)), "data file 3 of 1"),
    ("a varint unended", replaced(NAME, b"\x08" + b"\x80" * 12), "longer than the 10 bytes"),
    ("a varint cut off", replaced(NAME, b"\x08\x80"), "a varint runs past its data"),
    ("a negative offset", replaced(NAME, entry(fields=b"\x20" + NEGATIVE)), "a negative shard"),
    ("size and shape differ", replaced(NAME, entry(fields=b"\x28\x10")), "the index gives 16"),
    ("a shape as a number", replaced(NAME, b"\x08\x01\x10\x08"), "is not of its type"),
    ("unknown rank", replaced(NAME, entry(shape=b"\x18\x01")), "a shape of unknown rank"),
    ("a dimension of -8", replaced(NAME, entry(shape=dims(NEGATIVE))), "unknown size"),
    ("no checksum", replaced(NAME, entry(fields=SIZE, crc=False)), "has no checksum"),
    ("sliced", replaced(NAME, entry(fields=SIZE + b"\x3a\x00")), "partitioned into slices"),
    ("a resource", replaced(NAME, entry(dtype=20, fields=SIZE)), "has TensorFlow dtype 20"),
    # 64 TB of float32 declared, never allocated: refused at once.
    ("64 TB", replaced(NAME, entry(shape=MILLIONS, fields=b"\x28" + tfbundle.varint(1 << 46))),
     "ends before the tensors its index names"),
]  # fmt: skip


@pytest.mark.parametrize("case, table, message", ENTRY_CASES, ids=[c[0] for c in ENTRY_CASES])
def test_an_index_breaking_the_format_is_one_message(case, table, message, tmp_path, cli):
    src = copied(tmp_path)
    write_index(src, table)
    refused(convert(cli, src, tmp_path), 4, message)


def test_tensors_on_the_same_bytes_are_refused_not_read_again_and_again(tmp_path, cli):
    """Entries sharing bytes would make the checksums read them once per entry: a small data
    file could then cost any amount of reading."""
    twin = [(k, TABLE[1][1]) if k.endswith(b"/beta/adam_m") else (k, v) for k, v in TABLE]
    src = copied(tmp_path)
    write_index(src, twin)
    refused(convert(cli, src, tmp_path), 4, "tensors", "overlap")


def test_keys_that_spell_out_more_than_the_limit_are_refused(tmp_path, cli):
    """Prefix compression lets each entry repeat the key before it: 100 entries of 6 bytes
    after a key of 1 MB spell out 100 MB. The reading stops at INDEX_LIMIT."""
    v = tfbundle.varint
    entries = v(0) + v(0) + v(len(tfbundle.HEADER_PROTO)) + tfbundle.HEADER_PROTO
    entries += v(0) + v(1 << 20) + v(0) + b"k" * (1 << 20)
    entries += b"".join(v((1 << 20) + n) + v(1) + v(0) + b"k" for n in range(100))
    src = copied(tmp_path)
    (src / INDEX).write_bytes(one_block_table(entries))
    refused(convert(cli, src, tmp_path), 4, "its entries spell out more than 64 MB")


def one_block_table(entries: bytes) -> bytes:
    """A table of one data block holding these encoded entries (with no restart point but
    the first: each key may share the one before it), its checksums valid."""
    builder, block = tfbundle.TableBuilder(), tfbundle._BlockBuilder(1)
    block.buffer = bytearray(entries)
    builder.pending, builder.last_key = builder._write_block(block), b"k"
    return builder.finish()


def first_block_size(raw: bytes) -> int:
    return tfbundle.block_handles(raw)[0][1]  # the first data block, at the file's start


def rechecked(raw: bytes, contents: bytes, kind: int = 0) -> bytes:
    """The first data block replaced by `contents` (of its size), stored with compression
    `kind`, its checksum made to match: a block whose checksum holds, and whose content does
    not."""
    size = first_block_size(raw)
    trailer = bytes([kind])
    crc = struct.pack("<I", tfbundle.mask(tfbundle.crc32c(contents + trailer)))
    return contents + trailer + crc + raw[size + tfbundle.TRAILER :]


def listing_the_first_block_twice(raw: bytes) -> bytes:
    """The index block rewritten to list the first data block twice (its checksum valid)."""
    handle = tfbundle.varint(0) + tfbundle.varint(first_block_size(raw))
    block = tfbundle._BlockBuilder(1)
    for key in (b"a", b"b"):
        block.add(key, handle)
    builder = tfbundle.TableBuilder()
    builder.out = bytearray(raw[: first_block_size(raw) + tfbundle.TRAILER])
    meta = builder._write_block(tfbundle._BlockBuilder(1))
    index = builder._write_block(block)
    return bytes(builder.out) + (meta + index).ljust(40, b"\0") + raw[-8:]


def _too_many_restarts(raw: bytes) -> bytes:
    size = first_block_size(raw)
    return rechecked(raw, raw[: size - 4] + struct.pack("<I", 1 << 20))


RAW_CASES = [
    ("empty", lambda raw: b"", "does not end with the table's magic number", "truncated"),
    ("cut in half", lambda raw: raw[: len(raw) // 2], "magic number", "download it again"),
    ("a Git LFS pointer", lambda raw: LFS, "magic number", "It is a Git LFS pointer"),
    ("an HTML page", lambda raw: HTML, "magic number", "It is an HTML page"),
    ("a footer varint unended", lambda raw: b"\xff" * 48 + raw[-8:], "longer than the 10", ""),
    ("a handle past the end",
     lambda raw: raw[:-48] + (b"\0\0" + tfbundle.varint(1 << 40) + b"\x10").ljust(40, b"\0")
     + raw[-8:], "a block handle points past the end of the file", ""),
    ("a block listed twice", listing_the_first_block_twice, "points to a block at byte 0", ""),
    ("a compressed block", lambda raw: rechecked(raw, raw[: first_block_size(raw)], kind=1),
     "a block compressed with method 1", ""),
    ("a bad block checksum", lambda raw: raw[:10] + bytes([raw[10] ^ 0xFF]) + raw[11:],
     "the block at byte 0 does not match its checksum", ""),
    ("too many restarts", _too_many_restarts, "restart count does not fit", ""),
]  # fmt: skip


@pytest.mark.parametrize(
    "case, transform, message, advice", RAW_CASES, ids=[c[0] for c in RAW_CASES]
)
def test_an_index_damaged_in_its_bytes_is_one_message(
    case, transform, message, advice, tmp_path, cli
):
    src = copied(tmp_path)
    (src / INDEX).write_bytes(transform((src / INDEX).read_bytes()))
    refused(convert(cli, src, tmp_path), 4, "not a TensorFlow checkpoint index", message, advice)


def test_an_index_larger_than_any_index_is_not_read_whole(tmp_path, cli):
    src = copied(tmp_path)
    with open(src / INDEX, "r+b") as f:
        f.truncate(65 << 20)  # sparse: costs no disk
    refused(convert(cli, src, tmp_path), 4, "larger than 64 MB, more than an index of tensors")


DATA_CASES = [
    ("missing", lambda p: p.unlink(), 3, f"its data file {DATA} is not there"),
    ("a dangling link", lambda p: (p.unlink(), p.symlink_to(p.parent / "gone")), 3,
     f"its data file {DATA} is not there"),
    ("empty", lambda p: p.write_bytes(b""), 4, "ends before the tensors its index names"),
    ("a Git LFS pointer", lambda p: p.write_bytes(LFS), 4, "It is a Git LFS pointer"),
    ("an HTML page", lambda p: p.write_bytes(HTML), 4, "It is an HTML page"),
    ("a FIFO", lambda p: (p.unlink(), os.mkfifo(p)), 4, "is a FIFO, not a file"),
    ("/dev/zero", lambda p: (p.unlink(), p.symlink_to("/dev/zero")), 4, "is a character device"),
    ("a directory", lambda p: (p.unlink(), p.mkdir()), 4, "is a directory, not a file"),
]  # fmt: skip


@pytest.mark.parametrize("case, spoil, code, message", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_a_data_file_that_is_not_there_or_not_data_is_one_message(
    case, spoil, code, message, tmp_path, cli
):
    src = copied(tmp_path)
    spoil(src / DATA)
    refused(convert(cli, src, tmp_path), code, message)


@pytest.mark.parametrize(
    "named", ["/etc/passwd", "../../../etc/passwd", "..", "sub/model.ckpt", "../bert_model"]
)
def test_a_checkpoint_file_naming_no_checkpoint_of_the_directory_is_refused(named, tmp_path, cli):
    """With two checkpoints in the directory, the `checkpoint` file says which: one of them,
    never a path out of the directory."""
    src = copied(tmp_path)
    for f in list(src.glob("bert_model.ckpt.*")):
        shutil.copy(f, src / f.name.replace("bert_model.ckpt", "model.ckpt-2"))
    (src / "checkpoint").write_text(f'model_checkpoint_path: "{named}"\n')
    said = f"names '{named}', which is none of the checkpoints in {src} (bert_model.ckpt, model"
    refused(convert(cli, src, tmp_path), 4, said)


@pytest.mark.parametrize("named", ["/home/someone/run/model.ckpt-2", "C:\\run\\model.ckpt-2"])
def test_a_checkpoint_file_naming_where_training_saved_it_is_followed_here(named, tmp_path, cli):
    """TensorFlow 1 wrote absolute paths, of the machine that trained: the last part names the
    checkpoint, found in the directory itself."""
    src = copied(tmp_path)
    for f in list(src.glob("bert_model.ckpt.*")):
        shutil.copy(f, src / f.name.replace("bert_model.ckpt", "model.ckpt-2"))
    (src / "checkpoint").write_text(f'model_checkpoint_path: "{named}"\n')
    code, _, err = convert(cli, src, tmp_path)
    assert code == 0, err


def test_a_checkpoint_file_that_is_a_fifo_is_not_waited_on(tmp_path, cli):
    src = copied(tmp_path)
    for f in list(src.glob("bert_model.ckpt.*")):
        shutil.copy(f, src / f.name.replace("bert_model.ckpt", "model.ckpt-2"))
    os.mkfifo(src / "checkpoint")
    refused(convert(cli, src, tmp_path), 4, "checkpoint: is a FIFO, not a file")


def test_an_index_listing_more_tensors_than_any_model_is_refused_in_bounded_memory(tmp_path, cli):
    """Zero-size tensors cost a few bytes of index each but hundreds of bytes once read: 1.5
    million of them in 24 MB took 1.7 GB and 40 s. The entries are counted as they are read."""
    builder = tfbundle.TableBuilder()
    builder.add(tfbundle.HEADER_KEY, tfbundle.HEADER_PROTO)
    empty = tfbundle.entry_proto(1, (0,), 0, 0, tfbundle.mask(0))
    for n in range(tfbundle.MAX_ENTRIES + 1):
        builder.add(b"%08d" % n, empty)
    src = copied(tmp_path)
    (src / INDEX).write_bytes(builder.finish())
    err = refused(convert(cli, src, tmp_path), 4, str(src / INDEX), "more than 100000 tensors")
    assert "download it again" not in err  # a file that keeps to the format is not damaged
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError):
            tfbundle.read_bundle(src / "bert_model.ckpt")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak  # 16 MB: the entries up to the bound, then refused


def with_second_checkpoint(tmp_path: Path) -> Path:
    src = copied(tmp_path)
    for f in list(src.glob("bert_model.ckpt.*")):
        shutil.copy(f, src / f.name.replace("bert_model.ckpt", "model.ckpt-2"))
    return src


def test_a_checkpoint_file_is_honoured_even_beside_one_checkpoint(tmp_path, cli):
    """It names model.ckpt-2, which is not there: the directory's only other checkpoint is not
    the one it names, and is not converted in its place."""
    src = copied(tmp_path)
    (src / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-2"\n')
    said = f"names 'model.ckpt-2', which is none of the checkpoints in {src} (bert_model.ckpt)"
    refused(convert(cli, src, tmp_path), 4, said, "remove the file, or the checkpoints")
    (src / "checkpoint").write_text('model_checkpoint_path: "bert_model.ckpt"\n')
    assert convert(cli, src, tmp_path)[0] == 0


SPOILED_INDEXES = [
    ("a directory", lambda p: (p.unlink(), p.mkdir()), "is a directory, not a file"),
    ("a FIFO", lambda p: (p.unlink(), os.mkfifo(p)), "is a FIFO, not a file"),
    ("a dangling link", lambda p: (p.unlink(), p.symlink_to(p.parent / "gone")), "no such file"),
]  # fmt: skip


@pytest.mark.parametrize("case, spoil, why", SPOILED_INDEXES, ids=[c[0] for c in SPOILED_INDEXES])
def test_a_named_checkpoint_whose_index_is_not_a_file_is_refused_not_replaced(
    case, spoil, why, tmp_path, cli
):
    src = with_second_checkpoint(tmp_path)
    spoil(src / "model.ckpt-2.index")
    (src / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-2"\n')
    said = "checkpoint: names 'model.ckpt-2', whose index cannot be read"
    refused(convert(cli, src, tmp_path), 4, said, f"model.ckpt-2.index: {why}")


@pytest.mark.parametrize(
    "text, said",
    [
        ('all_model_checkpoint_paths: "model.ckpt-2"\n', "gives no model_checkpoint_path"),
        ('model_checkpoint_path: "bert_model.ckpt"\nmodel_checkpoint_path: "model.ckpt-2"\n',
         "gives model_checkpoint_path twice"),
    ],
    ids=["none", "two"],
)  # fmt: skip
def test_a_checkpoint_file_naming_no_one_checkpoint_is_refused(text, said, tmp_path, cli):
    src = with_second_checkpoint(tmp_path)
    (src / "checkpoint").write_text(text)
    refused(convert(cli, src, tmp_path), 4, f"{src / 'checkpoint'}: {said}")


# tf_model.h5 ----------------------------------------------------------------------------------

H5 = "tf_model.h5"
BETA = "tf_bert_for_masked_lm/bert/embeddings/LayerNorm/beta:0"  # in the group `bert`
BIAS = "tf_bert_for_masked_lm/mlm___cls/predictions/bias:0"  # in the group `mlm___cls`


def spoiled_h5(tmp_path: Path, spoil) -> Path:
    src = copied(tmp_path, "h5_masked_lm")
    with h5py.File(src / H5, "r+") as f:
        spoil(f, tmp_path)
    return src


def elsewhere(tmp_path: Path) -> str:
    """An h5 file outside the checkpoint, holding a weight of the right shape."""
    path = tmp_path / "elsewhere.h5"
    with h5py.File(path, "w") as other:
        other["w"] = np.zeros(8, np.float32)
    return str(path)


def beta_as(make):
    """A spoiler: the embeddings' LayerNorm beta, in the group `bert`, replaced by make(...)."""

    def spoil(f, tmp_path):
        del f["bert"][BETA]
        f["bert"][BETA] = make(tmp_path)

    return spoil


def _external_storage(f, tmp_path):
    raw = tmp_path / "elsewhere.bin"
    raw.write_bytes(bytes(32))
    del f["bert"][BETA]
    f["bert"].create_dataset(BETA, (8,), np.float32, external=[(str(raw), 0, 32)])


def _virtual(f, tmp_path):
    layout = h5py.VirtualLayout((8,), np.float32)
    layout[:] = h5py.VirtualSource(elsewhere(tmp_path), "w", shape=(8,))
    del f["bert"][BETA]
    f["bert"].create_virtual_dataset(BETA, layout)


def _group(f, tmp_path):
    del f["bert"][BETA]
    f["bert"].create_group(BETA)


def _other_copy(f, tmp_path):
    del f["mlm___cls"][BETA]
    f["mlm___cls"][BETA] = np.ones(8, np.float32)


def _wrong_shape(f, tmp_path):
    for group in ("bert", "mlm___cls"):  # both copies, which must agree
        del f[group][BETA]
        f[group][BETA] = np.zeros(9, np.float32)


def _compression_bomb(f, tmp_path):
    """4 TB declared, compressed to nothing (no chunk is ever written)."""
    del f["mlm___cls"][BIAS]
    f["mlm___cls"].create_dataset(BIAS, (1 << 40,), "f4", chunks=(1 << 20,), compression="gzip")


H5_CASES = [
    ("an external link", beta_as(lambda t: h5py.ExternalLink(elsewhere(t), "w")),
     "is a link to another place (ExternalLink)"),
    ("a soft link", beta_as(lambda t: h5py.SoftLink("/bert/" + BETA.replace("beta", "gamma"))),
     "is a link to another place (SoftLink)"),
    ("external storage", _external_storage, "is stored in other files"),
    ("a virtual dataset", _virtual, "is stored in other files"),
    ("a group for a weight", _group, "is not a dataset"),
    ("a weight not there", lambda f, t: f["bert"].__delitem__(BETA), "which is not in it"),
    ("strings", beta_as(lambda t: np.array([b"abc"] * 8)), "is |S3, not a number"),
    ("a wrong shape", _wrong_shape, "bert/embeddings/LayerNorm/beta:0 is (9,), config.json"),
    ("copies that differ", _other_copy,
     "holds two different weights named 'bert/embeddings/LayerNorm/beta:0'"),
    ("a compression bomb", _compression_bomb,
     "chunked or compressed (4398046511104 bytes in chunks of 4194304"),
    ("no layer_names", lambda f, t: f.attrs.__delitem__("layer_names"), "has no layer_names"),
    ("layer_names a matrix", lambda f, t: f.attrs.__setitem__("layer_names", np.zeros((2, 2))),
     "its layer_names attribute is not a list of names"),
    ("a layer not there", lambda f, t: f.attrs.__setitem__("layer_names", [b"bert", b"nope"]),
     "lists 'nope', which is not in it"),
]  # fmt: skip


@pytest.mark.parametrize("case, spoil, message", H5_CASES, ids=[c[0] for c in H5_CASES])
def test_an_h5_file_leading_elsewhere_or_breaking_keras_layout_is_one_message(
    case, spoil, message, tmp_path, cli
):
    src = spoiled_h5(tmp_path, spoil)
    refused(convert(cli, src, tmp_path), 4, message)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "It may be truncated"),
        (LFS, "It is a Git LFS pointer"),
        (HTML, "It is an HTML page"),
    ],
    ids=["empty", "lfs", "html"],
)
def test_an_h5_file_that_is_not_hdf5_is_diagnosed(content, message, tmp_path, cli):
    src = copied(tmp_path, "h5_masked_lm")
    (src / H5).write_bytes(content)
    refused(convert(cli, src, tmp_path), 4, "not an HDF5 file", message)


def test_a_truncated_h5_file_is_one_message(tmp_path, cli):
    src = copied(tmp_path, "h5_masked_lm")
    (src / H5).write_bytes((src / H5).read_bytes()[:5000])
    refused(convert(cli, src, tmp_path), 4, "not a readable Keras h5 weights file")


def _hard_linked_layer(f, tmp_path):
    f["bert_again"] = f["bert"]  # a second name for the same group
    f.attrs["layer_names"] = [b"bert", b"bert_again", b"mlm___cls"]


def _weight_listed_again(f, tmp_path):
    names = list(f["bert"].attrs["weight_names"])
    f["bert"].attrs["weight_names"] = names * 20


REPEATED_CASES = [
    ("a layer 7000 times",
     lambda f, t: f.attrs.__setitem__("layer_names", np.array([b"bert"] * 7000)),
     "its layer_names attribute lists 'bert' more than once"),
    ("a weight again", _weight_listed_again,
     "its weight_names attribute (of /bert) lists "
     "'tf_bert_for_masked_lm/bert/embeddings/word_embeddings/weight:0' more than once"),
    ("a layer under two names", _hard_linked_layer,
     "lists the layer 'bert_again', which is another listed layer under a second name"),
]  # fmt: skip


@pytest.mark.parametrize("case, spoil, message", REPEATED_CASES, ids=[c[0] for c in REPEATED_CASES])
def test_an_h5_file_listing_a_layer_or_weight_again_is_refused_at_once(
    case, spoil, message, tmp_path, cli
):
    """Each name listed is a layer or weight read: 7,000 times one layer took 84 s. The
    work is that of what the file holds, each layer and weight once."""
    src = spoiled_h5(tmp_path, spoil)
    start = time.monotonic()
    refused(convert(cli, src, tmp_path), 4, str(src / H5), message)
    assert time.monotonic() - start < 5


def test_an_h5_file_listing_more_names_than_the_bound_is_refused(tmp_path, cli, monkeypatch):
    monkeypatch.setattr(h5weights, "MAX_NAMES", 40)  # the fixture lists 2 + 37 + 10
    src = copied(tmp_path, "h5_masked_lm")
    refused(convert(cli, src, tmp_path), 4, "lists more than 40 layers and weights")


def compressed_bias(make_chunk, size: int = 8, chunk: int = 8):
    """A spoiler: the MLM bias stored gzip-compressed, `size` floats in chunks of `chunk`, its
    first chunk's stored bytes made by make_chunk()."""

    def spoil(f, tmp_path):
        del f["mlm___cls"][BIAS]
        dataset = f["mlm___cls"].create_dataset(
            BIAS, (size,), "f4", maxshape=(None,), chunks=(chunk,), compression="gzip"
        )
        dataset.id.write_direct_chunk((0,), make_chunk())

    return spoil


def deflated_zeros(n: int) -> bytes:
    """n zero bytes, deflated (zlib's format, as HDF5's gzip filter stores a chunk): ~n/1000."""
    z, step = zlib.compressobj(9), bytes(1 << 20)
    return b"".join(z.compress(step[: min(len(step), n - at)]) for at in range(0, n, len(step)))


INFLATION_CASES = [
    # 8 floats in one chunk of 2**26 (256 MB), which HDF5 would inflate whole to read them.
    ("one vast chunk", compressed_bias(lambda: deflated_zeros(1 << 28) , chunk=1 << 26),
     "(32 bytes in chunks of 268435456: 268435456 bytes to inflate)"),
    # A chunk of 32 bytes whose data inflates to 256 MB.
    ("a chunk inflating past its size", compressed_bias(lambda: deflated_zeros(1 << 28)),
     "a chunk of it inflates past the 32 bytes a chunk holds"),
    ("a chunk not gzip", compressed_bias(lambda: b"not deflated at all"),
     "a chunk of it is not gzip data"),
]  # fmt: skip


@pytest.mark.parametrize(
    "case, spoil, message", INFLATION_CASES, ids=[c[0] for c in INFLATION_CASES]
)
def test_a_compressed_weight_is_counted_as_hdf5_inflates_it(case, spoil, message, tmp_path, cli):
    """What reading a chunked weight costs is the chunks HDF5 inflates, whole: counted, and
    each chunk's data inflated here to at most its size, before HDF5 reads it."""
    src = spoiled_h5(tmp_path, spoil)
    refused(convert(cli, src, tmp_path), 4, f"weight '/mlm___cls/{BIAS}'", message)


def test_a_weight_compressed_with_another_filter_is_refused(tmp_path, cli):
    def spoil(f, tmp_path):
        bias = f["mlm___cls"][BIAS][()]
        del f["mlm___cls"][BIAS]
        f["mlm___cls"].create_dataset(BIAS, data=bias, compression="lzf")

    src = spoiled_h5(tmp_path, spoil)
    refused(convert(cli, src, tmp_path), 4, "is stored with the HDF5 filter 'lzf'")


@pytest.mark.parametrize(
    "options",
    [{"compression": "gzip", "shuffle": True}, {"compression": "gzip"}, {"shuffle": True}, {}],
    ids=["gzip and shuffle", "gzip", "shuffle", "plain"],
)
def test_a_weight_stored_in_chunks_reads_exactly(options, tmp_path):
    def spoil(f, tmp_path):
        bias = f["mlm___cls"][BIAS][()]
        del f["mlm___cls"][BIAS]
        f["mlm___cls"].create_dataset(BIAS, data=bias, chunks=(7,), **options)

    src = spoiled_h5(tmp_path, spoil)
    got = h5weights.read_h5(src / H5)["mlm___cls/predictions/bias:0"]
    with h5py.File(FIXTURES / "h5_masked_lm" / H5, "r") as f:
        expected = f["mlm___cls"][BIAS][()]
    assert isinstance(got, storage.InMemory) and got.data == expected.tobytes()


# Writing a TensorFlow checkpoint --------------------------------------------------------------


def _other_checkpoint(out: Path) -> None:
    for f in (FIXTURES / "bert_tiny").glob("bert_model.ckpt.*"):
        shutil.copy(f, out / f.name.replace("bert_model.ckpt", "model.ckpt-2"))


IN_THE_WAY = [
    ("another checkpoint", _other_checkpoint, "model.ckpt-2.index"),
    ("a checkpoint file", lambda out: (out / "checkpoint").write_text("x"), "checkpoint"),
    ("other weights", lambda out: (out / "pytorch_model.bin").write_bytes(b""),
     "pytorch_model.bin"),
]  # fmt: skip


@pytest.mark.parametrize("case, plant, named", IN_THE_WAY, ids=[c[0] for c in IN_THE_WAY])
def test_a_tensorflow_checkpoint_is_never_written_where_another_would_be_read(
    case, plant, named, checkpoints, tmp_path, cli
):
    """A written checkpoint reads back as what was written: into a directory holding what
    would be read before it or in its place, nothing is written."""
    out = tmp_path / "out"
    out.mkdir()
    plant(out)
    before = snapshot(out)
    result = cli("convert", checkpoints["base"], "--to", "google-tf", "--out", out)
    refused(result, 2, f"{out}: holds {named}", "choose another --out, or remove them")
    assert snapshot(out) == before


def test_a_stale_config_json_goes_with_the_checkpoint_it_came_with(checkpoints, tmp_path, cli):
    """config.json would be read before bert_config.json: as a file of an earlier conversion
    that this one does not write, it is removed when the bundle is committed. The user's own
    config.json is not bertconv's to remove: refused, by name."""
    out = tmp_path / "out"
    assert cli("convert", checkpoints["pretraining"], "--out", out)[0] == 0
    code, _, err = cli("convert", checkpoints["base"], "--to", "google-tf", "--out", out)
    assert code == 0, err
    assert not (out / "config.json").exists() and (out / "bert_config.json").is_file()
    assert cli("verify", out, "--device", "cpu")[0] == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("{}")
    result = cli("convert", checkpoints["base"], "--to", "google-tf", "--out", mine)
    refused(result, 7, f"{mine}: holds files", "config.json (not bertconv's)")
    assert os.listdir(mine) == ["config.json"] and (mine / "config.json").read_text() == "{}"


def test_a_tensorflow_checkpoint_replaces_the_one_bertconv_wrote_there(checkpoints, tmp_path, cli):
    out = tmp_path / "out"
    for source in ("pretraining", "base"):
        code, _, err = cli("convert", checkpoints[source], "--to", "google-tf", "--out", out)
        assert code == 0, err
    config = json.loads((out / "bert_config.json").read_text())
    assert config["architectures"] == ["BertModel"]
    back = tfbundle.read_bundle(out / "bert_model.ckpt")
    assert not any(name.startswith("cls/") for name in back)


# Another process cuts the source short once bertconv has written its first bytes.
CUT_WHILE_WRITING = """
import contextlib, os, sys, types
from bertconv import checkpoint
from bertconv.cli import main

source, keep = sys.argv[1], int(sys.argv[2])
shown = checkpoint._progress

def progress(total, what):
    if what != "writing":
        return shown(total, what)
    cut = lambda n: os.path.getsize(source) > keep and os.truncate(source, keep)
    return contextlib.nullcontext(types.SimpleNamespace(update=cut))

checkpoint._progress = progress
sys.argv = ["bertconv", *sys.argv[3:]]
main()
"""


@pytest.mark.parametrize("to", ["google-tf", "bertconv"])
def test_a_source_cut_short_while_it_is_transposed_is_named_and_nothing_written(
    to, checkpoints, tmp_path
):
    """A transposed tensor was read from the source's pages mapped: cut short meanwhile, the
    process died of SIGBUS with four staged files left. Now: exit 4, the bytes missing said,
    OUT as it was."""
    import subprocess
    import sys

    src = shutil.copytree(checkpoints["base"] if to == "google-tf" else FIXTURES / "bert_tiny",
                          tmp_path / "src")  # fmt: skip
    weights = hostile(src / ("model.safetensors" if to == "google-tf" else DATA))
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.txt").write_text("as it was")
    before = snapshot(out)
    keep = weights.stat().st_size // 2
    done = subprocess.run(
        [sys.executable, "-c", CUT_WHILE_WRITING, str(weights), str(keep),
         "convert", str(src), "--to", to, "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 4, (done.returncode, done.stderr)
    assert f"{weights}: the source ended " in done.stderr and "bytes early" in done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(out) == before and sorted(os.listdir(out)) == ["kept.txt"]


def test_a_data_file_linking_out_of_the_checkpoint_is_refused(tmp_path, cli):
    """The data file is a link to a valid copy elsewhere: a stranger's checkpoint could read a
    private file through it. Refused by name; a link within the directory is followed."""
    src = shutil.copytree(FIXTURES / "bert_tiny", tmp_path / "src")
    elsewhere = tmp_path / "private" / DATA
    elsewhere.parent.mkdir()
    (src / DATA).rename(elsewhere)
    (src / DATA).symlink_to(elsewhere)
    result = cli("convert", src, "--out", tmp_path / "out")
    refused(result, 4, f"{src / DATA}: is a link to {elsewhere}, outside the checkpoint's")
    assert not (tmp_path / "out").exists()
    (src / DATA).unlink()
    shutil.move(elsewhere, src / "data.bytes")
    (src / DATA).symlink_to("data.bytes")
    assert cli("convert", src, "--out", tmp_path / "out")[0] == 0


def test_a_checkpoint_file_linking_out_of_the_checkpoint_is_refused_unread(tmp_path, cli):
    src = shutil.copytree(FIXTURES / "bert_tiny", tmp_path / "src")
    secret = tmp_path / "private.txt"
    secret.write_text('model_checkpoint_path: "hunter2-is-my-password"\n')
    (src / "checkpoint").symlink_to(secret)
    result = cli("convert", src, "--out", tmp_path / "out")
    err = refused(result, 4, f"{src / 'checkpoint'}: is a link to {secret}, outside")
    assert "hunter2" not in err


# Another process rewrites the source in place, or puts another file in its place, once bertconv
# has written its first bytes (after a tick, so that the file's time moves on).
CHANGED_WHILE_WRITING = """
import contextlib, os, shutil, sys, time, types
from bertconv import checkpoint
from bertconv.cli import main

source, how = sys.argv[1], sys.argv[2]
shown = checkpoint._progress
done = []

def change(n):
    if done:
        return
    done.append(n)
    time.sleep(0.02)
    if how == "rewritten":
        with open(source, "r+b") as f:
            f.seek(os.path.getsize(source) // 2)
            f.write(b"\\x00" * 64)
    else:
        shutil.copy(source, source + ".new")
        os.replace(source + ".new", source)

def progress(total, what):
    if what != "writing":
        return shown(total, what)
    return contextlib.nullcontext(types.SimpleNamespace(update=change))

checkpoint._progress = progress
sys.argv = ["bertconv", *sys.argv[3:]]
main()
"""


@pytest.mark.parametrize("how", ["rewritten", "replaced"])
@pytest.mark.parametrize("to", ["google-tf", "bertconv"])
def test_a_source_changed_while_it_is_converted_is_named_and_nothing_written(
    how, to, checkpoints, tmp_path
):
    """Its bytes may be read partly before and partly after: two versions in one output."""
    import subprocess
    import sys

    src = shutil.copytree(checkpoints["base"], tmp_path / "src")
    weights = hostile(src / "model.safetensors")
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.txt").write_text("as it was")
    done = subprocess.run(
        [sys.executable, "-c", CHANGED_WHILE_WRITING, str(weights), how,
         "convert", str(src), "--to", to, "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 4, (done.returncode, done.stderr)
    assert f"{weights}: changed while it was being converted" in done.stderr, done.stderr
    assert sorted(os.listdir(out)) == ["kept.txt"]
