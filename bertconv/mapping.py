"""A layout's table expanded for a config, and what it says of a file or a model: the one
place that decides which layout tensors are in (`identify`), which class a set of groups makes
(`class_for`), the names a layout gives an official tensor and back (`Layout`). The tables' files
are tables.py's; what the architecture is, catalog.py's. No tensors here (and no torch):
`convert.py` applies what these tables say.
"""

import math
from dataclasses import dataclass, replace
from functools import cache, cached_property
from pathlib import Path
from typing import NamedTuple

from . import catalog, tables
from .catalog import ENCODER, RELATIVE, Architecture, config_key, sections
from .config import BertConfig
from .errors import (
    CheckpointError,
    NotBertError,
    TableError,
    UnnamedTable,
    UsageError,
    listed,
    said,
)
from .tables import (
    BERT_HOLDING,
    MAX_GENERATED_ELEMENTS,
    OFFICIAL,
    Holding,
    canonical,
    layout_for_format,
    layout_names,
    read,
    read_off,
    recorded_name,
    refusal,
    row_targets,
    source_of,
)


class Row(NamedTuple):
    """A tensor of the layout, the official tensors it holds, and the group it belongs to."""

    name: str
    official: tuple[str, ...]
    transform: str = "rename"  # a name in transforms.REGISTRY
    group: str = ENCODER
    shapes: tuple[tuple[int, ...], ...] = ()  # each official tensor's, as config.json implies


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
class Layout:
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
    architecture: Architecture  # whose official tensors its rows name
    format: str = "safetensors"  # the files its checkpoints are
    write_tied: bool = True  # transformers' classes tie them themselves on loading
    slots: tuple[str, ...] = ()  # a row's name + one of these: an optimizer's slot, skipped
    own: frozenset[str] = frozenset()  # a model's own tensors, from no checkpoint
    # a model's tensors of sentence-transformers' modules: {its name: "Dense.linear.weight"}
    sentence: tuple[tuple[str, str], ...] = ()
    holding: Holding = BERT_HOLDING  # how a from-scratch model holds BERT's family (family.py)
    # names its rows give at a layer the architecture has none of (ModernBERT's first attention
    # norm): a model holding one computes something the checkpoint does not
    lacking: frozenset[str] = frozenset()

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

    def model_names(self, official: str) -> tuple[str, ...]:
        """Every name a model in this layout may hold an official tensor under: names_for's, and,
        for a prefixed group's, those under the prefix (a task class holds its encoder there)."""
        names = self.names_for(official)
        in_prefixed = [n for n in names if n in self.rows and self.rows[n].group in self.prefixed]
        return names + tuple(self.prefix + n for n in in_prefixed if self.prefix)

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
        if self.write_tied:  # a user's model holds its tied copies by name
            out |= {copy: row for copy, row in self.tied.items() if row in out.values()}
        return out

    def row_of(self, name: str) -> Row:
        """The row a name placed as a row or an alias is read through."""
        return self.rows[self.aliases.get(name, name)]

    @property
    def model_type(self) -> str:
        return self.architecture.model_type

    def official_shapes(self, config: BertConfig, groups=()) -> dict[str, tuple[int, ...]]:
        """The official tensors of the encoder and `groups`, with config's shapes."""
        return self.architecture.shapes(config, groups)

    @property
    def relative(self) -> bool:
        """Has this layout a place for relative position embeddings?"""
        return any(row.group == RELATIVE for row in self.rows.values())

    @property
    def groups(self) -> frozenset[str]:
        """The official groups this layout has a place for: those whose every tensor has a row."""
        mapped = {o for row in self.rows.values() for o in row.official}
        found = self.architecture.group_tensors.items()
        return frozenset(g for g, names in found if names <= mapped)


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
    shipped = layout_names(config.model_type if config is not None else "bert")
    if recorded is not None and not (guess and recorded not in shipped):
        if recorded not in shipped:
            raise _unnamed(source, recorded, shipped)
        return _placing(recorded, "recorded in its metadata", shapes, config)
    return _by_names(shapes, config, guess)


def _unnamed(source: str, recorded: str, shipped: list[str]) -> CheckpointError:
    """A file whose metadata names a layout that is not at hand: a table file of the user's
    (`file:NAME.toml`, not beside it as it was written), or none bertconv knows."""
    name = recorded_name(recorded)
    if name is not None:
        beside = Path(source).parent / name
        why = (
            f"{beside} is not that table: changed since, or another"
            if beside.exists()
            else f"no copy of it beside {Path(source).name}, as bertconv writes one"
        )
        return UnnamedTable(source, name, why)
    return CheckpointError(
        f"{source}: its metadata says it is in layout {recorded!r}, which is not one bertconv "
        f"ships for it ({', '.join(shipped)}). Name the layout it is in with --from (a shipped "
        "name, or the path to the table file it was written with)."
    )


