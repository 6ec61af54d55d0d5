"""The mapping tables' files under mappings/ (one per layout) and the user's own: finding them,
reading them, and holding each to one schema, every problem named with its line. No torch.

Every layout's table (transformers' an ordinary one) has the same sections: [encoder], then
[groups.NAME], each a row per tensor mapping one of the layout's names onto the official names
of the architecture's catalog (catalog.py); then other names files use ([aliases], [tied],
`ignored`), the buffers a layout's model expects ([generated]), and a prefix some files put on
some groups. A layout whose weights cannot carry over into BERT's (BERT-pytorch's:
pre-LayerNorm blocks) is recognised, never converted: its table says why (`refused`), and its
rows are shapes, so that a file is identified by its names and its sizes read off its tensors'
shapes without a config.json.
"""

import re
import tomllib
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

from . import catalog, mappings
from .catalog import AFTER_PAD, ENCODER, FROM_ZERO, RELATIVE, is_dim, sections, shape_problems
from .config import SIZES
from .errors import BertconvError, CheckpointError, TableError, UsageError, listed
from .transforms import REGISTRY

TABLES = Path(mappings.__file__).parent  # mappings/, shipped inside the package

OFFICIAL = "transformers"
REFUSED = "refused"  # why a layout recognised only is never converted
TABLE_LIMIT = 1 << 20  # bytes: a table is a few KB
TABLE_KEY = "bertconv.table_sha256"  # the table file a conversion was written with
# The keys a table may have, with the type of each value; the first three it must have.
KEYS = {
    "name": str,
    "description": str,
    ENCODER: dict,
    RELATIVE: dict,
    "groups": dict,
    "prefix": str,
    "prefixed": list,
    "requires": list,  # groups the layout's model cannot do without
    "format": str,  # the files its checkpoints are: safetensors (default), tensorflow, h5
    "ignored": list,
    "own": list,  # a model's own tensors, from no checkpoint: never read, never written
    "slots": list,  # suffixes of an optimizer's slots of a row (`/adam_m`): skipped
    "aliases": dict,
    "tied": dict,
    "generated": dict,
    "write_tied": bool,  # are [tied] copies written (true: a user's model holds them by name)
    # files come in it as in the official layout, recognised by their names alone where the
    # official table does not place them all (NomicBERT's classes' names: transformers reads both)
    "official_too": bool,
    "holding": dict,  # how a from-scratch model holds BERT's family (Holding): infer writes it
    # a model's tensors of sentence-transformers' modules, from the directory's module folders:
    # {its name: "Dense.linear.weight"} (SENTENCE_TENSORS)
    "sentence": dict,
    # A layout recognised but never converted: why its weights cannot carry over. Its rows are
    # shapes, and map no official tensor.
    REFUSED: str,
}
REQUIRED = ("name", "description", ENCODER)
# What a table's [sentence] rows may name: a module's kind, then its tensor's name in the folder.
SENTENCE_TENSORS = ("Dense.linear.weight", "Dense.linear.bias")
MAX_NAME = 1024  # characters in a tensor name
MAX_GENERATED = 16  # buffers a table makes
MAX_GENERATED_ELEMENTS = 1 << 22  # elements in all of them: 32 MB of int64


@dataclass(frozen=True)
class Holding:
    """How a from-scratch model holds a checkpoint of BERT's family, as its table's [holding]
    says (bertconv infer finds it by building the model each way): where its positions count
    from (`from 0`, BERT's, into a table without RoBERTa's reserved rows; `after the pad id`,
    RoBERTa's, into every row), and how many rows its token type table has (0: it has none;
    not given: BERT's two, or the checkpoint's own where it has more); `names`: the model type
    whose official names its rows give, where they are not BERT's (ELECTRA's: its discriminator
    has no place in BERT)."""

    positions: str = FROM_ZERO
    token_types: int | None = None
    names: str | None = None

    @classmethod
    def of(cls, table: dict) -> "Holding":
        return cls(**table.get("holding", {}))

    def recorded(self) -> dict:
        """As a table's [holding] writes it (BERT's holding: nothing)."""
        return {k: v for k, v in vars(self).items() if v != getattr(BERT_HOLDING, k)}


BERT_HOLDING = Holding()


