"""The mapping tables under mappings/: reading them (each held to one schema), expanding `{layer}`,
exact name lookups, and which BERT class a file's groups of tensors make.

No tensors here (and no torch): `convert.py` applies what these tables say.

The architecture (mappings/architectures/bert.toml, keyed by config.json's model_type) is the
catalog: BERT's tensors with their shapes, grouped as the encoder and each head (the pooler
counts as one), transformers' classes with their groups and outputs, and where each compared
output is read. Every layout's table (mappings/*.toml, transformers' an ordinary one) has the
same sections: [encoder], then [groups.NAME], each a row per tensor mapping one of the
layout's names onto the architecture's; then other names files use ([aliases], [tied],
`ignored`), the buffers a layout's model expects ([generated]), and a prefix some files put on
some groups. A layout whose weights cannot carry over into BERT's (BERT-pytorch's:
pre-LayerNorm blocks) is recognised, never converted: its table says why (`refused`), and its
rows are shapes, so that a file is identified by its names and its sizes read off its tensors'
shapes without a config.json.
"""

import math
import re
import tomllib
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import NamedTuple

from . import catalog, mappings
from .catalog import ENCODER, RELATIVE, config_key, is_dim, sections, shape_problems
from .config import SIZES, BertConfig
from .errors import CheckpointError, NotBertError, NotFoundError, TableError, UsageError
from .transforms import REGISTRY

TABLES = Path(mappings.__file__).parent  # mappings/, shipped inside the package

OFFICIAL = "transformers"
REFUSED = "refused"  # why a layout recognised only is never converted
TABLE_LIMIT = 1 << 20  # bytes: a table is a few KB
LISTED = 12  # rows named in one error
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
    "slots": list,  # suffixes of an optimizer's slots of a row (`/adam_m`): skipped
    "aliases": dict,
    "tied": dict,
    "generated": dict,
    "write_tied": bool,  # are [tied] copies written (true: a user's model holds them by name)
    # A layout recognised but never converted: why its weights cannot carry over. Its rows are
    # shapes, and map no official tensor.
    REFUSED: str,
}
REQUIRED = ("name", "description", ENCODER)
MAX_NAME = 1024  # characters in a tensor name
MAX_GENERATED = 16  # buffers a table makes
MAX_GENERATED_ELEMENTS = 1 << 22  # elements in all of them: 32 MB of int64


class Row(NamedTuple):
    """A tensor of the layout, the official tensors it holds, and the group it belongs to."""

    name: str
    official: tuple[str, ...]
    transform: str = "rename"  # a name in transforms.REGISTRY
    group: str = ENCODER


class Holder(NamedTuple):
    """A tensor of a layout that holds an official tensor: a row's (part `part` of the `parts`
    official tensors a fused row holds) or a tied copy's."""

    name: str
    part: int = 0
    parts: int = 1