def _placing(name: str, how: str, shapes: dict, config: BertConfig | None) -> Identified:
    """Layout `name`, and the names of `shapes` it places (a recognised-only layout's rows alone
    where there is no config to expand it for)."""
    if config is None:
        return Identified(name, how, frozenset(read_off(name, shapes)[0]))
    table = layout(name, config)
    return Identified(name, how, frozenset(n for n in shapes if table.place(n)))


def _by_names(shapes: dict, config: BertConfig | None, guess: bool) -> Identified:
    """A layout recognised only that names over half of a file's tensors; else (`guess`) the
    shipped layout placing the most (the official one where none places more), or the official
    layout, where a config says what it holds."""
    refused = recognised_only(shapes)
    if refused is not None:
        return _placing(refused, "by its names", shapes, config)
    if config is None:
        return Identified(None, "no shipped table names its tensors")
    if not guess:
        return _official(shapes, config)
    names = sorted(layout_names(config.model_type), key=lambda n: n != OFFICIAL)
    found = [_placing(n, "by its names", shapes, config) for n in names if not refusal(n)]
    best = max(found, key=lambda f: len(f.placed))  # the first of equals: official first
    return best if best.placed else Identified(None, "no shipped table names its tensors")


def _official(shapes: dict, config: BertConfig) -> Identified:
    """The official layout, or another the type's files come in as they come in the official
    one (its table says `official_too`: NomicBERT's classes' names, which transformers reads
    too) where that one places every tensor of the file and the official one does not."""
    kind = config.model_type
    others = [n for n in layout_names(kind) if tables.read(n, kind).get("official_too")]
    if others and len(_placing(OFFICIAL, "", shapes, config).placed) < len(shapes):
        for name in others:
            found = _placing(name, "by its names", shapes, config)
            if len(found.placed) == len(shapes):
                return found
    return Identified(OFFICIAL, "the official layout: no other is recorded or named")


def _identify_model(
    shapes: dict, config: BertConfig, given: str | None, buffers: frozenset[str], spec: str
) -> Identified:
    names = set(shapes) - buffers
    tables = [given] if given else [n for n in layout_names(config.model_type) if not refusal(n)]
    for name in tables:
        table = holding_copies(layout(name, config), names)
        held = _held(table, config, names)
        written = set(table.written(set(table.official_shapes(config, sorted(held))), held))
        written |= set(table.generated) | table.own | {n for n, _ in table.sentence}
        if written - buffers == names:
            return Identified(canonical(name), "given" if given else "by its names",
                              frozenset(names), held)  # fmt: skip
        extra = names - written
        why = _beyond_checkpoint(table, extra)
        if why and (given or (written - buffers < names and _explained(table, extra))):
            # every other name fits (a shipped layout's too): what the port adds, named
            raise CheckpointError(f"{said(spec)}: holds what the checkpoint has none of: {why}")
        if given:
            raise CheckpointError(
                f"{said(spec)}: the table's names do not fit the model: the model has "
                f"{listed(sorted(names - written)) or 'none'}, which the table does not name; the "
                f"table names {listed(sorted(written - names - buffers)) or 'none'}, which the "
                "model lacks. Check the table (`bertconv infer` writes one for your model)."
            )
    refused = recognised_only(shapes)
    if refused is not None:  # BERT-pytorch's names: a model bertconv knows is not BERT
        raise NotBertError(f"{said(spec)}: is in the {refused!r} layout.\n{refusal(refused)}")
    raise UsageError(
        f"{said(spec)}: no shipped layout names its tensors; give its table with --layout "
        "(`bertconv infer` writes one)"
    )


def _explained(table: Layout, extra: set[str]) -> bool:
    """Are all of `extra` tensors a port adds where the checkpoint has none (_beyond_checkpoint)?"""
    return all(_beyond_checkpoint(table, {name}) for name in extra)


