"""The mapping tables under mappings/: reading them, expanding `{layer}`, and exact name lookups.

No tensors here (and no torch): `convert.py` applies what these tables say.

`transformers.toml` lists the official names with their shapes and every other name real official
checkpoints use for them (the `bert.` prefix, legacy gamma/beta, tied copies, ignored buffers). Each
other table maps one layout's names onto those official names, one row a tensor.
"""

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import NamedTuple

from . import mappings
from .config import SIZES, BertConfig
from .errors import TableError, UsageError

TABLES = Path(
    mappings.__file__
).parent  # mappings/, shipped inside the package as bertconv.mappings

OFFICIAL = "transformers"
TRANSFORMS = ("rename", "transpose", "concat")
TABLE_LIMIT = 1 << 20  # bytes: a table is a few KB
MAX_DIM = 1 << 24
LISTED = 12  # rows named in one error
# The keys of a table, each with the type of its value. REQUIRED must be there.
LAYOUT_KEYS = {"name": str, "description": str, "tensors": dict, "generated": dict}
OFFICIAL_KEYS = {
    "name": str,
    "description": str,
    "prefix": str,
    "unprefixed": str,
    "ignored": list,
    "tensors": dict,
    "heads": dict,
    "aliases": dict,
    "tied": dict,
}
LAYOUT_REQUIRED = {"name", "description", "tensors"}


class Row(NamedTuple):
    """A tensor of the layout and the official tensors it holds."""

    name: str
    official: tuple[str, ...]
    transform: str = "rename"  # transpose: stored (in, out); concat: official ones stacked on dim 0


class Generated(NamedTuple):
    """A tensor the layout's model expects that no official tensor holds (a constant buffer)."""

    name: str
    arange: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    """One table, expanded for a config: every name a file in this layout may hold."""

    name: str
    description: str
    rows: dict[str, Row]  # by the layout's name
    generated: dict[str, Generated] = field(default_factory=dict)
    # Other names read as the row they point to (official layout only: legacy gamma/beta, `bert.`).
    aliases: dict[str, str] = field(default_factory=dict)
    tied: dict[str, str] = field(default_factory=dict)  # read name -> the row whose copy it is
    ignored: frozenset[str] = frozenset()
    prefix: str = ""  # written on the encoder's tensors when the file has heads

    def has_heads(self, config: BertConfig) -> bool:
        heads = set(head_names(config))
        return any(o in heads for row in self.rows.values() for o in row.official)


def _table(name: str) -> dict:
    """A shipped table, by name. Names are looked up, never joined into a path."""
    if name not in layout_names():
        raise UsageError(
            f"no layout {name!r}; known layouts: {', '.join(layout_names())} "
            "(`bertconv layouts` describes them)"
        )
    return read_table(TABLES / f"{name}.toml")


@cache
def layout_names() -> list[str]:
    return sorted(f.stem for f in TABLES.glob("*.toml"))


def describe_layouts() -> list[tuple[str, str]]:
    return [(name, _table(name)["description"]) for name in layout_names()]


def read_table(path: Path) -> dict:
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
    problems = _schema_problems(table, path.stem == OFFICIAL)
    if problems:
        lines = [f"  {_line(text, key)}: {problem}" for key, problem in problems[:LISTED]]
        raise TableError(f"{path}: not a valid mapping table:\n" + "\n".join(lines))
    return table


