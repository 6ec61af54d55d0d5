"""transformers' TensorFlow weights (tf_model.h5, as TFBertModel.save_pretrained writes it), read
with h5py: `pip install 'bertconv[h5]'`.

The file is Keras's h5 format: a group per layer, whose `weight_names` attribute lists its
weights (`tf_bert_model/bert/encoder/layer_._0/attention/self/query/kernel:0`), each a dataset
under that name. bertconv names a weight by that name less its first part (the model's own
scope, which differs by class), so that one table (transformers-tf) reads every class.
Contiguous datasets are handed on as references to their bytes in the file, like a safetensors
file's tensors: a conversion copies them without reading them whole. A weight two layers share
is stored under each; the copies must agree.
"""

from pathlib import Path

from . import files, storage
from .errors import CheckpointError, MissingDependencyError

DTYPES = {"float32": "F32", "float16": "F16", "float64": "F64", "int32": "I32", "int64": "I64"}


def read_h5(path: Path) -> dict[str, storage.Tensor]:
    try:
        import h5py
    except ImportError:
        raise MissingDependencyError(
            f"{path}: reading tf_model.h5 needs h5py: pip install 'bertconv[h5]'"
        ) from None
    with files.open_regular(path):  # a regular file, before h5py opens it
        pass
    try:
        with h5py.File(path, "r") as f:
            return _weights(path, f)
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: not a readable Keras h5 weights file ({e})") from None


def _weights(path: Path, f) -> dict[str, storage.Tensor]:
    layers = [_text(n) for n in f.attrs.get("layer_names", [])]
    if not layers:
        raise CheckpointError(f"{path}: has no layer_names: not a Keras h5 weights file")
    out = {}
    for layer in layers:
        for weight in (_text(n) for n in f[layer].attrs.get("weight_names", [])):
            name = weight.split("/", 1)[1] if "/" in weight else weight
            tensor = _tensor(path, f[layer][weight], name)
            # A weight two layers share (the word embeddings an MLM head ties to) is stored
            # under each: the copies must agree.
            if name in out and not storage.equal(out[name], tensor):
                raise CheckpointError(f"{path}: holds two different weights named {name!r}")
            out[name] = tensor
    return out


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _tensor(path: Path, dataset, name: str) -> storage.Tensor:
    dtype = DTYPES.get(str(dataset.dtype.newbyteorder("<")))
    if dtype is None or dataset.dtype.byteorder == ">":
        raise CheckpointError(
            f"{path}: weight {name!r} is {dataset.dtype}, not a number bertconv reads"
        )
    shape = tuple(int(d) for d in dataset.shape)
    offset = dataset.id.get_offset()
    if offset is not None and dataset.compression is None and dataset.chunks is None:
        size = dataset.id.get_storage_size()
        return storage.Stored(path, dtype, shape, offset, offset + size)
    return storage.InMemory(dtype, shape, dataset[()].tobytes())  # chunked or compressed