class Generated(NamedTuple):
    """A tensor the layout's model expects that no official tensor holds (a constant buffer)."""

    name: str
    arange: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Table:
    """One layout's table, expanded for a config: every name a file in this layout may hold."""

    name: str
    description: str
    rows: dict[str, Row]  # by the layout's name
    generated: dict[str, Generated]
    aliases: dict[str, str]  # another name -> the row it is read as
    tied: dict[str, str]  # a copy's name -> the row it copies (read only to check it)
    ignored: frozenset[str]
    prefix: str  # put on the `prefixed` groups' names when a file holds any other group
    prefixed: frozenset[str]
    requires: frozenset[str]  # groups the layout's model cannot do without
    format: str = "safetensors"  # the files its checkpoints are
    model_type: str = "bert"  # the catalog whose official tensors its rows name
    write_tied: bool = True
    slots: tuple[str, ...] = ()  # a row's name + one of these: an optimizer's slot, skipped

    def place(self, name: str) -> str | None:
        """What a file's tensor `name` is in this layout: a `row`, an `alias` of one, a `tied`
        copy, an `ignored` buffer, a `generated` one, an optimizer's `slot` of a row; or None,
        no name of the layout's. The one answer reading, inspect and the refusals all use."""
        if name in self.ignored:
            return "ignored"
        if any(name.endswith(s) and self.place(name[: -len(s)]) in ("row", "alias")
               for s in self.slots):  # fmt: skip
            return "slot"
        for place, names in (
            ("tied", self.tied),
            ("generated", self.generated),
            ("row", self.rows),
            ("alias", self.aliases),
        ):
            if name in names:
                return place
        return None

    @cached_property
    def holders(self) -> dict[str, tuple[Holder, ...]]:
        """Official name -> the layout's tensors that hold it: its row's, then any tied copy's.
        The one inverse of the table ("which names does this layout give this tensor")."""
        found: dict[str, list[Holder]] = {}
        for row in self.rows.values():
            for part, official in enumerate(row.official):
                found.setdefault(official, []).append(Holder(row.name, part, len(row.official)))
        for copy, original in self.tied.items():
            for official in self.rows[original].official:
                found.setdefault(official, []).append(Holder(copy))
        return {official: tuple(holders) for official, holders in found.items()}

    def names_for(self, official: str) -> tuple[str, ...]:
        """The layout's names for an official tensor (a row's, then tied copies'); () if none."""
        return tuple(h.name for h in self.holders.get(official, ()))

    def written(self, officials: set[str], groups: frozenset[str]) -> dict[str, str]:
        """{a name this layout writes: the row it is written from} for the rows whose official
        tensors are all among `officials`, beside the groups `groups`: the prefixed groups
        (transformers' encoder and pooler) under the prefix where a head is there too, as
        transformers' task classes write them; then the tied copies, where written."""
        prefix = self.prefix if groups - self.prefixed else ""
        out = {
            (prefix + name if row.group in self.prefixed else name): name
            for name, row in self.rows.items()
            if row.official and set(row.official) <= officials
        }
        if self.writes_tied:  # a user's model holds its tied copies by name
            out |= {copy: row for copy, row in self.tied.items() if row in out.values()}
        return out

    def row_of(self, name: str) -> Row:
        """The row a name placed as a row or an alias is read through."""
        return self.rows[self.aliases.get(name, name)]

    @property
    def writes_tied(self) -> bool:
        """Are tied copies written? A user's model holds them by name; transformers' classes
        tie them themselves on loading (its table says so)."""
        return self.write_tied

    @property
    def relative(self) -> bool:
        """Has this layout a place for relative position embeddings?"""
        return any(row.group == RELATIVE for row in self.rows.values())

    @property
    def groups(self) -> frozenset[str]:
        """The official groups this layout has a place for: those whose every tensor has a row."""
        mapped = {o for row in self.rows.values() for o in row.official}
        found = catalog.group_tensors(self.model_type).items()
        return frozenset(g for g, names in found if names <= mapped)


# Reading tables ---------------------------------------------------------------------------------


def forget() -> None:
    """Forget every table read, so that the next use reads them again (tables are cached for
    the life of a process; a test that rewrites the shipped ones needs this)."""
    for cached in (_read, _layout):
        cached.cache_clear()
    catalog.forget()


def layout_names() -> list[str]:
    return sorted(f.stem for f in TABLES.glob("*.toml"))


def describe_layouts() -> list[tuple[str, str]]:
    return [(name, describe(name)) for name in layout_names()]


def describe(name: str) -> str:
    """A layout's description, its table read (and checked) on the way."""
    return _raw(name)["description"]


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


def _raw(name: str, model_type: str = "bert") -> dict:
    return _read(_source(name), model_type)


def _source(name: str) -> str | tuple[str, int, int]:
    """What identifies a table: a shipped one by its name; a file by its path and its state on
    disk, so that a table edited between two calls is read again."""
    name = canonical(name)
    if not is_table_file(name):
        if name not in layout_names():
            raise UsageError(
                f"no layout {name!r}; known layouts: {', '.join(layout_names())} "
                "(`bertconv layouts` describes them), or a path to a table file (.toml)"
            )
        return name
    path = Path(name).expanduser()
    try:
        state = path.stat()
    except OSError:
        raise NotFoundError(f"{name}: no such table file") from None
    return str(path.resolve()), state.st_mtime_ns, state.st_size