def _line(text: str, key: str) -> str:
    """Where a row is written, for messages: `line N` (or the section, if the key is not found)."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith((f'"{key}"', f"{key} ", f"{key}=", f"[{key}]")):
            return f"line {number} ({key})"
    return key


def _schema_problems(table: dict, official: bool) -> list[tuple[str, str]]:
    """(row, problem) for each way `table` breaks the schema of its kind."""
    allowed = OFFICIAL_KEYS if official else LAYOUT_KEYS
    required = set(OFFICIAL_KEYS) if official else LAYOUT_REQUIRED
    problems = [(k, f"unknown key; one of {', '.join(allowed)}") for k in table if k not in allowed]
    for key, kind in allowed.items():
        if key in table and not isinstance(table[key], kind):
            problems.append((key, f"should be a {kind.__name__}"))
        elif key not in table and key in required:
            problems.append((key, "missing"))
    if problems:
        return problems
    if official:
        return _official_problems(table)
    return _row_problems(table["tensors"]) + _generated_problems(table.get("generated", {}))


def _official_problems(table: dict) -> list[tuple[str, str]]:
    problems = []
    for section in ("tensors", "heads"):
        for name, dims in table[section].items():
            if not isinstance(dims, list) or not all(_is_dim(d) for d in dims):
                problems.append((name, "a shape is a list of sizes or config.json size fields"))
    names = set(table["tensors"]) | set(table["heads"])
    for section in ("aliases", "tied"):
        for name, target in table[section].items():
            if not isinstance(target, str) or target not in names:
                problems.append((name, f"{target!r} is not an official tensor"))
            elif ("{layer}" in name) != ("{layer}" in target):
                problems.append((name, "{layer} must appear on both sides of a row, or neither"))
    if not all(isinstance(n, str) for n in table["ignored"]):
        problems.append(("ignored", "a list of tensor names"))
    return problems


def _row_problems(rows: dict) -> list[tuple[str, str]]:
    """Each row maps one of the layout's names onto official names: known ones, with `{layer}`
    on both sides or neither, through a known transform, each official name claimed once, and
    every encoder tensor claimed."""
    official = _official_table()
    known = set(official["tensors"]) | set(official["heads"])
    problems, claimed = [], {}
    for name, spec in rows.items():
        targets, problem = _row_targets(spec)
        for target in targets:
            if target not in known:
                problem = problem or f"{target!r} is not an official tensor"
            elif ("{layer}" in target) != ("{layer}" in name):
                problem = problem or "{layer} must appear on both sides of a row, or neither"
            elif target in claimed:
                problem = problem or f"{target!r} is claimed by {claimed[target]!r} too"
            claimed.setdefault(target, name)
        if problem:
            problems.append((name, problem))
    unclaimed = [n for n in official["tensors"] if n not in claimed]
    if unclaimed and not problems:
        problems.append(("tensors", "no row for the encoder tensors " + ", ".join(unclaimed[:5])))
    heads = [n for n in official["heads"] if n in claimed]
    if heads and len(heads) != len(official["heads"]) and not problems:
        problems.append(("tensors", "the pre-training heads come all or none"))
    return problems


def _row_targets(spec) -> tuple[list[str], str | None]:
    """The official names a row's value names, and what is wrong with its form, if anything."""
    if isinstance(spec, str):
        return [spec], None
    if isinstance(spec, dict) and len(spec) == 1:
        ((transform, target),) = spec.items()
        if transform not in TRANSFORMS:
            return [], f"unknown transform {transform!r}; one of {', '.join(TRANSFORMS)}"
        targets = [target] if isinstance(target, str) else target
        if (
            isinstance(targets, list)
            and all(isinstance(t, str) for t in targets)
            and (transform == "concat") == (len(targets) > 1)
        ):
            return targets, None
    return [], 'a row is "official name" or { transform = "official name" or [names] }'


def _generated_problems(generated: dict) -> list[tuple[str, str]]:
    problems = []
    for name, spec in generated.items():
        if (
            not isinstance(spec, dict)
            or set(spec) != {"arange", "shape"}
            or not _is_dim(spec["arange"])
            or not isinstance(spec["shape"], list)
            or not all(_is_dim(d) for d in spec["shape"])
        ):
            problems.append((name, "a generated buffer is { arange = SIZE, shape = [SIZES] }"))
    return problems


def _is_dim(value) -> bool:
    if isinstance(value, bool):
        return False
    return (isinstance(value, int) and 0 <= value <= MAX_DIM) or (
        isinstance(value, str) and value in SIZES
    )