def _beyond_checkpoint(table: Layout, extra: set[str]) -> str:
    """Why a model's tensors no row names are ones a port adds where the checkpoint has none:
    a bias beside a projection whose official weight has none (ModernBERT's, NomicBERT's), a
    tensor at a layer the architecture has none of (ModernBERT's first attention norm)."""
    kind = table.architecture.model_type
    mapped = {o for row in table.rows.values() for o in row.official}

    def unbiased(name: str) -> bool:
        head, _, last = name.rpartition(".")
        row = table.rows.get(f"{head}.weight")
        biases = [o.removesuffix(".weight") + ".bias" for o in row.official] if row else []
        return last == "bias" and bool(biases) and not any(b in mapped for b in biases)

    biases = [n for n in sorted(extra) if unbiased(n)]
    layers = sorted(extra & table.lacking)
    said = []
    if biases:
        said.append(
            f"{listed(biases)}: biases of projections that have none in the {kind} checkpoint "
            "(bias=False): added, they move every output"
        )
    if layers:
        said.append(
            f"{listed(layers)}: at the first layer, which has no such tensor in {kind} (no norm "
            "before its attention: the embeddings' norm is it): a norm there norms the "
            "embeddings twice"
        )
    return "; ".join(said)


def holding_copies(table: Layout, names) -> Layout:
    """`table` for a model whose tensors are `names`: its tied copies written where the model
    holds them by name (a decoder tied to the word embeddings), though files leave them out,
    and so the other names of a row the model holds beside it (RoBERTa's `lm_head.decoder.bias`,
    its `lm_head.bias` too)."""
    beside = {a: r for a, r in table.aliases.items() if a in names and r in names}
    if not beside and (table.write_tied or not set(table.tied) & set(names)):
        return table
    return replace(table, write_tied=True, tied=table.tied | beside)


def _held(table: Layout, config: BertConfig, names: set[str]) -> frozenset[str]:
    """The groups of `table` whose every name the model has: the heads, then the prefixed
    groups (transformers' encoder and pooler), named as they are beside those heads."""
    encoder = set(table.official_shapes(config))

    def holds(group: str, beside=frozenset()) -> bool:
        found = table.written(set(table.official_shapes(config, [group])) - encoder, beside)
        return bool(found) and found.keys() <= names

    heads = {g for g in table.groups - table.prefixed if holds(g)}
    return frozenset(heads | {g for g in table.groups & table.prefixed if holds(g, heads)})


def other_labels(table: Layout, config: BertConfig, groups, shapes: dict, spec: str) -> None:
    """Refuse a model whose head of labels (a classifier's, a tagger's), among the checkpoint's
    `groups`, has another label count than the checkpoint's: read off its bias, `shapes` being
    the model's. A count fixed in its code (`nn.Linear(hidden, 2)`) holds that many only."""
    dims = table.architecture.tensors
    for group in sorted(groups):
        for official in (n for n, d in dims.get(group, {}).items() if d == ("num_labels",)):
            for name in (n for n in table.names_for(official) if n in shapes):
                if shapes[name] != (config.num_labels,):
                    raise CheckpointError(
                        f"{said(spec)}: its {group} head has {shapes[name][0]} labels "
                        f"({name} is {shapes[name]}), the checkpoint's {config.num_labels}: "
                        f"verify it on a checkpoint of {shapes[name][0]} labels, or have its "
                        "code take the count from config.num_labels"
                    )


def recognised_only(shapes: dict[str, tuple[int, ...]]) -> str | None:
    """The shipped layout, of those recognised but never converted, whose rows name most (over
    half) of a file's tensors, if there is one. `shapes`: the file's tensors' shapes, by name."""
    for name in layout_names():
        if refusal(name) and 2 * len(read_off(name, shapes)[0]) > len(shapes):
            return name
    return None


@dataclass(frozen=True)
class ClassFound:
    """The class a file's official tensors make, and how."""

    model_class: str | None  # None where they make none
    groups: frozenset[str]  # the class's groups, and the pooler where the file has one
    partial: tuple[str, ...]  # tensors missing from groups only partly there (a group is whole)
    held: tuple[str, ...]  # the groups wholly there


def class_of(shapes: dict[str, tuple[int, ...]], config: BertConfig, hints=()) -> ClassFound:
    """Which class a file's official tensors (`shapes`, by name) make: among the classes whose
    groups' tensors are all there, with nothing else but a pooler's (older task checkpoints
    carried one they did not read), the first whose shapes fit, config.json's `architectures`
    (`hints`) first; where none fits, the first (its shapes are then named)."""
    arch = catalog.of(config.model_type)
    encoder = set(arch.shapes(config))
    names = {g: set(arch.shapes(config, [g])) - encoder for g in arch.group_names}
    present = set(shapes)
    partial = tuple(sorted(n for g in names.values() if g & present for n in g - present))
    held = tuple(sorted(g for g, group in names.items() if group <= present))
    candidates = [] if partial else _candidates(present - encoder, arch)

    def fits(name: str) -> bool:
        wanted = arch.shapes(config, arch.groups_of(name))
        return all(shapes[n] == s for n, s in wanted.items() if n in shapes)

    fitting = [c for c in candidates if fits(c)]
    chosen = ([c for c in fitting if c in hints] or fitting or candidates or [None])[0]
    if chosen is None:
        return ClassFound(None, frozenset(), partial, held)
    pooler = (
        {"pooler"} if names["pooler"] and names["pooler"] <= present else set()
    )  # ModernBERT: none
    return ClassFound(chosen, frozenset(arch.groups_of(chosen)) | pooler, partial, held)


