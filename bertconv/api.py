"""The Python API: convert a checkpoint (local or on the Hub) into a layout, or load it into
bertconv's model in one call."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import files, formats, mapping, record, sentence, storage
from .checkpoint import (
    HEADS_KEY,
    LAYOUT_KEY,
    REVISION_KEY,
    SOURCE_KEY,
    TOKENIZER_FILES,
    Checkpoint,
    read_checkpoint,
    read_metadata,
    tokenizer_files,
    write_checkpoint,
)
from .convert import (
    Conversion,
    Reading,
    Selection,
    check_convertible,
    convert_reading,
    read_official,
)
from .errors import BertconvError, NotFoundError, UsageError
from .family import as_bert, for_table
from .mapping import layout
from .tables import (
    OFFICIAL,
    TABLE_KEY,
    digest,
    is_table_file,
    layout_names,
    read_off,
    recorded_as,
    recorded_name,
    refusal,
    table_bytes,
)

# What a conversion may write: any form's files, its config, the tokenizer files.
WRITTEN = (
    *(name for form in formats.FORMATS for name in form.written),
    *dict.fromkeys(form.config for form in formats.FORMATS),
    *TOKENIZER_FILES,
)

if TYPE_CHECKING:
    from . import hub


def _quiet(message: str) -> None:
    """The library never prints; the command line passes its own `say`."""


@dataclass
class Source:
    """Where a checkpoint came from: a local directory (or a weights file in one), or a Hub
    repository at a commit."""

    name: str
    path: Path  # the directory: config.json and the tokenizer files are read there
    revision: str | None = None
    weights: Path | None = None  # the weights file named, where one was; else the directory's


def resolve(source: "str | Path | Source", revision: str | None = None, say=_quiet) -> Source:
    """A local checkpoint directory, or a weights file in one (a state dict saved by hand,
    `bert.pt`), as it is; anything else that looks like `org/name`, from the Hub (or its
    cache)."""
    if isinstance(source, Source):
        return source
    path = Path(source).expanduser()
    if path.exists() and revision is not None:  # never silently ignored
        raise UsageError(
            f"{source}: a local {'directory' if path.is_dir() else 'file'}, which has no "
            f"revisions: --revision {revision} (revision=) is for a Hub model id; leave it out"
        )
    if path.is_dir():
        return Source(str(source), path)
    if path.exists():  # whatever it is, the reader says what is wrong with it
        return Source(str(source), path.parent, weights=path)
    from . import hub  # only for Hub ids: local conversions skip its imports

    if isinstance(source, Path) or not hub.is_repo_id(str(source)):
        raise NotFoundError(
            f"{source}: no such directory or file, and not a Hub model id (org/name)"
        )
    try:
        remote = hub.locate(str(source), revision)
    except BertconvError as e:
        reason = str(e).removeprefix(f"{source}")
        raise type(e)(f"{source}: not a local directory, and as a Hub model id{reason}") from e
    return fetch_source(remote, say)


def fetch_source(remote: "hub.Remote", say=_quiet) -> Source:
    """Download a located Hub revision (see hub.locate) and name it as a source."""
    from . import hub

    if remote.offline:
        say(f"using the cached copy of {remote.model_id} at {remote.commit}: {remote.offline}")
    return Source(remote.model_id, hub.download(remote, say), remote.commit)


def up_to_date(out: Path, source: str, revision: str, layout: str, selection: Selection) -> bool:
    """Does `out` already hold `source` at `revision`, converted into `layout` with the same
    choice of groups, every file of it there as written (record.intact)?"""
    meta = read_metadata(Path(out) / "model.safetensors")
    wanted = {
        SOURCE_KEY: source,
        REVISION_KEY: revision,
        LAYOUT_KEY: recorded_as(layout),
        HEADS_KEY: selection.recorded(),
    }
    if recorded_name(recorded_as(layout)):  # a table of yours: the same one, byte for byte
        wanted[TABLE_KEY] = digest(table_bytes(layout))
    same = all(meta.get(k) == v for k, v in wanted.items())
    return same and (Path(out) / "config.json").is_file() and record.intact(Path(out))


@dataclass
class Converted:
    """What a conversion read, made and wrote."""

    checkpoint: Checkpoint
    conversion: Conversion
    written: list[Path]
    nonfinite: list[str]  # tensors of the source holding NaN or Inf, copied as they are


def convert_checkpoint(
    src: Source,
    out: Path,
    to_layout: str = "bertconv",
    from_layout: str | None = None,
    heads: Selection | bool | list[str] | None = None,
) -> Converted:
    """Read `src`, convert it into `to_layout` and write it to `out` (see write_checkpoint),
    keeping the groups `heads` says (convert.Selection). Conversions into the same `out` at
    once take turns."""
    selection = Selection.of(heads)
    with files.OutputDir(out, WRITTEN, record.strangers) as output, storage.reading():
        return _convert_into(src, output, to_layout, from_layout, selection)


def fetch(
    model_id: str,
    out: Path,
    to_layout: str = "bertconv",
    revision: str | None = None,
    heads: Selection | bool | list[str] | None = None,
    say=_quiet,
) -> tuple["hub.Remote", Converted | None]:
    """Download a Hub model and convert it into `out`. Where `out` already holds that commit in
    that layout, nothing is downloaded or written, and the conversion returned is None."""
    from . import hub
    from .convert import check_convertible

    check_convertible(None, to_layout, model_id)  # before anything is downloaded
    selection = Selection.of(heads)
    remote = hub.locate(model_id, revision)
    with files.OutputDir(out, WRITTEN, record.strangers) as output:
        if up_to_date(out, model_id, remote.commit, to_layout, selection):
            return remote, None
        output.check_replaceable()  # before the download
        src = fetch_source(remote, say)
        with storage.reading():  # each file opened once
            return remote, _convert_into(src, output, to_layout, None, selection)


def _convert_into(
    src: Source, output: files.OutputDir, to_layout, from_layout, selection: Selection
) -> Converted:
    ckpt = read_checkpoint(src.path, from_layout, src.weights)
    carried = _carried(src, output)
    read = [*ckpt.files, *tokenizer_files(src.path), *(src.path / n for n in carried)]
    output.check_not_source(src.path, read, output.replaces)
    source = ckpt
    check_convertible(ckpt.layout, to_layout, str(ckpt.path))
    reading = official(ckpt)  # made once, as verify makes it
    if is_table_file(to_layout):  # a table of yours: held as its [holding] says
        ckpt, reading = for_table(ckpt, reading, to_layout)
    elif _held_as_bert(ckpt, to_layout):  # a RoBERTa into a BERT's layout (minbert)
        ckpt, reading = as_bert(ckpt, reading)
    table = layout(to_layout, ckpt.config)
    _check_form(table.format, to_layout, output)
    output.check_replaceable()  # before the conversion's work
    result = convert_reading(reading, ckpt.config, table, selection)
    # a table of yours placing Dense's weights ([sentence]): written with the rest, by its names
    result.state_dict.update(sentence.placed(dict(table.sentence), src.path))
    metadata = {
        LAYOUT_KEY: recorded_as(to_layout),
        SOURCE_KEY: src.name,
        REVISION_KEY: src.revision or ckpt.metadata.get(REVISION_KEY, ""),
        HEADS_KEY: selection.recorded(),
    }
    metadata |= _table_beside(output, to_layout)
    # The written file is of the class its groups make (a layout may leave heads out).
    config = ckpt.config_dict | {"architectures": [result.model_class]}
    nonfinite = storage.nonfinite_soon(ckpt.state_dict, storage.transposes(result.state_dict))
    write_checkpoint(output, result.state_dict, config, metadata, src.path, table.format, carried)
    found = nonfinite()  # before the commit: a source the scan found cut short fails it
    files.unchanged(source.seen)  # and one rewritten while it was read
    return Converted(ckpt, result, output.commit(), found)


def _carried(src: Source, output: files.OutputDir) -> list[str]:
    """The sentence-transformers files of `src` (modules.json, its modules' folders), carried
    into the output as they are; the output then replaces them, and an earlier result's files
    in its module folders that this one does not write, where bertconv wrote them (record.py).
    A file of the user's in such a folder is left where it is."""
    carried = sentence.carried(src.path)
    try:
        earlier = sentence.carried(output.path, links=False)
    except BertconvError:  # a modules.json there no one can read: refused below as a stranger's
        earlier = []
    found = record.strangers(output.path, [n for n in earlier if n not in carried])
    earlier = [n for n in earlier if found.get(n) in (None, record.CHANGED)]
    output.replaces = tuple(dict.fromkeys([*WRITTEN, *sentence.FILES, *carried, *earlier]))
    return carried


def _table_beside(output: files.OutputDir, to_layout: str) -> dict[str, str]:
    """A table of yours, copied beside the weights written in it (unless it lies there already)
    and its digest recorded: the directory then reads back without naming it. An earlier
    result's table there, one bertconv copied, goes with that result."""
    name = recorded_name(recorded_as(to_layout))
    table = Path(to_layout).expanduser() if name else None
    weights = output.path / record.WEIGHTS
    earlier = recorded_name({} if weights.is_symlink() else read_metadata(weights).get(LAYOUT_KEY))
    if earlier and earlier != name and record.strangers(output.path, [earlier]).get(earlier) in (
        None, record.CHANGED
    ):  # fmt: skip
        output.replaces += (earlier,)
    if table is None:
        return {}
    data = table_bytes(str(table))
    if table.resolve() != (output.path / name).resolve():
        output.replaces += (name,)
        output.check_replaceable()  # a file of yours of that name there is refused, by name
        output.stage(name).write_bytes(data)
    return {TABLE_KEY: digest(data)}


def _held_as_bert(ckpt: Checkpoint, to_layout: str) -> bool:
    """Is `to_layout` a shipped BERT's (minbert) that `ckpt`'s type (RoBERTa, ELECTRA,
    DistilBERT) has none of: written as a BERT holds it (family.py)?"""
    kind = ckpt.config.model_type
    return (
        to_layout in layout_names()
        and to_layout not in layout_names(kind)
        and ckpt.architecture.bert is not None
    )


def _check_form(form: str, to_layout: str, output: files.OutputDir) -> None:
    """bertconv writes a layout's files in the form its table says, where that form is written
    (not read only), and into a directory where they read back as written: one holding no file
    read before them or in their place (formats.py's in_the_way); checked before anything is
    written."""
    written = formats.written_by(form)
    if written.read_only:
        raise UsageError(
            f"--to {to_layout}: bertconv reads {written.marks[0]} files but does not write them; "
            "write google-tf (TensorFlow's own checkpoint format) instead"
        )
    # what an earlier conversion wrote is replaced (files.OutputDir), and nothing else bertconv
    # would replace is there (check_replaceable): never in the way
    others = [name for name in written.in_the_way(output.path) if name not in WRITTEN]
    if others:
        raise UsageError(
            f"{output.path}: holds {', '.join(others)}, which bertconv would read before a "
            "TensorFlow checkpoint written beside it, or in its place; choose another --out, "
            "or remove them"
        )


def official(ckpt: Checkpoint) -> Reading:
    """A checkpoint already read, in the official names (config.json's `architectures` breaking
    ties between classes): the reading a command hands on (to its conversions, transformers'
    reference, a user's model, the diagnosis), made once."""
    check_convertible(ckpt.layout, OFFICIAL, str(ckpt.path))
    table = layout(ckpt.layout, ckpt.config)
    hint = ckpt.config_dict.get("architectures")
    return read_official(ckpt.state_dict, ckpt.config, table, str(ckpt.path), hint)


def load(
    source: "str | Path | Source",
    revision: str | None = None,
    heads: Selection | bool | list[str] | None = None,
    layout: str | None = None,
    mmap: bool = False,
):
    """bertconv's model with the weights of `source`, in eval mode.

    `source` is a checkpoint directory (official, or converted by bertconv into any layout) or a
    Hub model id; `layout` names the layout it is in (a shipped one, or a table file) where
    bertconv did not record it. The result is the class the file's groups make: a BERT's under
    transformers' name (BertForPreTraining, BertForSequenceClassification, ..., BertModel), a
    family checkpoint's head as bertconv computes it (a RoBERTa classifier's is
    FirstTokenClassification: docs/python.md lists each); `heads` narrows it:
    False for the encoder and pooler alone, or a list of the groups to keep. Loading is strict:
    every parameter comes from the file, none is left at an initial value.

    The weights are read into memory: the model keeps them whatever later happens to the file.
    `mmap=True` maps a safetensors file (a TensorFlow data file) instead (faster to load, pages
    shared with other processes), with a mapping's caveat: a later write to the file shows in
    the model, and a file cut short kills the process (SIGBUS) when the model next reads a
    missing page. A .bin file's tensors are read into memory either way (docs/python.md).

    A weights file that another process rewrites while it is read is read again, until it holds
    still (its identity, size and time as before the first byte was read), a few times at
    most: never a model mixing two versions of it."""
    from .tables import canonical

    src = resolve(source, revision)

    def read():
        with storage.reading():  # each file opened once
            ckpt = read_checkpoint(src.path, canonical(layout), src.weights)
            ours = mapping.layout("bertconv", ckpt.config)
            conversion = convert_reading(official(ckpt), ckpt.config, ours, Selection.of(heads))
            return build(conversion, ckpt.config, mmap), ckpt.seen

    model = files.held_still(read, "read")  # a model of one version of each file
    model.sentences = _sentences(src.path, model.config)
    return model


def _sentences(directory: Path, config) -> "sentence.Encoding | None":
    """A sentence-transformers directory's pipeline and tokenizer, for BertModel.encode."""
    from . import sentence
    from .batches import positions, tokenizer

    pipeline = sentence.read_pipeline(directory, positions(config))
    if pipeline is None:
        return None
    return sentence.Encoding(pipeline, tokenizer(directory), config.pad_token_id)


def build(conversion: Conversion, config, mmap: bool = False, read: dict | None = None):
    """The bertconv model a conversion into the bertconv layout calls for, holding its tensors
    (read into memory, or `mmap`: mapped from their files; `read`: shared with another model
    that only reads them, storage.all_to_torch), in eval mode."""
    import torch

    from .heads import CLASSES

    cls = CLASSES[conversion.table.architecture.implementation(conversion.model_class)]
    with torch.device("meta"), _skip_init():  # every parameter comes from the file
        model = cls(config, pooler="pooler" in conversion.groups)
    weights = storage.all_to_torch(conversion.state_dict, mmap, read)
    model.load_state_dict(weights, strict=True, assign=True)
    return model.eval()


def _skip_init():
    """A torch function mode that skips torch.nn.init's random initialisation. Parameters built
    under it (on the meta device, where they hold no memory) are about to be replaced by loaded
    weights; initialising meta tensors would also import torch's compiler stack (~1 s)."""
    from torch.overrides import TorchFunctionMode

    class SkipInit(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__module__", None) == "torch.nn.init":
                return args[0] if args else kwargs["tensor"]  # untouched
            return func(*args, **(kwargs or {}))

    return SkipInit()


@dataclass
class Inspection:
    """What `bertconv inspect` tells of a checkpoint."""

    source: str
    path: str
    layout: str
    layout_found: str  # how the layout was found: given, recorded, or by its names
    model_class: str | None  # None where the tensors make no class (see problems)
    groups: list[str]
    config: dict  # None for a size the checkpoint does not show
    config_from: str  # config.json, or its weights' shapes (a layout recognised only)
    parameters: int  # tied copies and buffers left out
    dtypes: dict[str, int]  # dtype -> number of tensors
    bytes: int
    tensors: int
    unplaced: list[str]  # names no row, alias or buffer of the layout accounts for
    problems: str | None  # why the checkpoint would not convert, if it would not
    model_type: str = "bert"  # config.json's, which picks the architecture's catalog


SUMMARY = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
    "max_position_embeddings", "type_vocab_size", "hidden_act", "num_labels",
    "position_embedding_type",
)  # fmt: skip


def inspect(
    source: "str | Path | Source", revision: str | None = None, from_layout: str | None = None
) -> Inspection:
    """Describe a checkpoint without converting it: the layout (recorded in its metadata, or
    the shipped one whose names place most of its tensors), the class and groups its tensors
    make, its config, parameters and dtypes, and any tensor no row accounts for."""
    from collections import Counter

    src = resolve(source, revision)
    ckpt = read_checkpoint(src.path, from_layout, src.weights, guess=True)
    found = ckpt.identified
    conversion, problems = None, None
    if found.layout is None:
        said = ckpt.metadata.get(LAYOUT_KEY)
        how = found.how + (f"; its metadata says {said!r}" if said else "")
        problems = (
            "Name the table it is in (a shipped layout or a table file): --from on the command "
            "line, from_layout= in Python."
        )
    else:  # read (and checked) in its layout's names, as conversion reads it; not converted
        how = found.how
        try:
            conversion = official(ckpt)
        except BertconvError as e:
            problems = str(e)
    tensors = ckpt.state_dict.values()
    config, config_from = _config_shown(ckpt, found.layout)
    return Inspection(
        src.name,
        str(src.path),
        found.layout or "unknown",
        how,
        conversion.model_class if conversion else None,
        sorted(conversion.groups) if conversion else [],
        config,
        config_from,
        _parameters(ckpt, found.layout),
        dict(Counter(t.dtype for t in tensors)),
        sum(storage.nbytes(t) for t in tensors),
        len(ckpt.state_dict),
        [n for n in ckpt.state_dict if n not in found.placed],
        problems,
        ckpt.config.model_type if ckpt.config else "bert",
    )


def _parameters(ckpt: Checkpoint, name: str | None) -> int:
    """The parameters a file holds in layout `name`: its rows' and aliases' tensors (tied copies
    and buffers left out); in no layout, every tensor's elements (none can be told apart)."""
    table = layout(name, ckpt.config) if name else None
    named = table.rows | table.aliases if table else None
    weights = [t for n, t in ckpt.state_dict.items() if named is None or n in named]
    return sum(storage.nbytes(t) // storage.ITEM_SIZE[t.dtype] for t in weights)


def _config_shown(ckpt: Checkpoint, found: str | None) -> tuple[dict, str]:
    """The config inspect shows, and where from: config.json's; for a layout recognised only,
    the sizes its weights' shapes show, with or without a config.json (None for the others:
    no shape shows the number of heads, say, and it is not guessed)."""
    if found is None or not refusal(found):
        return {k: getattr(ckpt.config, k) for k in SUMMARY}, "config.json"
    sizes = read_off(found, {n: tuple(t.shape) for n, t in ckpt.state_dict.items()})[1]
    return {k: sizes.get(k) for k in SUMMARY}, "its weights' shapes"
