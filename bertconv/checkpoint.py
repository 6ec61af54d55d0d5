"""Checkpoint directories: which files hold the weights, config and tokenizer; reading them,
and writing converted ones whole or not at all. The bytes of the tensors are storage.py's.

A checkpoint directory holds config.json and the weights, in the first of these forms found:
model.safetensors, model.safetensors.index.json (shards), pytorch_model.bin,
pytorch_model.bin.index.json (shards). `.bin` files are pickles, vetted by pickles.py. Files in
a layout that bertconv recognises but never converts (BERT-pytorch's) may come without a
config.json.
"""

import os
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

from . import files, pickles, storage
from .config import BertConfig
from .errors import BertconvError, CheckpointError, NotFoundError
from .mapping import OFFICIAL, layout_for_format, layout_names, read_off, recognised_only

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "tf_model.h5",
)
CONFIG_FILES = ("config.json", "bert_config.json")  # transformers', google-research/bert's
# What a conversion into a TensorFlow layout writes, as google-research/bert's releases ship it.
TF_PREFIX, TF_CONFIG = "bert_model.ckpt", "bert_config.json"
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
# Keys of the safetensors metadata that bertconv writes.
LAYOUT_KEY, SOURCE_KEY, REVISION_KEY = "bertconv.layout", "bertconv.source", "bertconv.revision"
HEADS_KEY = "bertconv.heads"  # the groups asked for
RECORD_LIMIT = 1 << 16  # bytes of a `checkpoint` file (TensorFlow's lists a few paths)
BIG = 256 << 20  # bytes: writing this much or more gets a progress bar


@dataclass
class Checkpoint:
    path: Path
    config: BertConfig
    config_dict: dict
    state_dict: dict  # name -> storage.Tensor (a reference to its bytes), as the files hold them
    layout: str  # bertconv's metadata says which; official otherwise
    metadata: dict[str, str]
    files: list[Path]  # every file read: config.json and the weights


def weight_files(directory: Path) -> tuple[Path | None, list[Path]]:
    """The weight files of a checkpoint directory, safetensors first: the shard index if the
    weights are sharded, and the files that hold the tensors (a TensorFlow checkpoint: its
    .index file)."""
    if not directory.is_dir():
        raise NotFoundError(f"{directory}: no such directory")
    for name in WEIGHT_FILES[:4]:
        path = directory / name
        if files.is_present(path):
            return (path, _shards(path)) if name.endswith(".index.json") else (None, [path])
    bundle = tf_checkpoint(directory)
    if bundle is not None:
        return None, [bundle]
    if files.is_present(directory / WEIGHT_FILES[4]):
        return None, [directory / WEIGHT_FILES[4]]
    raise NotFoundError(
        f"{directory}: no weights found; a checkpoint directory holds one of "
        + ", ".join(WEIGHT_FILES[:4])
        + ", a TensorFlow checkpoint (PREFIX.index and its data files), or tf_model.h5"
    )


def _named_weights(path: Path) -> tuple[Path | None, list[Path]]:
    """The weights of a file named as the source: a shard index with its shards, or the file."""
    return (path, _shards(path)) if path.name.endswith(".index.json") else (None, [path])


def tf_checkpoint(directory: Path) -> Path | None:
    """The .index file of the directory's TensorFlow checkpoint: the one its `checkpoint` file
    names, where it has one; else the only one."""
    if files.is_present(directory / "checkpoint"):
        return _named_checkpoint(directory)
    indexes = _indexes(directory)
    if len(indexes) > 1:
        raise CheckpointError(
            f"{directory}: holds {len(indexes)} TensorFlow checkpoints "
            f"({', '.join(p.stem for p in indexes)}) and no `checkpoint` file saying which is "
            "the model's; keep one"
        )
    return indexes[0] if indexes else None


