"""The forms checkpoints come in, in the order they are preferred where a directory (or a Hub
repository) holds several. Each says how its files are found in a directory, what `fetch`
downloads of a repository, how one of its files is read, and how it is written (or that it is
read only) with the config file beside it. Which layout the tensors are in is the tables' to say
(mapping.py), not the format's.

    safetensors    model.safetensors                       read and written (storage.py, writing.py)
    safetensors    model.safetensors.index.json + shards   read
    bin            pytorch_model.bin                       read (pickles.py: vetted first)
    bin            pytorch_model.bin.index.json + shards   read
    tensorflow     PREFIX.index + PREFIX.data-*            read and written (tfbundle.py)
    h5             tf_model.h5                             read (h5weights.py)

A written form records the files of its output beside them (record.py), so that a later
conversion into the directory tells them from the user's own files.

A new format is a Format here, and its reader (and writer).
"""

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from . import files, record, storage, writing
from .errors import BertconvError, CheckpointError, NotFoundError

# What a conversion into a TensorFlow layout writes, as google-research/bert's releases ship it.
TF_PREFIX, TF_CONFIG = "bert_model.ckpt", "bert_config.json"
RECORD_LIMIT = 1 << 16  # bytes of a `checkpoint` file (TensorFlow's lists a few paths)

Found = tuple[Path | None, list[Path]]  # the shard index, if any, and the files holding tensors


@dataclass(frozen=True)
class Format:
    """One form of checkpoint files."""

    name: str  # as a table's `format` says it
    marks: tuple[str, ...]  # the file that marks it in a directory (the first), and its others
    suffixes: tuple[str, ...]  # a file of this form, named on its own, ends so
    read: Callable  # (path, progress) -> (tensors, metadata)
    # Writing: (out, tensors, metadata, progress) into an output directory; None: read only.
    write: Callable | None = None
    written: tuple[str, ...] = ()  # the files it writes
    config: str = "config.json"  # the config file written beside them
    sharded: bool = False  # its mark is an index of shards (model.safetensors.index.json)
    # How it is found and fetched where its mark does not say it all (TensorFlow's prefixes):
    find_in: Callable[[Path], "Found | None"] | None = None
    fetch_of: Callable[[list[str]], list[str] | None] | None = None
    in_the_way: Callable[[Path], list[str]] = field(default=lambda directory: [])
    # The files read beside a weights file of this form that name no tensor (TensorFlow's data)
    beside: Callable[[Path], list[Path]] = field(default=lambda path: [])
    said: str = ""  # how messages name it, where its mark does not

    @property
    def read_only(self) -> bool:
        return self.write is None

    def find(self, directory: Path) -> "Found | None":
        """Its files in `directory`, if it holds them: (the shard index, the files)."""
        if self.find_in is not None:
            return self.find_in(directory)
        path = directory / self.marks[0]
        if not files.is_present(path):
            return None
        return (path, shards(path)) if self.sharded else (None, [path])

    def fetch(self, top: list[str]) -> list[str] | None:
        """Of a repository's top-level files, the patterns to download, if it has this form."""
        if self.fetch_of is not None:
            return self.fetch_of(top)
        return list(self.marks) if self.marks[0] in top else None


# Finding files -------------------------------------------------------------------------------


def shards(index: Path) -> list[Path]:
    """The shard files an index names: plain file names beside it, each there."""
    names = sorted({files.plain_name(name, str(index)) for name in weight_map_of(index).values()})
    found = [index.parent / name for name in names]
    missing = [str(s) for s in found if not files.is_present(s)]
    if missing:
        raise NotFoundError(f"{index}: lists shards that are not there: {', '.join(missing)}")
    return found


def weight_map_of(index: Path) -> dict[str, str]:
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


def _tf_found(directory: Path) -> Found | None:
    """The .index file of the directory's TensorFlow checkpoint: the one its `checkpoint` file
    names, where it has one; else the only one."""
    if files.is_present(directory / "checkpoint"):
        return None, [_named_checkpoint(directory)]
    indexes = _indexes(directory)
    if len(indexes) > 1:
        raise CheckpointError(
            f"{directory}: holds {len(indexes)} TensorFlow checkpoints "
            f"({', '.join(p.stem for p in indexes)}) and no `checkpoint` file saying which is "
            "the model's; keep one"
        )
    return (None, indexes) if indexes else None


