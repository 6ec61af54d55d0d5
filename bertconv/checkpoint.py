"""Checkpoint directories: which files hold the weights, config and tokenizer; reading them,
and writing converted ones whole or not at all. The bytes of the tensors are storage.py's.

A checkpoint directory holds config.json (or bert_config.json) and the weights, in the first
form formats.py finds there; the tokenizer files beside them. Files in a layout that bertconv
recognises but never converts (BERT-pytorch's) may come without a config.json.
"""

from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

from . import catalog, files, formats, storage
from .catalog import Architecture
from .config import BertConfig
from .errors import CheckpointError, NotFoundError, listed
from .mapping import Identified, identify
from .storage import read_metadata  # noqa: F401 (read beside the keys it reads)
from .tables import TABLE_KEY, read_off, recorded_table

CONFIG_FILES = ("config.json", "bert_config.json")  # transformers', google-research/bert's
TOKENIZER_FILES = (
    "vocab.txt",
    "vocab.json",  # RoBERTa's byte-level BPE, with merges.txt
    "merges.txt",
    "sentencepiece.bpe.model",  # XLM-RoBERTa's and CamemBERT's
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
# Keys of the safetensors metadata that bertconv writes.
LAYOUT_KEY, SOURCE_KEY, REVISION_KEY = "bertconv.layout", "bertconv.source", "bertconv.revision"
HEADS_KEY = "bertconv.heads"  # the groups asked for
BIG = 256 << 20  # bytes: writing this much or more gets a progress bar


@dataclass
class Checkpoint:
    path: Path
    config: BertConfig
    config_dict: dict
    state_dict: dict  # name -> storage.Tensor (a reference to its bytes), as the files hold them
    layout: str  # see identified
    metadata: dict[str, str]
    files: list[Path]  # every file read: config.json and the weights
    identified: Identified  # how its layout was found, and which of its names it places
    seen: dict[Path, tuple] = field(default_factory=dict)  # the weights files as first found

    @property
    def architecture(self) -> Architecture:
        """What its config.json's model type is (BERT's for a file without one)."""
        return catalog.of(self.config.model_type)


def weight_files(directory: Path) -> tuple[Path | None, list[Path]]:
    """The weight files of a checkpoint directory, in the first form it holds (formats.py): the
    shard index if the weights are sharded, and the files that hold the tensors (a TensorFlow
    checkpoint: its .index file)."""
    if not directory.is_dir():
        raise NotFoundError(f"{directory}: no such directory")
    found = formats.found_in(directory)
    if found is None:
        raise NotFoundError(
            f"{directory}: no weights found; a checkpoint directory holds one of "
            f"{formats.described()}"
        )
    return found[1]


def _named_weights(path: Path) -> tuple[Path | None, list[Path]]:
    """The weights of a file named as the source: a shard index with its shards, or the file."""
    return (path, formats.shards(path)) if formats.of_file(path).sharded else (None, [path])


def read_tensors(paths: list[Path], index: Path | None = None) -> tuple[dict, dict[str, str]]:
    """All tensors of the files, and the first file's safetensors metadata. Shards must agree
    with their index: each tensor in the shard the index names, and no other tensor."""
    state_dict, metadata, where = {}, {}, {}
    for path in paths:
        tensors, meta = _read_weights(path)
        _check_names(path, tensors)
        clash = state_dict.keys() & tensors.keys()
        if clash:
            shown = listed(map(repr, sorted(clash)))
            raise CheckpointError(f"{path}: repeats tensors of another shard: [{shown}]")
        state_dict.update(tensors)
        where.update(dict.fromkeys(tensors, path.name))
        metadata = metadata or meta
    if index is not None:
        mapped = formats.weight_map_of(index)
        wrong = sorted(n for n in where.keys() | mapped.keys() if where.get(n) != mapped.get(n))
        if wrong:
            raise CheckpointError(
                f"{index}: does not match its shards: {len(wrong)} tensors are not where it "
                f"says ({listed(wrong)}). Download the checkpoint again."
            )
    return state_dict, metadata


def _check_names(path: Path, tensors: dict) -> None:
    """A tensor's name is printed in messages, tables and reports: one that would drive the
    terminal (an escape sequence, a line break forging a line of verify's report) is refused,
    shown escaped."""
    odd = [name for name in tensors if not name.isprintable()]
    if odd:
        shown = listed(map(ascii, odd))
        raise CheckpointError(
            f"{path}: names tensors with characters that are not printable ({shown}); no "
            "checkpoint's tensors are named so"
        )


def _read_weights(path: Path) -> tuple[dict, dict[str, str]]:
    """The tensors of one weight file, and its metadata (safetensors': other formats have none);
    a TensorFlow checkpoint, whose every byte is checked, with a progress bar."""
    form = formats.of_file(path)
    if form.name != "tensorflow":
        return form.read(path)
    data = [p for p in path.parent.glob(f"{path.stem}.data-*") if p.is_file()]
    size = sum(p.stat().st_size for p in data)  # for the bar; a broken one is the reader's
    with _progress(size, "checking") as bar:
        return form.read(path, bar.update)


def _progress(total: int, what: str):
    """A progress bar on stderr for work large enough to wait for, where stderr is a terminal."""
    import sys

    if total < BIG or not sys.stderr.isatty():
        return nullcontext(SimpleNamespace(update=lambda n: None))
    from tqdm import tqdm

    return tqdm(total=total, desc=what, unit="B", unit_scale=True)


def read_checkpoint(
    directory: Path,
    layout: str | None = None,
    named: Path | None = None,
    guess: bool = False,
    offered: tuple[str, ...] = (),
) -> Checkpoint:
    """config.json (or bert_config.json) and every tensor of a checkpoint directory; of the
    weights file `named` in it, where one is (a safetensors file, a TensorFlow index or h5
    file by their suffixes, else a pickle). Its layout as mapping.identify finds it (`guess`:
    by its names, where nothing says which); a file written with a table of the user's, in that
    table where it is at hand (tables.recorded_table: beside it, or `offered`)."""
    directory = Path(directory)
    index, weights = _named_weights(named) if named else weight_files(directory)
    form = formats.of_file(weights[0])
    beside = form.beside(weights[0])  # TensorFlow's data files
    if not named:  # what the user names is theirs; what a directory holds may be a stranger's
        for path in [*([index] if index else []), *weights, *beside]:
            files.confined(path)
    # before a byte is read: a conversion checks them again before its commit
    seen = {p: files.identity(p) for p in [*([index] if index else []), *weights, *beside]}
    config_path = next(
        (directory / n for n in CONFIG_FILES if files.is_present(directory / n)),
        directory / CONFIG_FILES[0],
    )
    if not files.is_present(config_path):
        return _unconfigured(directory, config_path, index, weights)
    config_dict = files.read_json_object(files.confined(config_path))  # it is written out again
    config = catalog.read_config(config_dict, source=str(config_path))  # its type, read once
    state_dict, metadata = read_tensors(weights, index)
    recorded = metadata.get(LAYOUT_KEY)
    sha256 = metadata.get(TABLE_KEY)
    table = None if layout else recorded_table(recorded, sha256, directory, offered)
    found = identify(
        _shapes(state_dict), config, layout or table, recorded, form.name, None, str(weights[0]),
        guess,
    )  # fmt: skip
    if table is not None:
        found = replace(found, how=f"recorded in its metadata, the table {table} as written")
    read = [config_path, *([index] if index else []), *weights, *beside]
    return Checkpoint(
        directory, config, config_dict, state_dict, found.layout, metadata, read, found, seen
    )


def _unconfigured(
    directory: Path, config_path: Path, index: Path | None, weights: list[Path]
) -> Checkpoint:
    """A directory without config.json, read where its tensors' names are those of a layout
    bertconv recognises but never converts (BERT-pytorch writes no config.json). The sizes their
    shapes show stand in for one: enough to describe the file, which is never converted."""
    state_dict, metadata = read_tensors(weights, index)
    shapes = _shapes(state_dict)
    found = identify(shapes, None)
    if found.layout is None:
        raise NotFoundError(f"{config_path}: no config.json; a checkpoint directory needs one")
    sizes = read_off(found.layout, shapes)[1]
    # No tensor's shape shows the number of heads: one stands in (it divides any hidden size).
    source = f"{directory} (its sizes, read off its tensors' shapes)"
    config = BertConfig.from_dict(sizes | {"num_attention_heads": 1}, source)
    found = identify(shapes, config)  # placed by its table, now that it can be expanded
    read = [*([index] if index else []), *weights]
    return Checkpoint(directory, config, {}, state_dict, found.layout, metadata, read, found)


def _shapes(state_dict: dict) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in state_dict.items()}