def _indexes(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.index") if p.is_file())


def _named_checkpoint(directory: Path) -> Path:
    """The checkpoint that the directory's `checkpoint` file names, or none: never another one
    of the directory's, which TensorFlow would not read. TensorFlow 1 wrote where it saved it,
    often an absolute path on the machine that trained it: its last part is looked for in the
    directory, and never opened as a path."""
    record = directory / "checkpoint"
    named = _model_checkpoint_path(record)
    last = PurePosixPath(named.replace("\\", "/")).name
    index = directory / f"{last}.index"
    if last in ("", ".", "..") or not files.is_present(index):
        held = ", ".join(p.stem for p in _indexes(directory)) or "it holds none"
        raise CheckpointError(
            f"{record}: names {named!r}, which is none of the checkpoints in {directory} "
            f"({held}); remove the file, or the checkpoints that are not the model's"
        )
    try:
        files.open_regular(index).close()
    except BertconvError as e:  # a dangling link, a directory, a FIFO, unreadable
        raise CheckpointError(
            f"{record}: names {named!r}, whose index cannot be read: {e}"
        ) from None
    return index


def _model_checkpoint_path(record: Path) -> str:
    """What a `checkpoint` file (a text protobuf, CheckpointState) gives as the model's."""
    with files.open_regular(record) as f:
        data = f.read(RECORD_LIMIT + 1)
    if len(data) > RECORD_LIMIT:
        raise CheckpointError(f"{record}: larger than 64 KB, more than a `checkpoint` file")
    text = data.decode("utf-8", "replace")
    named = []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model_checkpoint_path":
            named.append(value.strip().strip('"'))
    if len(named) != 1:
        # TensorFlow reads the last of several; a file that says two things is refused.
        said = "no model_checkpoint_path" if not named else "model_checkpoint_path twice"
        raise CheckpointError(
            f"{record}: gives {said}, so which checkpoint is the model's is unknown; remove "
            "the file and keep one checkpoint"
        )
    return named[0]


def in_the_way_of_tf(directory: Path) -> list[str]:
    """The files of `directory` that a TensorFlow checkpoint written into it (TF_PREFIX, with
    TF_CONFIG) would not read back past: other weights, a `checkpoint` file or another
    checkpoint's index (which would say, or leave open, which checkpoint is the model's), and
    config.json (read before TF_CONFIG)."""
    others = {*WEIGHT_FILES, "checkpoint", CONFIG_FILES[0]}
    return sorted(
        name
        for name in os.listdir(directory)
        if name in others or (name.endswith(".index") and name != f"{TF_PREFIX}.index")
    )


def _shards(index: Path) -> list[Path]:
    """The shard files an index names: plain file names beside it, each there."""
    weight_map = _weight_map(index)
    names = sorted({files.plain_name(name, str(index)) for name in weight_map.values()})
    shards = [index.parent / name for name in names]
    missing = [str(s) for s in shards if not files.is_present(s)]
    if missing:
        raise NotFoundError(f"{index}: lists shards that are not there: {', '.join(missing)}")
    return shards


def _weight_map(index: Path) -> dict[str, str]:
    weight_map = files.read_json_object(index).get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(v, str) for v in weight_map.values())
    ):
        raise CheckpointError(
            f"{index}: not a shard index: its weight_map is not an object of tensor names to "
            "file names; download it again"
        )
    return weight_map


def read_tensors(paths: list[Path], index: Path | None = None) -> tuple[dict, dict[str, str]]:
    """All tensors of the files, and the first file's safetensors metadata. Shards must agree
    with their index: each tensor in the shard the index names, and no other tensor."""
    state_dict, metadata, where = {}, {}, {}
    for path in paths:
        tensors, meta = _read_weights(path)
        _check_names(path, tensors)
        clash = state_dict.keys() & tensors.keys()
        if clash:
            raise CheckpointError(f"{path}: repeats tensors of another shard: {sorted(clash)[:5]}")
        state_dict.update(tensors)
        where.update(dict.fromkeys(tensors, path.name))
        metadata = metadata or meta
    if index is not None:
        listed = _weight_map(index)
        wrong = sorted(n for n in where.keys() | listed.keys() if where.get(n) != listed.get(n))
        if wrong:
            raise CheckpointError(
                f"{index}: does not match its shards: {len(wrong)} tensors are not where it "
                f"says ({', '.join(wrong[:5])}). Download the checkpoint again."
            )
    return state_dict, metadata


def _check_names(path: Path, tensors: dict) -> None:
    """A tensor's name is printed in messages, tables and reports: one that would drive the
    terminal (an escape sequence, a line break forging a line of verify's report) is refused,
    shown escaped."""
    odd = [name for name in tensors if not name.isprintable()]
    if odd:
        shown = ", ".join(ascii(name) for name in odd[:5])
        raise CheckpointError(
            f"{path}: names tensors with characters that are not printable ({shown}); no "
            "checkpoint's tensors are named so"
        )


def _read_weights(path: Path) -> tuple[dict, dict[str, str]]:
    """The tensors of one weight file, and its safetensors metadata (other formats have none)."""
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    if path.suffix == ".index":
        from . import tfbundle

        prefix = path.with_suffix("")
        data = [p for p in path.parent.glob(f"{prefix.name}.data-*") if p.is_file()]
        size = sum(p.stat().st_size for p in data)  # for the bar; a broken one is the reader's
        with _progress(size, "checking") as bar:
            return tfbundle.read_bundle(prefix, bar.update), {}
    if path.suffix == ".h5":
        from .h5weights import read_h5

        return read_h5(path), {}
    return pickles.read_bin(path), {}


def _progress(total: int, what: str):
    """A progress bar on stderr for work large enough to wait for, where stderr is a terminal."""
    import sys

    if total < BIG or not sys.stderr.isatty():
        return nullcontext(SimpleNamespace(update=lambda n: None))
    from tqdm import tqdm

    return tqdm(total=total, desc=what, unit="B", unit_scale=True)


def _read_safetensors(path: Path) -> tuple[dict, dict[str, str]]:
    try:
        return storage.read_header(path)
    except storage.NotSafetensors as e:
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({e}). {files.diagnose(path)}"
        ) from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None


