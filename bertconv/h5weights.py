"""transformers' TensorFlow weights (tf_model.h5, as TFBertModel.save_pretrained writes it), read
with h5py: `pip install 'bertconv[h5]'`.

The file is Keras's h5 format: a group per layer, whose `weight_names` attribute lists its
weights (`tf_bert_model/bert/encoder/layer_._0/attention/self/query/kernel:0`), each a dataset
under that name. bertconv names a weight by that name less its first part (the model's own
scope, which differs by class), so that one table (transformers-tf) reads every class.
Contiguous datasets (what Keras writes) are handed on as references to their bytes in the file,
like a safetensors file's tensors: a conversion copies them without reading them whole. A weight
two layers share is stored under each; the copies must agree.

HDF5 can make a name lead out of the file (external links, external or virtual datasets): such
a file is refused, so that only the file itself is ever read. Datasets stored otherwise than
contiguous (chunked, compressed, compact) are read into memory, IN_MEMORY bytes in all at most,
counted as HDF5 spends them: whole chunks, each compressed one first inflated here, to at most
its size. Each layer and weight is listed once, so that the work is that of what the file holds.
"""

import itertools
import math
import os
import zlib
from pathlib import Path

from . import files, storage
from .errors import CheckpointError, MissingDependencyError

DTYPES = {"float32": "F32", "float16": "F16", "float64": "F64", "int32": "I32", "int64": "I64"}
SIGNATURE = b"\x89HDF\r\n\x1a\n"  # where h5py writes it: at the start of the file
IN_MEMORY = 64 << 20  # bytes: datasets Keras would not write (chunked, compressed), read whole
MAX_NAMES = 100_000  # names in the layer_names and weight_names attributes (bert-large: ~400)
CHUNK_COST = 4096  # bytes: what reading a chunk counts for at least (each is a Python step)
INFLATE_STEP = 4 << 20  # bytes: a chunk is inflated this much at a time, to count its size
DEFLATE, SHUFFLE = 1, 2  # HDF5's filter ids for what h5py's compression="gzip", shuffle=True do


def read_h5(path: Path) -> dict[str, storage.Tensor]:
    try:
        import h5py
    except ImportError:
        raise MissingDependencyError(
            f"{path}: reading tf_model.h5 needs h5py: pip install 'bertconv[h5]'"
        ) from None
    with files.open_regular(path) as f:  # a regular file, before h5py opens it
        size = os.fstat(f.fileno()).st_size
        if f.read(len(SIGNATURE)) != SIGNATURE:
            raise CheckpointError(
                f"{path}: not an HDF5 file (it does not start with HDF5's signature). "
                + files.diagnose(path)
            )
    try:
        with h5py.File(path, "r") as f:
            return _Reader(path, size, h5py).weights(f)
    except (OSError, KeyError, ValueError, TypeError, RuntimeError) as e:
        raise CheckpointError(f"{path}: not a readable Keras h5 weights file ({e})") from None