@cache
def _read(source: str | tuple[str, int, int], model_type: str = "bert") -> dict:
    """A table, by what identifies it. Shipped names are looked up, never joined into a path
    from a file's contents."""
    path = TABLES / f"{source}.toml" if isinstance(source, str) else Path(source[0])
    return read_table(path, model_type)


def _form_names() -> list[str]:
    from .formats import FORMATS  # the forms checkpoints come in, one home

    return list(dict.fromkeys(f.name for f in FORMATS))


def layout_for_format(form: str) -> str | None:
    """The shipped layout whose checkpoints come in files of `form` (tensorflow: google-tf), where
    one table says so: files of that form are always in it (they have no metadata to say)."""
    if form == "safetensors":  # every other table's, by default: the file records its layout
        return None
    return next((n for n in layout_names() if _raw(n).get("format") == form), None)


def recorded_as(name: str) -> str:
    """How a file written in layout `name` records it: a shipped name as it is; a table file as
    `file:NAME.toml`, which is never taken from a file again (the user names it with --from)."""
    return f"file:{Path(name).name}" if is_table_file(name) else name


def read_table(path: Path, model_type: str = "bert") -> dict:
    """Parse a table and hold it to the schema: errors name the file, the row and its line."""
    from .files import open_regular

    with open_regular(path) as f:
        raw = f.read(TABLE_LIMIT + 1)
    if len(raw) > TABLE_LIMIT:
        raise TableError(f"{path}: larger than {TABLE_LIMIT >> 10} KB; not a mapping table")
    try:
        text = raw.decode("utf-8")
        table = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as e:
        raise TableError(f"{path}: not a TOML table ({e or type(e).__name__})") from None
    problems = _schema_problems(table) or _content_problems(table, model_type)
    if problems:
        lines = [f"  {_line(text, key)}: {problem}" for key, problem in problems[:LISTED]]
        raise TableError(f"{path}: not a valid mapping table:\n" + "\n".join(lines))
    return table


def _line(text: str, key: str) -> str:
    """Where a row is written, for messages: `line N (row)`, or the row alone if not found."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith((f'"{key}"', f"{key} ", f"{key}=", f"[{key}]")):
            return f"line {number} ({key})"
    return key


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
    names += [n for n in table.get("ignored", []) if isinstance(n, str)]
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
        if group not in (known := catalog.group_names(model_type))
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
    if not all(isinstance(n, str) for n in table.get("ignored", [])):
        problems.append(("ignored", "a list of tensor names"))
    return problems


def _row_problems(table: dict, model_type: str) -> list[tuple[str, str]]:
    """Each row maps one of the layout's names onto official names of its own section: known
    ones, with `{layer}` on both sides or neither, through a known transform, each official
    name claimed once; every encoder tensor claimed, and each group whole or not at all."""
    official = catalog.tensors(model_type)
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
        missing = [n for n in shapes if n not in claimed]
        if missing and (group == ENCODER or len(missing) < len(shapes)):  # [relative]: optional
            problems.append((group, f"no row for {', '.join(missing[:5])} (a group comes whole)"))
    return problems


def _row_problem(name: str, spec, shapes: dict, claimed: dict) -> str | None:
    targets, transform, problem = _row_targets(spec)
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


def _row_targets(spec) -> tuple[list[str], str, str | None]:
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
    return _raw(name).get(REFUSED, "")


def recognised_only(shapes: dict[str, tuple[int, ...]]) -> str | None:
    """The shipped layout, of those recognised but never converted, whose rows name most (over
    half) of a file's tensors, if there is one. `shapes`: the file's tensors' shapes, by name."""
    for name in layout_names():
        if refusal(name) and 2 * len(read_off(name, shapes)[0]) > len(shapes):
            return name
    return None


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
        if dims is not None and len(shape) == len(dims):  # a size shown earlier stays
            sizes = {d: s for d, s in zip(dims, shape, strict=True) if d in SIZES} | sizes
    if layers:
        sizes["num_hidden_layers"] = layers
    return placed, sizes