def read_checkpoint(
    directory: Path, layout: str | None = None, named: Path | None = None
) -> Checkpoint:
    """config.json (or bert_config.json) and every tensor of a checkpoint directory; of the
    weights file `named` in it, where one is (a safetensors file, a TensorFlow index or h5
    file by their suffixes, else a pickle)."""
    directory = Path(directory)
    index, weights = _named_weights(named) if named else weight_files(directory)
    if not named:  # what the user names is theirs; what a directory holds may be a stranger's
        for path in [*([index] if index else []), *weights]:
            files.confined(path)
    config_path = next(
        (directory / n for n in CONFIG_FILES if files.is_present(directory / n)),
        directory / CONFIG_FILES[0],
    )
    if not files.is_present(config_path):
        return _unconfigured(directory, config_path, index, weights)
    config_dict = files.read_json_object(files.confined(config_path))  # it is written out again
    config = BertConfig.from_dict(config_dict, source=str(config_path))
    state_dict, metadata = read_tensors(weights, index)
    kind = {".index": "tensorflow", ".h5": "h5"}.get(weights[0].suffix)
    layout = layout or (layout_for_format(kind) if kind else _recorded_layout(weights[0], metadata))
    read = [config_path, *([index] if index else []), *weights]
    if kind == "tensorflow":
        read += sorted(weights[0].parent.glob(f"{weights[0].stem}.data-*"))
    return Checkpoint(directory, config, config_dict, state_dict, layout, metadata, read)


def _unconfigured(
    directory: Path, config_path: Path, index: Path | None, weights: list[Path]
) -> Checkpoint:
    """A directory without config.json, read where its tensors' names are those of a layout
    bertconv recognises but never converts (BERT-pytorch writes no config.json). The sizes their
    shapes show stand in for one: enough to describe the file, which is never converted."""
    state_dict, metadata = read_tensors(weights, index)
    shapes = _shapes(state_dict)
    found = recognised_only(shapes)
    if found is None:
        raise NotFoundError(f"{config_path}: no config.json; a checkpoint directory needs one")
    sizes = read_off(found, shapes)[1]
    # No tensor's shape shows the number of heads: one stands in (it divides any hidden size).
    source = f"{directory} (its sizes, read off its tensors' shapes)"
    config = BertConfig.from_dict(sizes | {"num_attention_heads": 1}, source)
    read = [*([index] if index else []), *weights]
    return Checkpoint(directory, config, {}, state_dict, found, metadata, read)


def _shapes(state_dict: dict) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in state_dict.items()}


def _recorded_layout(path: Path, metadata: dict[str, str]) -> str:
    """The layout bertconv recorded in a file it wrote. It is a name, never a path: only the
    layouts bertconv ships are taken from a file."""
    recorded = metadata.get(LAYOUT_KEY, OFFICIAL)
    if recorded not in layout_names():
        raise CheckpointError(
            f"{path}: its metadata says it is in layout {recorded!r}, which is not one bertconv "
            f"ships ({', '.join(layout_names())}). Name the layout it is in with --from (a "
            "shipped name, or the path to the table file it was written with)."
        )
    return recorded


def tokenizer_files(directory: Path) -> Iterator[Path]:
    for name in TOKENIZER_FILES:
        if files.is_present(directory / name):
            yield directory / name


def write_checkpoint(
    out: files.Output,
    state_dict: dict,
    config_dict: dict,
    metadata: dict[str, str],
    tokenizer_from: Path,
    form: str = "safetensors",
) -> list[Path]:
    """Write the weights, the config and the tokenizer files into the locked output directory
    `out`: each written aside, then all renamed into place, the weights last, so that a failure
    leaves the directory as it was. `form`: safetensors (model.safetensors and config.json,
    with the metadata) or tensorflow (bert_model.ckpt.* and bert_config.json, as
    google-research/bert ships them; a TensorFlow checkpoint has no room for metadata)."""

    for source in tokenizer_files(tokenizer_from):
        out.copy_in(source.name, source)  # copied, never read into memory
    config_name = TF_CONFIG if form == "tensorflow" else CONFIG_FILES[0]
    out.stage(config_name).write_text(_config_text(config_dict))
    with _progress(sum(map(storage.nbytes, state_dict.values())), "writing") as bar:
        if form == "tensorflow":
            from . import tfbundle

            data = out.stage(tfbundle.data_file(Path(TF_PREFIX)).name)
            index = out.stage(f"{TF_PREFIX}.index")  # the index last: it makes the checkpoint
            tfbundle.write_bundle(index, data, state_dict, bar.update)
        else:
            weights = out.stage("model.safetensors")
            metadata = {"format": "pt", **metadata}
            storage.write_safetensors(weights, state_dict, metadata, bar.update)
    return out.commit()


def _config_text(config_dict: dict) -> str:
    """config.json as transformers writes it (indented), unless indenting would make a large
    file several times larger (fields nested deep): then as compact as it came."""
    import json

    compact = json.dumps(config_dict)
    return (json.dumps(config_dict, indent=2) if len(compact) < 1 << 20 else compact) + "\n"


def read_metadata(path: Path) -> dict[str, str]:
    """The safetensors metadata of a file; empty where there is none, no such file, or a file
    that is not safetensors."""
    try:
        return storage.read_header(path)[1]
    except (storage.NotSafetensors, BertconvError, OSError):
        return {}