def tokenizer_files(directory: Path) -> Iterator[Path]:
    for name in TOKENIZER_FILES:
        if files.is_present(directory / name):
            yield directory / name


def write_checkpoint(
    out: files.OutputDir,
    state_dict: dict,
    config_dict: dict,
    metadata: dict[str, str],
    tokenizer_from: Path,
    form: str = "safetensors",
    carried: list[str] = (),
) -> None:
    """Stage the weights, the config and the tokenizer files in the locked output directory
    `out`, each written aside; `out.commit()` then renames them all into place, the weights
    last, so that a failure before leaves the directory as it was. `form`: safetensors
    (model.safetensors and config.json, with the metadata) or tensorflow (bert_model.ckpt.* and
    bert_config.json, as google-research/bert ships them; a TensorFlow checkpoint has no room
    for metadata). `carried`: files of the source directory, by their names in it, copied as
    they are (a sentence-transformers directory's modules.json and module folders)."""

    for source in tokenizer_files(tokenizer_from):
        out.copy_in(source.name, source)  # copied, never read into memory
    for name in carried:  # a sentence-transformers directory's modules, byte for byte
        out.copy_in(name, tokenizer_from / name, tokenizer_from)
    form = formats.written_by(form)
    out.stage(form.config).write_text(_config_text(config_dict))
    with _progress(sum(map(storage.nbytes, state_dict.values())), "writing") as bar:
        form.write(out, state_dict, {"format": "pt", **metadata}, bar.update)


def _config_text(config_dict: dict) -> str:
    """config.json as transformers writes it (indented), unless indenting would make a large
    file several times larger (fields nested deep): then as compact as it came."""
    import json

    compact = json.dumps(config_dict)
    return (json.dumps(config_dict, indent=2) if len(compact) < 1 << 20 else compact) + "\n"