def _expand(pattern: str, num_layers: int) -> list[str]:
    if "{layer}" not in pattern:
        return [pattern]
    return [pattern.replace("{layer}", str(i)) for i in range(num_layers)]


def _expand_pairs(table: dict[str, str], num_layers: int) -> dict[str, str]:
    """Expand `{layer}` on both sides of a name = name table, row by row."""
    out = {}
    for key, value in table.items():
        out.update(zip(_expand(key, num_layers), _expand(value, num_layers), strict=True))
    return out


def _dim(value: int | str, config: BertConfig) -> int:
    return value if isinstance(value, int) else getattr(config, value)


@cache
def _official_table() -> dict:
    return _table(OFFICIAL)


def official_shapes(config: BertConfig, heads: bool = True) -> dict[str, tuple[int, ...]]:
    """Every official tensor name, in order, with the shape config.json implies (not to be
    changed: it is shared between calls)."""
    return _official_shapes(_key(config), heads)


@cache
def _official_shapes(config_key: tuple, heads: bool) -> dict[str, tuple[int, ...]]:
    config = BertConfig(**dict(config_key))
    table = _official_table()
    sections = [table["tensors"], table["heads"]] if heads else [table["tensors"]]
    shapes = {}
    for section in sections:
        for pattern, dims in section.items():
            for name in _expand(pattern, config.num_hidden_layers):
                shapes[name] = tuple(_dim(d, config) for d in dims)
    return shapes


def head_names(config: BertConfig) -> list[str]:
    return [name for name in official_shapes(config) if name not in official_shapes(config, False)]


def _official_layout(config: BertConfig) -> Layout:
    table = _official_table()
    n = config.num_hidden_layers
    rows = {name: Row(name, (name,)) for name in official_shapes(config)}
    aliases = _expand_pairs(table["aliases"], n)
    tied = _expand_pairs(table["tied"], n)
    ignored = {name for pattern in table["ignored"] for name in _expand(pattern, n)}
    prefix, bare = table["prefix"], table["unprefixed"]

    def prefixed(names):
        return {prefix + name: names[name] for name in names if not name.startswith(bare)}

    aliases |= prefixed(aliases) | prefixed({name: name for name in rows})
    tied |= prefixed(tied)
    ignored |= {prefix + name for name in ignored}
    return Layout(
        OFFICIAL, table["description"], rows, {}, aliases, tied, frozenset(ignored), prefix
    )


def _row(name: str, spec: str | dict, num_layers: int, index: int) -> Row:
    if isinstance(spec, str):
        return Row(name, (spec.replace("{layer}", str(index)),))
    (transform, official), *rest = spec.items()
    if rest or transform not in TRANSFORMS:
        raise ValueError(f"row {name!r}: one of {TRANSFORMS} expected, got {spec!r}")
    official = [official] if isinstance(official, str) else official
    return Row(name, tuple(o.replace("{layer}", str(index)) for o in official), transform)


@cache
def _layout(name: str, config_key: tuple) -> Layout:
    config = BertConfig(**dict(config_key))
    if name == OFFICIAL:
        return _official_layout(config)
    table = _table(name)
    n = config.num_hidden_layers
    rows = {}
    for pattern, spec in table["tensors"].items():
        for i, expanded in enumerate(_expand(pattern, n)):
            rows[expanded] = _row(expanded, spec, n, i)
    generated = {
        key: Generated(
            key, _dim(spec["arange"], config), tuple(_dim(d, config) for d in spec["shape"])
        )
        for key, spec in table.get("generated", {}).items()
    }
    return Layout(name, table["description"], rows, generated)


def layout(name: str, config: BertConfig) -> Layout:
    """The table called `name`, expanded for `config`'s number of layers."""
    return _layout(name, _key(config))


def _key(config: BertConfig) -> tuple:
    """`config` as a key for the caches above (a dataclass is not hashable)."""
    return tuple(sorted(vars(config).items()))