def _holding_problems(table: dict) -> list[tuple[str, str]]:
    holding = table.get("holding", {})
    problems = [("holding", f"unknown key {k!r}; one of positions, token_types, names")
                for k in holding if k not in ("positions", "token_types", "names")]  # fmt: skip
    if holding.get("positions", FROM_ZERO) not in (FROM_ZERO, AFTER_PAD):
        problems.append(("holding", f"positions: {FROM_ZERO!r} or {AFTER_PAD!r}"))
    types = holding.get("token_types", 0)
    if not isinstance(types, int) or isinstance(types, bool) or not 0 <= types <= 1 << 16:
        problems.append(("holding", "token_types: the rows of the model's table (0: none)"))
    if holding.get("names", "bert") not in catalog.model_types():
        problems.append(("holding", f"names: a model type ({', '.join(catalog.model_types())})"))
    return problems


def holding_of(name: str) -> Holding:
    """How the model of table `name` holds BERT's family (a shipped layout: as BERT), read
    before its rows, whose official names it says."""
    if not is_table_file(canonical(name)):
        return BERT_HOLDING
    return _holding(source_of(name))


def _holding(source: tuple[str, int, int]) -> Holding:
    """A table file's [holding], by its path and state on disk."""
    table = _file(source).toml
    if table is None:
        return BERT_HOLDING  # read_table says what is wrong with it
    if not isinstance(table.get("holding", {}), dict) or _holding_problems(table):
        return BERT_HOLDING
    return Holding.of(table)


@dataclass(frozen=True)
class TableFile:
    """A table file as read, once: its bytes (what a conversion copies and records), and its
    TOML, or why its bytes are none."""

    path: Path
    data: bytes
    toml: dict | None
    error: str | None = None