def _indexes(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.index") if p.is_file())


def _named_checkpoint(directory: Path) -> Path:
    """The checkpoint that the directory's `checkpoint` file names, or none: never another one
    of the directory's, which TensorFlow would not read. TensorFlow 1 wrote where it saved it,
    often an absolute path on the machine that trained it: its last part is looked for in the
    directory, and never opened as a path."""
    record = files.confined(directory / "checkpoint")  # what it says is shown in messages
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
    pairs = (line.partition(":") for line in data.decode("utf-8", "replace").splitlines())
    named = [v.strip().strip('"') for k, _, v in pairs if k.strip() == "model_checkpoint_path"]
    if len(named) != 1:
        # TensorFlow reads the last of several; a file that says two things is refused.
        said = "no model_checkpoint_path" if not named else "model_checkpoint_path twice"
        raise CheckpointError(
            f"{record}: gives {said}, so which checkpoint is the model's is unknown; remove "
            "the file and keep one checkpoint"
        )
    return named[0]


def _in_the_way_of_tf(directory: Path) -> list[str]:
    """The files of `directory` that a TensorFlow checkpoint written into it (TF_PREFIX, with
    TF_CONFIG) would not read back past: other weights, a `checkpoint` file or another
    checkpoint's index (which would say, or leave open, which checkpoint is the model's), and
    config.json (read before TF_CONFIG)."""
    weights = {f.marks[0] for f in FORMATS if f.find_in is None}
    others = {*weights, "checkpoint", "config.json"}
    return sorted(
        name
        for name in os.listdir(directory)
        if name in others or (name.endswith(".index") and name != f"{TF_PREFIX}.index")
    )


# What fetch downloads --------------------------------------------------------------------------


def _fetch_tf(top: list[str]) -> list[str] | None:
    bundles = sorted(f for f in top if f.endswith(".index"))
    if len(bundles) > 1:
        raise NotFoundError(
            f"the repository holds {len(bundles)} TensorFlow checkpoints ({', '.join(bundles)}); "
            "bertconv cannot tell which is the model"
        )
    if not bundles:
        return None
    prefix = "".join(f"[{c}]" if c in "*?[" else c for c in bundles[0].removesuffix(".index"))
    return [bundles[0], f"{prefix}.data-*-of-*"]  # the prefix escaped for the glob


def weight_patterns(top: list[str]) -> list[str]:
    """Of a repository's top-level files, the patterns of the one form of weights to fetch: the
    first form there is."""
    for form in FORMATS:
        patterns = form.fetch(top)
        if patterns is not None:
            return patterns
    raise NotFoundError(
        f"the repository has no weights bertconv can read (looked for {described()})"
    )


# Reading and writing ---------------------------------------------------------------------------


def _read_safetensors(path: Path, progress=None) -> tuple[dict, dict[str, str]]:
    try:
        return storage.read_header(path)
    except storage.NotSafetensors as e:
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({e}). {files.diagnose(path)}"
        ) from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None


def _read_bin(path: Path, progress=None) -> tuple[dict, dict[str, str]]:
    from . import pickles  # here only: pickletools and zipfile cost a safetensors reader ~10 ms

    return pickles.read_bin(path), {}


def _read_tf(path: Path, progress=None) -> tuple[dict, dict[str, str]]:
    from . import tfbundle

    return tfbundle.read_bundle(path.with_suffix(""), progress or (lambda n: None)), {}


def _read_h5(path: Path, progress=None) -> tuple[dict, dict[str, str]]:
    from . import h5weights

    return h5weights.read_h5(path), {}


def _write_safetensors(out: files.OutputDir, tensors: dict, metadata: dict, progress) -> None:
    """With the record of what was written (record.py) in its metadata, and its own seal."""
    metadata = record.metadata(out, metadata)  # of the files staged before it
    path = out.stage(record.WEIGHTS)
    record.seal(path, writing.write_safetensors(path, tensors, metadata, progress))


def _write_tf(out: files.OutputDir, tensors: dict, metadata: dict, progress) -> None:
    """A bundle has no room for metadata: it is known by its file names, and what was written
    is recorded beside it (record.py's manifest)."""
    from . import tfbundle

    data = out.stage(tfbundle.data_file(Path(TF_PREFIX)).name)
    index = out.stage(f"{TF_PREFIX}.index")  # the index last: it makes the checkpoint
    tfbundle.write_bundle(index, data, tensors, progress)
    record.write_manifest(out)


FORMATS = [
    Format(
        "safetensors",
        ("model.safetensors",),
        (".safetensors",),
        _read_safetensors,
        _write_safetensors,
        (record.WEIGHTS,),
    ),
    Format(
        "safetensors",
        ("model.safetensors.index.json", "*.safetensors"),
        (".safetensors.index.json",),
        _read_safetensors,
        sharded=True,
    ),
    Format("bin", ("pytorch_model.bin",), (".bin", ".pt", ".pth"), _read_bin),
    Format(
        "bin",
        ("pytorch_model.bin.index.json", "pytorch_model-*.bin"),
        (".bin.index.json",),
        _read_bin,
        sharded=True,
    ),
    Format(
        "tensorflow",
        ("PREFIX.index", "PREFIX.data-*-of-*"),
        (".index",),
        _read_tf,
        _write_tf,
        (f"{TF_PREFIX}.index", f"{TF_PREFIX}.data-00000-of-00001", record.MANIFEST),
        TF_CONFIG,
        find_in=_tf_found,
        fetch_of=_fetch_tf,
        in_the_way=_in_the_way_of_tf,
        beside=lambda index: sorted(index.parent.glob(f"{glob.escape(index.stem)}.data-*")),
        said="a TensorFlow checkpoint (PREFIX.index and its data files)",
    ),
    Format("h5", ("tf_model.h5",), (".h5",), _read_h5),
]


def found_in(directory: Path) -> tuple[Format, Found] | None:
    """The first form of weights `directory` holds, and its files."""
    return next(((form, found) for form in FORMATS if (found := form.find(directory))), None)


def of_file(path: Path) -> Format:
    """The form of a weights file named on its own, by its name (a pickle where none says)."""
    name = path.name
    matches = [f for f in FORMATS if any(name.endswith(s) for s in f.suffixes)]
    return max(matches, key=lambda f: max(len(s) for s in f.suffixes if name.endswith(s)),
               default=FORMATS[2])  # fmt: skip


def written_by(name: str) -> Format:
    """The form a table's `format` names, as it is written (safetensors: one file)."""
    return next(f for f in FORMATS if f.name == name)


def described() -> str:
    """What a directory (or a repository) is looked at for, in order, for messages."""
    names = [f.said or f.marks[0] for f in FORMATS]
    return ", ".join(names[:-1]) + ", or " + names[-1]