def class_for(groups: set[str] | frozenset[str], arch: Architecture) -> str:
    """The class a set of groups makes: the one rule on their tensors, the class's groups those
    (a pooler aside)."""
    heads = set().union(*(arch.group_tensors[g] for g in groups))
    for name in _candidates(heads, arch):
        if set(arch.groups_of(name)) - {"pooler"} == set(groups) - {"pooler"}:
            return name
    raise ValueError(f"no class holds the groups {sorted(groups)}")


def _candidates(heads: set[str], arch: Architecture) -> list[str]:
    """The one rule: the classes, in the catalog's order, whose groups' every tensor is among
    `heads` (official tensors outside the encoder), with nothing else but a pooler's."""
    found = arch.group_tensors
    out = []
    for name, spec in arch.classes.items():
        needed = set().union(*(found[g] for g in spec.groups))
        if needed <= heads and heads - needed <= found["pooler"]:
            out.append(name)
    return out


def forget() -> None:
    """Forget every table and catalog read (cached for the life of a process; a test that
    rewrites the shipped ones needs this)."""
    _layout.cache_clear()
    tables.forget()


# Tables expanded for a config -------------------------------------------------------------------


def layout(name: str, config: BertConfig) -> Layout:
    """The table called `name` (or in the file `name`), expanded for `config`'s number of
    layers."""
    name = canonical(name)
    return _layout(name, source_of(name), config_key(config))


@cache
def _layout(name: str, source, config_key: tuple) -> Layout:
    where = tables.TABLES / f"{source}.toml" if isinstance(source, str) else source[0]
    config = BertConfig(**dict(config_key))
    return expand(read(source, config.model_type), name, config, str(where))


def expand(raw: dict, name: str, config: BertConfig, where: str | None = None) -> Layout:
    """A table already read (and checked), expanded for `config`'s number of layers (`where`:
    its file, for messages)."""
    where = where or name
    n = config.num_hidden_layers
    arch = catalog.of(config.model_type)
    rows, lacking = {}, set()
    for group, section in sections(raw):
        for pattern, spec in section.items():
            targets = () if isinstance(spec, list) else row_targets(spec)[0]
            first = max((arch.lacks(t) for t in targets), default=0)
            if first:  # the layers before the first that has it
                lacking.update(catalog.expand(pattern, first))
            for i, expanded in enumerate(catalog.expand(pattern, n, first), start=first):
                if expanded in rows:
                    raise TableError(
                        f"{where}: row {pattern!r} names {expanded!r}, as another does"
                    )
                rows[expanded] = _row(expanded, spec, i, group, arch, config)
    aliases = _expand_pairs(raw.get("aliases", {}), n)
    tied = _expand_pairs(raw.get("tied", {}), n)
    ignored = {e for pattern in raw.get("ignored", []) for e in catalog.expand(pattern, n)}
    own = {e for pattern in raw.get("own", []) for e in catalog.expand(pattern, n)}
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
        "own": frozenset(own),
        "holding": Holding.of(raw),
        "sentence": tuple(raw.get("sentence", {}).items()),
        "lacking": frozenset(lacking),
    }
    return Layout(
        name,
        raw["description"],
        rows,
        generated,
        aliases,
        tied,
        frozenset(ignored | own | set(raw.get("sentence", {}))),  # read from no checkpoint
        prefix,
        prefixed,
        requires,
        arch,
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


def _row(name: str, spec, index: int, group: str, arch: Architecture, config) -> Row:
    if isinstance(spec, list):  # a shape: a layout recognised only holds no official tensor
        return Row(name, (), "rename", group)
    targets, transform, _ = row_targets(spec)
    shapes = tuple(tuple(catalog.dim(d, config) for d in arch.tensors[group][t]) for t in targets)
    official = tuple(t.replace("{layer}", str(index)) for t in targets)
    return Row(name, official, transform, group, shapes)


def _expand_pairs(pairs: dict[str, str], num_layers: int) -> dict[str, str]:
    """Expand `{layer}` on both sides of a name = name table, row by row."""
    out = {}
    for key, value in pairs.items():
        out.update(
            zip(catalog.expand(key, num_layers), catalog.expand(value, num_layers), strict=True)
        )
    return out