def _matched(tensor: str, matchers: list) -> tuple[re.Match, list | None] | None:
    """The match of the row that names `tensor`, and the row's shape."""
    for regex, dims in matchers:
        if match := regex.fullmatch(tensor):
            return match, dims
    return None


def _matchers(name: str) -> list[tuple[re.Pattern, list | None]]:
    """Each row of table `name` as a regular expression (`{layer}` any index; the prefix
    optional where the row's group is prefixed), with the row's shape; then each name it
    ignores (a buffer: no shape to read sizes off)."""
    raw = _raw(name)
    prefix = f"(?:{re.escape(raw['prefix'])})?" if raw.get("prefix") else ""
    prefixed = set(raw.get("prefixed", []))
    rows = [(pattern, dims, group in prefixed) for group, rows in sections(raw)
            for pattern, dims in rows.items()]  # fmt: skip
    rows += [(pattern, None, True) for pattern in raw.get("ignored", [])]
    return [
        (
            re.compile(
                (prefix if is_prefixed else "")
                + LAYER_INDEX.join(re.escape(part) for part in pattern.split("{layer}"))
            ),
            dims,
        )
        for pattern, dims, is_prefixed in rows
    ]


# Which layout a file or a model is ------------------------------------------------------------


@dataclass(frozen=True)
class Identified:
    """The layout a file's (or a model's) tensors are in, how that was found, the names of
    theirs it places, and (a model's) the table's groups it holds."""

    layout: str | None  # None: no layout (a file without config.json none recognises)
    how: str
    placed: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()


def identify(
    shapes: dict[str, tuple[int, ...]],
    config: BertConfig | None,
    given: str | None = None,
    recorded: str | None = None,
    form: str = "safetensors",
    buffers: frozenset[str] | None = None,
    source: str = "",
    guess: bool = False,
) -> Identified:
    """Which layout the tensors `shapes` (by name) are in: the one the user `given`; the one
    files of `form` always are in (TensorFlow's); the one bertconv `recorded` in a file it wrote;
    a layout recognised only that names over half of them; else the official one, or (`guess`,
    as inspect does) the layout whose names place the most of them. A file is converted from a
    layout it says or the user names, never from a guess.
    A model's state dict (`buffers`: its own buffers) is in the first table whose names are
    exactly the model's, which says which of the table's groups it holds. The one place that
    decides a layout: reading, inspect, convert's refusals and verify --model all ask it."""
    if buffers is not None:
        return _identify_model(shapes, config, given, buffers, source)
    if given is not None:
        return _placing(canonical(given), "given", shapes, config)
    if fixed := layout_for_format(form):
        return _placing(fixed, "by its form", shapes, config)
    if recorded is not None and not (guess and recorded not in layout_names()):
        if recorded not in layout_names():
            raise CheckpointError(
                f"{source}: its metadata says it is in layout {recorded!r}, which is not one "
                f"bertconv ships ({', '.join(layout_names())}). Name the layout it is in with "
                "--from (a shipped name, or the path to the table file it was written with)."
            )
        return _placing(recorded, "recorded in its metadata", shapes, config)
    if guess:
        return _by_names(shapes, config)
    return _by_names(shapes, None, official=config is not None)


def _placing(name: str, how: str, shapes: dict, config: BertConfig | None) -> Identified:
    if refusal(name) or config is None:
        return Identified(name, how, frozenset(read_off(name, shapes)[0]))
    table = layout(name, config)
    return Identified(name, how, frozenset(n for n in shapes if table.place(n)))


