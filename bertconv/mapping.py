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
from .config import BertConfig
from .errors import UsageError

TABLES = Path(
    mappings.__file__
).parent  # mappings/, shipped inside the package as bertconv.mappings

OFFICIAL = "transformers"
TRANSFORMS = ("rename", "transpose", "concat")


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
    try:
        text = (TABLES / f"{name}.toml").read_text()
    except FileNotFoundError:
        raise UsageError(
            f"no layout {name!r}; known layouts: {', '.join(layout_names())} "
            "(`bertconv layouts` describes them)"
        ) from None
    return tomllib.loads(text)


def layout_names() -> list[str]:
    return sorted(f.stem for f in TABLES.glob("*.toml"))


def describe_layouts() -> list[tuple[str, str]]:
    return [(name, _table(name)["description"]) for name in layout_names()]


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