@lru_cache(maxsize=64)
def _file(source: tuple[str, int, int]) -> TableFile:
    """A table file by its path and state on disk (source_of): opened and parsed once; edited
    since, it is another source, read again."""
    from .files import open_regular

    path = Path(source[0])
    with open_regular(path) as f:
        data = f.read(TABLE_LIMIT + 1)
    if len(data) > TABLE_LIMIT:
        big = f"larger than {TABLE_LIMIT >> 10} KB; not a mapping table"
        return TableFile(path, data, None, big)
    try:
        return TableFile(path, data, tomllib.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as e:
        return TableFile(path, data, None, f"not a TOML table ({e or type(e).__name__})")


# Reading tables ---------------------------------------------------------------------------------


def forget() -> None:
    """Forget every table read, so that the next use reads them again (tables are cached for
    the life of a process; a test that rewrites the shipped ones needs this)."""
    read.cache_clear()
    _file.cache_clear()
    catalog.forget()


def layout_names(model_type: str = "bert") -> list[str]:
    """The shipped layouts: BERT's, or those with a table for another architecture's type."""
    return sorted(f.stem for f in _shipped(model_type).glob("*.toml"))


def _shipped(model_type: str) -> Path:
    """Where the shipped tables of `model_type` are: mappings/FAMILY/ (the name of its catalog)
    where there is one, else mappings/ (BERT's, and those of a variant under BERT's names)."""
    if model_type == "bert":
        return TABLES
    own = TABLES / catalog.of(model_type).family
    return own if own.is_dir() else TABLES


def every_layout() -> dict[str, Path]:
    """Every shipped layout's name, with its table: BERT's, then those another architecture
    alone has (NomicBERT's transformers-classes)."""
    found = {name: TABLES / f"{name}.toml" for name in layout_names()}
    for folder in sorted(p for p in TABLES.iterdir() if p.is_dir() and p.name != "architectures"):
        for f in sorted(folder.glob("*.toml")):
            found.setdefault(f.stem, f)
    return found


def describe_layouts() -> list[tuple[str, str]]:
    """Each layout's name and description: BERT's table's where BERT has it, else the one
    architecture's whose layout it is."""
    return [(name, describe(name)) for name in every_layout()]


def _owner(name: str) -> str:
    """The model type whose tables hold layout `name`: BERT's where BERT has it (or where no
    shipped layout is so called), else the one architecture's whose layout it is."""
    path = every_layout().get(name)
    if is_table_file(name) or name in layout_names() or path is None:
        return "bert"
    return next(t for t in catalog.model_types() if catalog.of(t).family == path.parent.name)


def describe(name: str) -> str:
    """A layout's description, its table read (and checked) on the way (a layout of another
    architecture alone, against that architecture's names)."""
    return raw(name)["description"]


def is_table_file(name: str) -> bool:
    """Is `name` a path to a table of the user's (`./mybert.toml`), not a shipped layout?"""
    return name.endswith(".toml") or "/" in name


def canonical(name: str | None) -> str | None:
    """A layout's name as bertconv knows it: a path to one of the shipped tables
    (`mappings/transformers.toml`) is that layout, by name."""
    if name is None or not is_table_file(name):
        return name
    try:
        path = Path(name).expanduser().resolve()
    except (OSError, RuntimeError):
        return name
    shipped = path.parent == TABLES.resolve() and path.suffix == ".toml"
    return path.stem if shipped and path.stem in layout_names() else name


def raw(name: str, model_type: str | None = None) -> dict:
    """Table `name`, read against the official names of `model_type` (by default, those its
    [holding] says: BERT's, unless a type's own)."""
    return read(source_of(name), model_type or holding_of(name).names or _owner(name))


def source_of(name: str) -> str | tuple[str, int, int]:
    """What identifies a table: a shipped one by its name; a file by its path and its state on
    disk, so that a table edited between two calls is read again."""
    name = canonical(name)
    if not is_table_file(name):
        if name not in every_layout():
            raise UsageError(
                f"no layout {name!r}; known layouts: {', '.join(every_layout())} "
                "(`bertconv layouts` describes them), or a path to a table file (.toml)"
            )
        return name
    try:
        return _state(Path(name).expanduser())
    except OSError:
        raise UsageError(  # the one code of a layout that is not there, shipped or a file
            f"{name}: no such table file (a layout is a shipped name, `bertconv layouts` lists "
            "them, or the path to a table file)"
        ) from None


@cache
def read(source: str | tuple[str, int, int], model_type: str = "bert") -> dict:
    """A table, by what identifies it. Shipped names are looked up, never joined into a path
    from a file's contents: BERT's in mappings/, another architecture's in mappings/FAMILY/ (the
    name of its catalog), where it has its own."""
    if not isinstance(source, str):
        return read_table(Path(source[0]), model_type)
    if source not in (own := layout_names(model_type)):
        if source not in layout_names():  # another architecture's alone
            raise CheckpointError(
                f"layout {source!r} is {_owner(source)}'s alone, not {model_type}'s: "
                f"{model_type} converts into {', '.join(own)}, or a table file of yours"
            )
        raise CheckpointError(
            f"layout {source!r} has no table for model_type {model_type!r}: its model numbers "
            f"positions from 0 and has BERT's heads; {model_type} converts into "
            f"{', '.join(own)}, or a table file of yours"
        )
    return read_table(_shipped(model_type) / f"{source}.toml", model_type)


def _form_names() -> list[str]:
    from .formats import FORMATS  # the forms checkpoints come in, one home

    return list(dict.fromkeys(f.name for f in FORMATS))


def layout_for_format(form: str) -> str | None:
    """The shipped layout whose checkpoints come in files of `form` (tensorflow: google-tf), where
    one table says so: files of that form are always in it (they have no metadata to say)."""
    if form == "safetensors":  # every other table's, by default: the file records its layout
        return None
    return next((n for n in layout_names() if raw(n).get("format") == form), None)


def recorded_as(name: str) -> str:
    """How a file written in layout `name` records it: a shipped name as it is; a table file as
    `file:NAME.toml` (recorded_table finds it again, where it is the same table)."""
    return f"file:{Path(name).name}" if is_table_file(name) else name


def table_bytes(name: str) -> bytes:
    """A table file's bytes, as a conversion copies and records them (TABLE_KEY)."""
    found = _file_at(Path(name).expanduser())
    if len(found.data) > TABLE_LIMIT:
        raise TableError(f"{name}: larger than {TABLE_LIMIT >> 10} KB; not a mapping table")
    return found.data


def _file_at(path: Path) -> TableFile:
    """The table file at `path`, as read once (where it is not there, its reader says so)."""
    try:
        return _file(_state(path))
    except OSError:
        return _file((str(path), 0, 0))


def _state(path: Path) -> tuple[str, int, int]:
    """What identifies a table file: its path, when it was written, its size (OSError where it
    is not there)."""
    state = path.stat()
    return str(path.resolve()), state.st_mtime_ns, state.st_size


def digest(data: bytes) -> str:
    import hashlib  # here only: OpenSSL's loading costs every command ~5 ms

    return hashlib.sha256(data).hexdigest()


def recorded_name(recorded: str | None) -> str | None:
    """The table file's name a file's metadata records (`file:NAME.toml`), where it is a plain
    name (a stranger's metadata could name `../x`): else None."""
    name = (recorded or "").removeprefix("file:")
    plain = name == Path(name).name and not name.startswith(".") and name.isprintable()
    return name if recorded != name and plain and name.endswith(".toml") else None


def recorded_table(
    recorded: str | None, sha256: str | None, directory: Path, offered=()
) -> str | None:
    """The table file that a file bertconv wrote records (`recorded`, TABLE_KEY's `sha256`),
    where one is at hand: one `offered` (verify's --layout) of its name, or the copy beside it,
    each only where it is that table byte for byte (a file of an older bertconv, which recorded
    no digest: the one offered by that name)."""
    from .files import confined

    name = recorded_name(recorded)
    if name is None:
        return None
    offered = [o for o in offered if o and is_table_file(o) and Path(o).name == name]
    beside = Path(directory) / name
    for candidate in [*offered, str(beside)]:
        try:
            if candidate == str(beside):  # a link out of the directory is no copy of bertconv's
                confined(beside, Path(directory))
            data = table_bytes(candidate)
        except (BertconvError, OSError):
            continue
        if digest(data) == sha256 if sha256 else candidate in offered:
            return candidate
    return None


def read_table(path: Path, model_type: str = "bert") -> dict:
    """Parse a table and hold it to the schema: errors name the file, the row and its line."""
    found = _file_at(path)
    if found.toml is None:
        raise TableError(f"{path}: {found.error}")
    table, text = found.toml, found.data.decode("utf-8")
    problems = _schema_problems(table) or _holding_problems(table)
    problems = problems or _content_problems(table, model_type)
    if problems:
        lines = [f"{_line(text, key)}: {problem}" for key, problem in problems]
        raise TableError(f"{path}: not a valid mapping table:\n  " + listed(lines, "\n  "))
    return table


def _line(text: str, key: str) -> str:
    """Where a row is written, for messages: `line N (row)`, or the row alone if not found."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith((f'"{key}"', f"{key} ", f"{key}=", f"[{key}]")):
            return f"line {number} ({key})"
    return key if key.isprintable() else repr(key)  # never a control character to a terminal


def _schema_problems(table: dict) -> list[tuple[str, str]]:
    """(key, problem) for unknown keys, missing ones, and values of the wrong type."""
    problems = [(k, f"unknown key; one of {', '.join(KEYS)}") for k in table if k not in KEYS]
    for key, kind in KEYS.items():
        if key in table and not isinstance(table[key], kind):
            problems.append((key, f"should be a {'table' if kind is dict else kind.__name__}"))
        elif key not in table and key in REQUIRED:
            problems.append((key, "missing"))
    for group, rows in table.get("groups", {}).items():
        if not isinstance(rows, dict):
            problems.append((f"groups.{group}", "should be a table of rows"))
    return problems


def _content_problems(table: dict, model_type: str) -> list[tuple[str, str]]:
    if REFUSED in table:  # rows that describe tensors, mapping none onto another
        problems = shape_problems(table, "a recognised-only layout's") + _refused_problems(
            table, model_type
        )
    else:
        problems = _row_problems(table, model_type) + _generated_problems(
            table.get("generated", {})
        )
    names = {name for _, rows in sections(table) for name in rows}
    problems += _other_name_problems(table, names) + _name_problems(table)
    forms = _form_names()
    if table.get("format", "safetensors") not in forms:
        problems.append(("format", f"one of {', '.join(forms)}"))
    if not all(isinstance(x, str) and x for x in table.get("slots", [])):
        problems.append(("slots", "a list of name suffixes"))
    groups = {ENCODER, RELATIVE, *table.get("groups", {})}
    for key in ("prefixed", "requires"):
        if not all(isinstance(g, str) and g in groups for g in table.get(key, [])):
            problems.append((key, f"a list of this table's groups ({', '.join(sorted(groups))})"))
    return problems


def _name_problems(table: dict) -> list[tuple[str, str]]:
    """Every tensor name a table gives is one a file can hold and a terminal can show:
    non-empty, printable, not safetensors' own `__metadata__`."""
    names = [n for _, rows in sections(table) for n in rows]
    names += [*table.get("aliases", {}), *table.get("tied", {}), *table.get("generated", {})]
    names += [n for k in ("ignored", "own") for n in table.get(k, []) if isinstance(n, str)]
    names += list(table.get("sentence", {}))
    return [(name, why) for name in names if (why := _bad_name(name))]


def _bad_name(name: str) -> str | None:
    if not name:
        return "an empty tensor name"
    if name == "__metadata__":
        return "__metadata__ is safetensors' own key, not a tensor name"
    if len(name) > MAX_NAME:
        return f"a tensor name of more than {MAX_NAME} characters"
    if not name.isprintable():
        return f"{name!r} holds characters that are not printable"
    return None


def _refused_problems(table: dict, model_type: str) -> list[tuple[str, str]]:
    """A layout recognised only says why it is never converted, and names its groups as the
    official table does (its rows are the tensors of those heads in that layout)."""
    problems = [
        (f"groups.{group}", f"no such group; one of {', '.join(known)}")
        for group in table.get("groups", {})
        if group not in (known := catalog.of(model_type).group_names)
    ]
    if not table[REFUSED].strip():
        problems.append((REFUSED, "says nothing: why the layout's weights cannot carry over"))
    return problems


def _other_name_problems(table: dict, names: set[str]) -> list[tuple[str, str]]:
    """Aliases and tied copies name a row of the table; ignored names are names."""
    problems = []
    for section in ("aliases", "tied"):
        for name, target in table.get(section, {}).items():
            if not isinstance(target, str) or target not in names:
                problems.append((name, f"{target!r} is not a row of this table"))
            elif ("{layer}" in name) != ("{layer}" in target):
                problems.append((name, "{layer} must appear on both sides of a row, or neither"))
    for key in ("ignored", "own"):
        if not all(isinstance(n, str) and n not in names for n in table.get(key, [])):
            problems.append((key, "a list of tensor names, none a row's"))
    sentence = table.get("sentence", {})
    written = _written_patterns(table, names) if sentence else []  # ~15 ms a table: if needed
    for name, target in sentence.items():
        taken = any(p.fullmatch(name) for p in written) or name in table.get("own", [])
        if target not in SENTENCE_TENSORS or taken:
            problems.append((f"sentence.{name}", f"one of {', '.join(SENTENCE_TENSORS)}, for a "
                             "tensor that is neither one the table's rows, copies or buffers "
                             "place, nor the model's own"))  # fmt: skip
    return problems


def _written_patterns(table: dict, rows: set[str]) -> list[re.Pattern]:
    """Every name the table places a tensor under, as patterns (`{layer}` any layer): its rows,
    their tied copies and aliases, its buffers, each under the prefix too."""
    names = [*rows, *table.get("tied", {}), *table.get("aliases", {}), *table.get("generated", {})]
    prefix = table.get("prefix", "")
    names = [n for n in names if isinstance(n, str)]
    names += [prefix + n for n in names if prefix]
    layer = re.escape("{layer}")
    return [re.compile(re.escape(n).replace(layer, LAYER_INDEX)) for n in names]


def _row_problems(table: dict, model_type: str) -> list[tuple[str, str]]:
    """Each row maps one of the layout's names onto official names of its own section: known
    ones, with `{layer}` on both sides or neither, through a known transform, each official
    name claimed once; every encoder tensor claimed, and each group whole or not at all."""
    arch = catalog.of(model_type)
    official = arch.tensors
    # A model with no token type table has no row for them (its table's [holding] says so).
    optional = arch.token_type_tensors if Holding.of(table).token_types == 0 else frozenset()
    problems, claimed = [], {}
    for group, rows in sections(table):
        if group not in official:
            problems.append((f"groups.{group}", f"no such group; one of {', '.join(official)}"))
            continue
        for name, spec in rows.items():
            problem = _row_problem(name, spec, official[group], claimed)
            if problem:
                problems.append((name, problem))
    if problems:
        return problems
    for group, shapes in official.items():
        missing = [n for n in shapes if n not in claimed and n not in optional]
        if missing and (group == ENCODER or len(missing) < len(shapes)):  # [relative]: optional
            problems.append((group, f"no row for {listed(missing)} (a group comes whole)"))
    return problems


def _row_problem(name: str, spec, shapes: dict, claimed: dict) -> str | None:
    targets, transform, problem = row_targets(spec)
    for target in targets:
        if target not in shapes:
            return problem or f"{target!r} is not an official tensor of this section"
        if ("{layer}" in target) != ("{layer}" in name):
            return "{layer} must appear on both sides of a row, or neither"
    if problem:
        return problem
    dims = [shapes[t] for t in targets]
    if any(len(d) not in REGISTRY[transform].ranks for d in dims):
        return f"{transform} applies to tensors of rank {REGISTRY[transform].ranks}"
    if any(d[1:] != dims[0][1:] for d in dims):
        return f"{transform}: the tensors do not stack (their shapes differ past the first)"
    for target in targets:
        if target in claimed:
            return f"{target!r} is claimed by {claimed[target]!r} too"
        claimed[target] = name
    return None


def row_targets(spec) -> tuple[list[str], str, str | None]:
    """The official names a row's value names, its transform, and what is wrong with its form."""
    if isinstance(spec, str):
        return [spec], "rename", None
    if isinstance(spec, dict) and len(spec) == 1:
        ((transform, target),) = spec.items()
        if transform not in REGISTRY:
            return [], "", f"unknown transform {transform!r}; one of {', '.join(REGISTRY)}"
        fuses = REGISTRY[transform].fuses
        targets = target if fuses else [target]
        if (
            isinstance(targets, list)
            and len(targets) >= (2 if fuses else 1)
            and all(isinstance(t, str) for t in targets)
        ):
            return targets, transform, None
        what = "a list of official names" if fuses else "an official name"
        return [], "", f"{transform} takes {what}"
    return [], "", 'a row is "official name" or { transform = "official name" or [names] }'


def _generated_problems(generated: dict) -> list[tuple[str, str]]:
    if len(generated) > MAX_GENERATED:
        return [("generated", f"more than {MAX_GENERATED} buffers; a model keeps one or two")]
    return [
        (name, "a generated buffer is { arange = SIZE, shape = [SIZES] }")
        for name, spec in generated.items()
        if not isinstance(spec, dict)
        or set(spec) != {"arange", "shape"}
        or not is_dim(spec["arange"])
        or not isinstance(spec["shape"], list)
        or not all(is_dim(d) for d in spec["shape"])
    ]


# Layouts recognised, never converted ------------------------------------------------------------

LAYER_INDEX = "(0|[1-9][0-9]{0,5})"  # `{layer}` in a file's name, written as _expand writes it


def refusal(name: str) -> str:
    """Why the weights of layout `name` cannot carry over into BERT's, or BERT's into it, where
    bertconv recognises the layout but never converts it; "" for the layouts it converts."""
    return raw(name).get(REFUSED, "")


def read_off(name: str, shapes: dict[str, tuple[int, ...]]) -> tuple[list[str], dict[str, int]]:
    """The file's tensors that rows of table `name` name, and the config.json sizes their shapes
    show (each as the first tensor to show it does; num_hidden_layers: one more than the highest
    layer index named). Only for a table whose rows are shapes (a layout recognised only)."""
    matchers, placed, sizes, layers = _matchers(name), [], {}, 0
    for tensor, shape in shapes.items():
        found = _matched(tensor, matchers)
        if found is None:
            continue
        match, dims = found
        placed.append(tensor)
        if match.re.groups:
            layers = max(layers, int(match[1]) + 1)
        if len(shape) == len(dims):  # a size already shown by an earlier tensor stays
            sizes = {d: s for d, s in zip(dims, shape, strict=True) if d in SIZES} | sizes
    if layers:
        sizes["num_hidden_layers"] = layers
    return placed, sizes


def _matched(tensor: str, matchers: list) -> tuple[re.Match, list] | None:
    """The match of the row that names `tensor`, and the row's shape."""
    for regex, dims in matchers:
        if match := regex.fullmatch(tensor):
            return match, dims
    return None


def _matchers(name: str) -> list[tuple[re.Pattern, list]]:
    """Each row of table `name` as a regular expression (`{layer}` any index; the prefix
    optional where the row's group is prefixed), with the row's shape."""
    table = raw(name)
    prefix = f"(?:{re.escape(table['prefix'])})?" if table.get("prefix") else ""
    prefixed = set(table.get("prefixed", []))
    return [
        (
            re.compile(
                (prefix if group in prefixed else "")
                + LAYER_INDEX.join(re.escape(part) for part in pattern.split("{layer}"))
            ),
            dims,
        )
        for group, rows in sections(table)
        for pattern, dims in rows.items()
    ]