def _by_names(shapes: dict, config: BertConfig | None, official: bool = False) -> Identified:
    """A layout recognised only that names over half of a file's tensors; else, where `config`
    is given, the shipped layout placing the most (the official one where none places more);
    else the official layout (`official`) or none."""
    found = [_placing(n, "by its names", shapes, None) for n in layout_names() if refusal(n)]
    found = [f for f in found if 2 * len(f.placed) > len(shapes)]
    if not found and config is not None:
        names = sorted(layout_names(), key=lambda n: n != OFFICIAL)
        found = [_placing(n, "by its names", shapes, config) for n in names if not refusal(n)]
        found = [f for f in found if f.placed]
    if found:
        return max(found, key=lambda f: len(f.placed))  # the first of equals: official first
    if official:
        return Identified(OFFICIAL, "the official layout: no other is recorded or named")
    return Identified(None, "no shipped table names its tensors")


def _identify_model(
    shapes: dict, config: BertConfig, given: str | None, buffers: frozenset[str], spec: str
) -> Identified:
    names = set(shapes) - buffers
    tables = [given] if given else [n for n in layout_names() if not refusal(n)]
    for name in tables:
        table = layout(name, config)
        held = _held(table, config, names)
        written = set(table.written(set(catalog.shapes(config, sorted(held))), held))
        written |= set(table.generated)
        if written - buffers == names:
            return Identified(canonical(name), "given" if given else "by its names",
                              frozenset(names), held)  # fmt: skip
        if given:
            raise CheckpointError(
                f"--model {spec!r}: the table's names do not fit the model: the model has "
                f"{sorted(names - written)[:8]}, which the table does not name; the table names "
                f"{sorted(written - names - buffers)[:8]}, which the model lacks. Check the table "
                "(`bertconv infer` writes one for your model)."
            )
    found = _by_names(shapes, None)
    if found.layout is not None:  # BERT-pytorch's names: a model bertconv knows is not BERT
        raise NotBertError(
            f"--model {spec!r}: is in the {found.layout!r} layout.\n{refusal(found.layout)}"
        )
    raise UsageError(
        f"--model {spec!r}: no shipped layout names its tensors; give its table with --layout "
        "(`bertconv infer` writes one)"
    )


def _held(table: Table, config: BertConfig, names: set[str]) -> frozenset[str]:
    """The groups of `table` whose every name the model has: the heads, then the prefixed
    groups (transformers' encoder and pooler), named as they are beside those heads."""
    encoder = set(catalog.shapes(config, []))

    def holds(group: str, beside=frozenset()) -> bool:
        found = table.written(set(catalog.shapes(config, [group])) - encoder, beside)
        return bool(found) and found.keys() <= names

    heads = {g for g in table.groups - table.prefixed if holds(g)}
    return frozenset(heads | {g for g in table.groups & table.prefixed if holds(g, heads)})


def class_for(groups: set[str] | frozenset[str], model_type: str = "bert") -> str:
    """The class a set of groups makes: catalog.class_for, the one rule, on their tensors, the
    class's groups those (a pooler aside)."""
    heads = set().union(*(catalog.group_tensors(model_type)[g] for g in groups))

    def exactly(name: str) -> bool:
        return set(catalog.classes(model_type)[name]) - {"pooler"} == set(groups) - {"pooler"}

    found = catalog.class_for(heads, model_type, exactly)
    if found is None:
        raise ValueError(f"no class holds the groups {sorted(groups)}")
    return found


# Tables expanded for a config -------------------------------------------------------------------


def layout(name: str, config: BertConfig) -> Table:
    """The table called `name` (or in the file `name`), expanded for `config`'s number of
    layers."""
    name = canonical(name)
    return _layout(name, _source(name), config_key(config))


@cache
def _layout(name: str, source, config_key: tuple) -> Table:
    where = TABLES / f"{source}.toml" if isinstance(source, str) else source[0]
    config = BertConfig(**dict(config_key))
    return expand(_read(source, config.model_type), name, config, str(where))