class _Reader:
    """The weights of one file, with what reading them may still cost."""

    def __init__(self, path: Path, size: int, h5py):
        self.path, self.size, self.h5py = path, size, h5py
        self.in_memory = IN_MEMORY  # bytes left for datasets read whole
        self.compared = 2 * size  # bytes left for comparing copies of a shared weight
        self.names = MAX_NAMES  # names left to read from attributes

    def weights(self, f) -> dict[str, storage.Tensor]:
        layers = self._names(f, "layer_names")
        if not layers:
            raise CheckpointError(f"{self.path}: has no layer_names: not a Keras h5 weights file")
        out, groups = {}, set()
        for layer in layers:
            group = self._object(f, layer, self.h5py.Group)
            if group.id in groups:  # two names, hard links to one group: its weights read twice
                raise CheckpointError(
                    f"{self.path}: lists the layer {layer!r}, which is another listed layer "
                    "under a second name; Keras stores each layer once: the file was not "
                    "written by Keras"
                )
            groups.add(group.id)
            for weight in self._names(group, "weight_names"):
                name = weight.split("/", 1)[1] if "/" in weight else weight
                self._add(out, name, self._tensor(self._object(group, weight, self.h5py.Dataset)))
        return out

    def _names(self, node, key: str) -> list[str]:
        """The names an attribute lists, each once (Keras lists each layer and weight once; a
        name repeated would be read again for each time it is listed)."""
        shape = node.attrs.get_id(key).shape if key in node.attrs else None
        if shape is None:  # absent, or an empty attribute
            return []
        where = f"{self.path}: its {key} attribute"
        if node.name != "/":
            where += f" (of {node.name})"
        if len(shape) > 1:
            raise CheckpointError(f"{where} is not a list of names")
        self.names -= shape[0] if shape else 1
        if self.names < 0:
            raise CheckpointError(
                f"{self.path}: lists more than {MAX_NAMES} layers and weights, where a BERT's "
                "file lists ~400; bertconv reads no more"
            )
        names = [_text(n) for n in (node.attrs[key] if shape else [node.attrs[key]])]
        seen = set()
        for name in names:
            if name in seen:
                raise CheckpointError(
                    f"{where} lists {name!r} more than once; Keras lists each once: the file "
                    "was not written by Keras"
                )
            seen.add(name)
        return names

    def _object(self, group, name: str, kind):
        """The object at `name` under `group`, reached through hard links only (an external
        link would open another file; Keras writes none), and of the kind expected."""
        node = group
        for part in name.split("/"):
            link = node.get(part, getlink=True) if part else None
            if link is None:
                raise CheckpointError(f"{self.path}: lists {name!r}, which is not in it")
            if not isinstance(link, self.h5py.HardLink):
                raise CheckpointError(
                    f"{self.path}: {name!r} is a link to another place ({type(link).__name__}); "
                    "bertconv reads the weights in the file only"
                )
            node = node[part]
        if not isinstance(node, kind):
            raise CheckpointError(f"{self.path}: {name!r} is not a {kind.__name__.lower()}")
        return node

    def _tensor(self, dataset) -> storage.Tensor:
        where = f"{self.path}: weight {dataset.name!r}"
        dtype = DTYPES.get(str(dataset.dtype.newbyteorder("<")))
        if dtype is None or dataset.dtype.byteorder == ">":
            raise CheckpointError(f"{where} is {dataset.dtype}, not a number bertconv reads")
        if dataset.shape is None:
            raise CheckpointError(f"{where} holds no data")
        if dataset.external or dataset.is_virtual:
            raise CheckpointError(f"{where} is stored in other files; bertconv reads this one only")
        shape = tuple(int(d) for d in dataset.shape)
        size = storage.nbytes(storage.InMemory(dtype, shape, b""))
        offset = dataset.id.get_offset()
        contiguous = dataset.chunks is None and dataset.compression is None
        if offset is not None and contiguous:
            if dataset.id.get_storage_size() != size or offset + size > self.size:
                raise CheckpointError(f"{where}: its bytes do not lie within the file")
            return storage.Stored(self.path, dtype, shape, offset, offset + size)
        self._charge(dataset, where, size)
        return storage.InMemory(dtype, shape, dataset[()].tobytes() if size else b"")

    def _charge(self, dataset, where: str, size: int) -> None:
        """Count reading `dataset` whole against IN_MEMORY, before it is read: its size, or for
        a chunked one the chunks it touches, each whole (HDF5 inflates a chunk whole, however
        little of it the dataset uses)."""
        if dataset.chunks is None:
            self._spend(size, where, f"{size} bytes")
            return
        chunk = dataset.dtype.itemsize * math.prod(dataset.chunks)
        touched = math.prod(-(-d // c) for d, c in zip(dataset.shape, dataset.chunks, strict=True))
        cost = touched * max(chunk, CHUNK_COST)
        self._spend(cost, where, f"{size} bytes in chunks of {chunk}: {cost} bytes to inflate")
        if _filters(dataset):
            self._check_chunks(dataset, where, chunk)

    def _spend(self, cost: int, where: str, what: str) -> None:
        self.in_memory -= cost
        if self.in_memory < 0:
            raise CheckpointError(
                f"{where} is stored chunked or compressed ({what}), as Keras does not write "
                f"weights; bertconv reads at most {IN_MEMORY >> 20} MB of such"
            )

    def _check_chunks(self, dataset, where: str, chunk: int) -> None:
        """Each chunk the dataset touches inflates to at most `chunk` bytes. HDF5's gzip filter
        inflates a chunk to whatever its data gives (a 1 MB chunk: 1 GB), before it checks the
        size."""
        filters = _filters(dataset)
        other = [name for code, name in filters if code not in (DEFLATE, SHUFFLE)]
        if other:
            raise CheckpointError(
                f"{where} is stored with the HDF5 filter {other[0]!r}; bertconv reads weights "
                "stored plain, or compressed with gzip (and shuffled)"
            )
        # The filter's bit in a chunk's mask is set where the chunk was stored without it.
        deflate = next((1 << i for i, (code, _) in enumerate(filters) if code == DEFLATE), 0)
        steps = (range(0, d, c) for d, c in zip(dataset.shape, dataset.chunks, strict=True))
        for at in itertools.product(*steps):
            info = dataset.id.get_chunk_info_by_coord(at)
            if info.byte_offset is None:  # never written: HDF5 gives the fill value
                continue
            if info.byte_offset + info.size > self.size:
                raise CheckpointError(f"{where}: a chunk of it lies past the end of the file")
            mask, raw = dataset.id.read_direct_chunk(at)
            inflated = _inflated(raw, chunk, where) if deflate & ~mask else len(raw)
            if inflated > chunk:
                raise CheckpointError(
                    f"{where}: a chunk of it inflates past the {chunk} bytes a chunk holds; "
                    "the file is damaged, or made to exhaust memory"
                )

    def _add(self, out: dict, name: str, tensor: storage.Tensor) -> None:
        """A weight two layers share (the word embeddings an MLM head ties to) is stored under
        each: the copies must agree. Comparing them costs at most twice the file's size."""
        if name in out and out[name] != tensor:
            self.compared -= storage.nbytes(tensor)
            if self.compared < 0:
                raise CheckpointError(f"{self.path}: lists the same weights over and over")
            if not storage.equal(out[name], tensor):
                raise CheckpointError(f"{self.path}: holds two different weights named {name!r}")
        out[name] = tensor


def _filters(dataset) -> list[tuple[int, str]]:
    """(id, name) of each filter a dataset's chunks go through when written."""
    plist = dataset.id.get_create_plist()
    filters = map(plist.get_filter, range(plist.get_nfilters()))
    return [(code, _text(name)) for code, _, _, name in filters]


def _inflated(raw: bytes, limit: int, where: str) -> int:
    """The size gzip (zlib) data inflates to, counted a step at a time: more than `limit` once
    it passes it."""
    z, size, data = zlib.decompressobj(), 0, raw
    try:
        while size <= limit:
            out = z.decompress(data, INFLATE_STEP)
            size, data = size + len(out), z.unconsumed_tail
            if z.eof or not (out or data):
                return size
    except zlib.error as e:
        raise CheckpointError(f"{where}: a chunk of it is not gzip data ({e})") from None
    return size


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