def expand(raw: dict, name: str, config: BertConfig, where: str | None = None) -> Table:
    """A table already read (and checked), expanded for `config`'s number of layers (`where`:
    its file, for messages)."""
    where = where or name
    n = config.num_hidden_layers
    rows = {}
    for group, section in sections(raw):
        for pattern, spec in section.items():
            for i, expanded in enumerate(catalog.expand(pattern, n)):
                if expanded in rows:
                    raise TableError(
                        f"{where}: row {pattern!r} names {expanded!r}, as another does"
                    )
                rows[expanded] = _row(expanded, spec, i, group)
    aliases = _expand_pairs(raw.get("aliases", {}), n)
    tied = _expand_pairs(raw.get("tied", {}), n)
    ignored = {e for pattern in raw.get("ignored", []) for e in catalog.expand(pattern, n)}
    prefix, prefixed = raw.get("prefix", ""), frozenset(raw.get("prefixed", []))
    if prefix:  # the prefixed groups' names are read with the prefix too
        group_of = {r.name: r.group for r in rows.values()}
        under = {r for r, g in group_of.items() if g in prefixed}
        aliases |= {prefix + a: r for a, r in aliases.items() if r in under}
        aliases |= {prefix + r: r for r in under}
        ignored |= {prefix + i for i in ignored}
    generated = _generated(raw.get("generated", {}), config, where, set(rows))
    requires = frozenset(raw.get("requires", []))
    extra = {
        "format": raw.get("format", "safetensors"),
        "slots": tuple(raw.get("slots", [])),
        "write_tied": raw.get("write_tied", True),
        "model_type": config.model_type,
    }
    return Table(
        name,
        raw["description"],
        rows,
        generated,
        aliases,
        tied,
        frozenset(ignored),
        prefix,
        prefixed,
        requires,
        **extra,
    )


def _generated(raw: dict, config: BertConfig, table: str, rows: set) -> dict[str, Generated]:
    """The buffers a table makes, for a config: each 0..n-1 in a shape of n elements, all of them
    together small (a hostile table could ask for gigabytes)."""
    out = {}
    for key, spec in raw.items():
        arange = catalog.dim(spec["arange"], config)
        shape = tuple(catalog.dim(d, config) for d in spec["shape"])
        if math.prod(shape) != arange:
            raise TableError(
                f"{table}: [generated] {key!r} is arange({arange}) in a shape {shape} of "
                f"{math.prod(shape)} elements: they must agree"
            )
        if key in rows:
            raise TableError(f"{table}: [generated] {key!r} is a row's name too")
        out[key] = Generated(key, arange, shape)
    if sum(g.arange for g in out.values()) > MAX_GENERATED_ELEMENTS:
        raise TableError(
            f"{table}: its [generated] buffers hold more than {MAX_GENERATED_ELEMENTS} elements "
            "together; a model's position ids are far fewer"
        )
    return out


def _row(name: str, spec, index: int, group: str) -> Row:
    if isinstance(spec, list):  # a shape: a layout recognised only holds no official tensor
        return Row(name, (), "rename", group)
    targets, transform, _ = _row_targets(spec)
    return Row(name, tuple(t.replace("{layer}", str(index)) for t in targets), transform, group)


def _expand_pairs(pairs: dict[str, str], num_layers: int) -> dict[str, str]:
    """Expand `{layer}` on both sides of a name = name table, row by row."""
    out = {}
    for key, value in pairs.items():
        out.update(
            zip(catalog.expand(key, num_layers), catalog.expand(value, num_layers), strict=True)
        )
    return out


# Until bertconv.yours and verify take them from the catalog itself.
def architecture(model_type: str = "bert") -> dict:
    return catalog.architecture(model_type)


def anchors(model_type: str = "bert") -> dict[str, list[str]]:
    return catalog.anchors(model_type)


def outputs(model_class: str, model_type: str = "bert") -> list[tuple[str, str, bool]]:
    return catalog.outputs(model_class, model_type)


def classes(model_type: str = "bert") -> dict[str, list[str]]:
    return catalog.classes(model_type)


def group_names(model_type: str = "bert") -> list[str]:
    return catalog.group_names(model_type)


def has_pooler(class_name: str, model_type: str = "bert") -> bool:
    return catalog.has_pooler(class_name, model_type)


shapes = catalog.shapes
relative_names = catalog.relative_names
