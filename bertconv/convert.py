"""Conversion between layouts as a pure function on state dicts: no files, no printing.

    convert(state_dict, config, "transformers", "bertconv") -> Conversion

Every tensor is read through the source layout's table into the official names. The groups of
tensors the file holds (the pooler, the heads) say which BERT class it is, config.json's
`architectures` breaking ties; every tensor is checked against the shape config.json implies for
that class. Then the groups the target layout has a place for (or those asked for) are written
out through its table. Problems are collected and raised once, all of them, naming each tensor.
Tensors are storage references (storage.py): converting moves names and byte ranges, not data,
and needs no torch.
"""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from . import storage
from .config import BertConfig
from .errors import CheckpointError, UsageError, listed
from .mapping import Layout, class_for, class_of, identify, layout
from .tables import OFFICIAL, refusal
from .transforms import REGISTRY

FLOATS = ("F32", "F16", "BF16", "F64")  # what a parameter may be stored as


@dataclass(frozen=True)
class Selection:
    """Which of a file's groups a conversion writes: those the target layout has a place for
    (`fitting`, the default), every one (`every`: or fail), none but the pooler (`encoder`), or
    exactly `groups`."""

    kind: str = "fitting"
    groups: frozenset[str] = frozenset()

    @classmethod
    def of(cls, heads: "Selection | bool | Iterable[str] | None") -> "Selection":
        """The API's spelling (load(heads=...)): None, True, False, or the groups by name."""
        if isinstance(heads, Selection):
            return heads
        if heads is None or isinstance(heads, bool):
            return cls({None: "fitting", True: "every", False: "encoder"}[heads])
        return cls("exactly", frozenset({heads} if isinstance(heads, str) else heads))

    def recorded(self) -> str:
        """How it is recorded in a file's metadata: "", "all", "none", or the groups."""
        named = {"fitting": "", "every": "all", "encoder": "none"}
        return named.get(self.kind) or ",".join(sorted(self.groups))


FITTING = Selection()


@dataclass
class Problems:
    """Everything wrong with a checkpoint, gathered before raising."""

    source: str
    layout: str
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    shapes: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the names alone do not say

    def raise_if_any(self, shapes: dict | None = None) -> None:
        """Raise naming every problem; where there are some, a file in a layout recognised only
        (BERT-pytorch's, `shapes` its tensors') is first said to be in it, with why: looked for
        only then, so that a file that reads never pays for it."""
        kinds = [
            ("missing tensors", self.missing),
            ("unexpected tensors, which no table maps", self.unexpected),
            ("wrong shapes", self.shapes),
            ("wrong dtypes", self.dtypes),
            ("wrong values", self.values),
        ]
        if not any(names for _, names in kinds):
            return
        found = identify(shapes, None) if shapes else None
        if found is not None and found.layout is not None:
            check_convertible(found.layout, OFFICIAL, self.source)
        lines = [f"{self.source}: its tensors do not fit the {self.layout!r} layout."]
        for label, names in kinds:
            if names:
                lines.append(f"  {label} ({len(names)}): {listed(names)}")
        lines += self.notes
        lines.append(self.advice())
        raise CheckpointError("\n".join(lines))

    def advice(self) -> str:
        if self.dtypes and not (self.missing or self.unexpected or self.shapes):
            return (
                "What to do: every parameter must be stored in one floating-point dtype; cast "
                "the checkpoint to one (float32, say) and save it again."
            )
        if self.shapes and not (self.missing or self.unexpected):
            return "What to do: check that config.json is the one that came with these weights."
        if self.layout != OFFICIAL:
            return (
                f"What to do: check that the file was written in the {self.layout!r} layout "
                "(`--from`), and that config.json matches it."
            )
        return (
            "What to do: if the file is in another layout, name it with --from (`bertconv "
            "layouts` lists them). bertconv reads BERT's encoder, its pooler and the heads of "
            "transformers' BERT classes; a file with other tensors (another architecture) or "
            "fewer layers than config.json says cannot be converted as it is."
        )


@dataclass
class Reading:
    """A state dict read into the official names, and the class its groups make."""

    official: dict[str, storage.Tensor]
    model_class: str
    groups: frozenset[str]  # the class's groups, and the pooler where the file has one
    named: dict[str, str]  # official name -> the name the file gives it
    skipped: list[str]  # names the table ignores: buffers, a step count
    slots: int  # tensors that are an optimizer's slots of a weight (adam_m, adam_v)
    table: Layout  # the layout it was read through, which holds the architecture
    source: str  # what it was read from, for messages


@dataclass
class Conversion:
    state_dict: dict[str, storage.Tensor]
    model_class: str  # the class of what was written (transformers' name for it)
    groups: frozenset[str]  # the groups written
    dropped: dict[str, str]  # the groups of the source left out, each with why
    skipped: list[str]  # the source's names its table ignores: buffers, a step count
    slots: int  # the source's tensors that are an optimizer's slots (adam_m, adam_v)
    table: Layout  # the layout written, which holds the architecture


def read_official(
    state_dict: dict[str, storage.Tensor],
    config: BertConfig,
    src: Layout,
    source: str,
    hint: object = None,
) -> Reading:
    """Read a state dict in layout `src` into the official names, identify its class (`hint`:
    config.json's `architectures`), and check everything."""
    problems = Problems(source, src.name)
    official, named, tied, skipped, slots = {}, {}, {}, [], 0
    for name, tensor in state_dict.items():
        place = src.place(name)
        if place == "ignored":
            skipped.append(name)
        elif place == "slot":
            slots += 1
        elif place == "tied":
            tied[name] = tensor
        elif place == "generated":
            _check_generated(name, tensor, src, problems)
        elif place in ("row", "alias"):
            row = src.row_of(name)
            for official_name, part in zip(row.official, official_parts(row, tensor), strict=True):
                if official_name in official and not storage.equal(official[official_name], part):
                    problems.values.append(f"{name} differs from the other copy of {official_name}")
                official[official_name] = part
                named[official_name] = name
        else:
            problems.unexpected.append(name)
    _check_positions(official, config, src, named, problems)
    model_class, groups = _identify(official, config, src, _hints(hint), problems)
    _check_tied(tied, official, src, problems)
    _check_shapes(official, config, groups, named, src, problems)
    _check_dtypes(official, named, problems)
    problems.raise_if_any({name: tuple(t.shape) for name, t in state_dict.items()})
    return Reading(official, model_class, groups, named, skipped, slots, src, source)


def _check_positions(
    official: dict, config: BertConfig, src: Layout, named: dict, problems: Problems
) -> None:
    """Distance tables come with relative position embeddings, and only with them: under an
    absolute config.json they would be left unread, and without them a relative model cannot
    run. (Missing ones are named with the encoder's other tensors.)"""
    distances = src.architecture.relative_names(config)
    kind = f"config.json's position_embedding_type is {config.position_embedding_type!r}"
    if config.relative and not official.keys() & distances:
        problems.notes.append(
            f"  {kind}, whose attention reads each layer's distance_embedding, and the file has "
            "none: the config is not this file's, or names the wrong kind of positions."
        )
    stray = [] if config.relative else sorted(official.keys() & distances)
    if stray:
        problems.unexpected += [named[name] for name in stray]
        problems.notes.append(
            f"  {kind}, but the file holds relative position embeddings (distance_embedding): "
            "the config is not this file's, or names the wrong kind of positions."
        )
        for name in stray:
            official.pop(name)


def _hints(hint: object) -> list[str]:
    return [h for h in hint if isinstance(h, str)] if isinstance(hint, list) else []


def _identify(
    official: dict, config: BertConfig, src: Layout, hints: list[str], problems: Problems
) -> tuple[str, frozenset[str]]:
    """The class the file's groups make (mapping.class_of). A group comes whole: one only
    partly there is named, tensor by tensor."""
    found = class_of({n: tuple(t.shape) for n, t in official.items()}, config, hints)
    problems.missing += [_layout_name(n, src) for n in found.partial]
    if found.model_class is None:
        if not found.partial:
            problems.unexpected.append(
                f"(the heads {', '.join(found.held)} together make no BERT class transformers "
                "writes)"
            )
        return src.architecture.base_class, frozenset()
    return found.model_class, found.groups


def select_groups(
    have: frozenset[str], dst: Layout, selection: Selection, source: str
) -> tuple[frozenset[str], dict[str, str]]:
    """Which of the file's groups to write, and why each other one is left out: fitting (or
    encoder) keeps those the target layout has a place for (only the pooler); every or exactly
    keep them all, or the groups named, or fail."""
    if selection.kind in ("fitting", "encoder"):
        wanted = have if selection.kind == "fitting" else have & {"pooler"}
        kept = wanted & dst.groups
    else:
        every = selection.kind == "every"
        kept = have if every else frozenset(_asked(selection.groups, have, source, dst))
        lacking = sorted(kept - dst.groups)
        if lacking:
            raise CheckpointError(
                f"{source}: the {dst.name!r} layout has no place for {', '.join(lacking)}"
            )
        wanted = kept
    for group in sorted(dst.requires - kept):
        why = "keep it" if group in have else f"{source} has none"
        raise CheckpointError(
            f"{source}: the {dst.name!r} layout's model cannot do without the {group} ({why})"
        )
    place = f"the {dst.name!r} layout has no place for it"
    dropped = {g: "as asked" if g not in wanted else place for g in sorted(have - kept)}
    return kept, dropped


def _asked(asked: frozenset[str], have: frozenset[str], source: str, dst: Layout) -> frozenset[str]:
    known = dst.architecture.group_names
    unknown = sorted(asked - set(known))
    if unknown:
        raise UsageError(f"no group {unknown}; the groups are {', '.join(known)}")
    absent = sorted(asked - have)
    if absent:
        held = ", ".join(sorted(have)) or "none"
        raise CheckpointError(f"{source}: has no {absent} (its groups: {held})")
    return asked


def write_layout(
    official: dict[str, storage.Tensor], config: BertConfig, dst: Layout, groups: frozenset[str]
) -> dict[str, storage.Tensor]:
    """The official tensors of the encoder and `groups`, under layout `dst`'s names. The
    prefixed groups (transformers' encoder and pooler) are written under the prefix when a head
    is there too, as transformers' task classes write them."""
    wanted = set(dst.official_shapes(config, sorted(groups))) & set(official)
    packed: dict[str, storage.Tensor] = {}
    out = {}
    for written, name in dst.written(wanted, groups).items():
        if name not in packed:
            row = dst.rows[name]
            packed[name] = _pack(row, [official[o] for o in row.official])
        out[written] = packed[name]
    for name, gen in dst.generated.items():
        out[name] = storage.arange(gen.arange, gen.shape)
    return out


def convert(
    state_dict: dict[str, storage.Tensor],
    config: BertConfig,
    from_layout: str = OFFICIAL,
    to_layout: str = "bertconv",
    heads: "Selection | bool | Iterable[str] | None" = FITTING,
    source: str = "state dict",
    hint: object = None,
) -> Conversion:
    """Convert between layouts, keeping the groups `heads` says (a Selection, or as
    Selection.of takes it: None, True, False, group names)."""
    selection = Selection.of(heads)
    check_convertible(from_layout, to_layout, source)
    src, dst = layout(from_layout, config), layout(to_layout, config)
    _check_room(config, dst, source)
    reading = read_official(state_dict, config, src, source, hint)
    return convert_reading(reading, config, dst, selection)


def _check_room(config: BertConfig, dst: Layout, source: str) -> None:
    if config.relative and not dst.relative:
        raise CheckpointError(
            f"{source}: the {dst.name!r} layout has no place for relative position embeddings "
            f"(position_embedding_type={config.position_embedding_type!r}): its model computes "
            "absolute positions only"
        )


def convert_reading(
    reading: Reading, config: BertConfig, dst: Layout, selection: Selection
) -> Conversion:
    """A checkpoint already read into the official names, written in layout `dst`."""
    source = reading.source
    check_convertible(None, dst.name, source)
    _check_room(config, dst, source)
    kept, dropped = select_groups(reading.groups, dst, selection, source)
    try:
        model_class = class_for(kept, dst.architecture)
    except ValueError:
        raise CheckpointError(
            f"{source}: the groups {sorted(kept)} make no BERT class; keep the pooler too"
        ) from None
    written = write_layout(reading.official, config, dst, kept)
    return Conversion(written, model_class, kept, dropped, reading.skipped, reading.slots, dst)


def check_convertible(from_layout: str | None, to_layout: str, source: str) -> None:
    """Refuse, saying why, a conversion from or into a layout that bertconv recognises but never
    converts: a file in one cannot be converted; a conversion into one cannot be asked for."""
    if from_layout is not None and refusal(from_layout):
        raise CheckpointError(
            f"{source}: is in the {from_layout!r} layout, which bertconv recognises but never "
            f"converts.\n{refusal(from_layout)}"
        )
    if refusal(to_layout):
        raise UsageError(
            f"{source}: bertconv never converts into the {to_layout!r} layout, which it "
            f"recognises only.\n{refusal(to_layout)}"
        )


def official_parts(row, tensor: storage.Tensor) -> list[storage.Tensor]:
    """The official tensors a row's tensor holds."""
    return REGISTRY[row.transform].to_official(tensor, list(row.shapes))


def _pack(row, tensors: list[storage.Tensor]) -> storage.Tensor:
    """A row's tensor, made of the official ones."""
    return REGISTRY[row.transform].to_layout(tensors)


def _check_generated(name: str, tensor: storage.Tensor, src: Layout, problems: Problems) -> None:
    gen = src.generated[name]
    if tensor.shape != gen.shape or not storage.equal(
        tensor, storage.arange(gen.arange, gen.shape)
    ):
        problems.values.append(f"{name} should be arange({gen.arange}) of shape {gen.shape}")


def _check_tied(tied: dict, official: dict, src: Layout, problems: Problems) -> None:
    for name, tensor in tied.items():
        target = src.rows[src.tied[name]].official[0]
        if target in official and not storage.equal(tensor, official[target]):
            problems.values.append(
                f"{name} differs from {target}, which it should be a tied copy of "
                "(bertconv's model ties them, so it cannot hold an untied decoder)"
            )


def _check_shapes(
    official: dict,
    config: BertConfig,
    groups: frozenset[str],
    named: dict[str, str],
    src: Layout,
    problems: Problems,
) -> None:
    """Every encoder tensor there, each tensor the shape config.json implies for its group."""
    encoder = src.official_shapes(config)
    for name, shape in src.official_shapes(config, sorted(groups)).items():
        if name not in official:
            if name in encoder:
                problems.missing.append(_layout_name(name, src))
        elif tuple(official[name].shape) != shape:
            problems.shapes.append(
                f"{named[name]} is {tuple(official[name].shape)}, config.json implies {shape}"
            )


def _check_dtypes(official: dict, named: dict[str, str], problems: Problems) -> None:
    """Parameters in one floating-point dtype: the model holds them so, and computes in it."""
    counts = Counter(t.dtype for t in official.values())
    usual = max(counts, key=lambda d: (d in FLOATS, counts[d])) if counts else None
    for name, tensor in official.items():
        if tensor.dtype not in FLOATS:
            problems.dtypes.append(
                f"{named[name]} is {tensor.dtype}; a parameter is floating point "
                f"({', '.join(FLOATS)})"
            )
        elif tensor.dtype != usual:
            problems.dtypes.append(f"{named[name]} is {tensor.dtype}, the other parameters {usual}")


def _layout_name(official_name: str, src: Layout) -> str:
    """The name the source layout uses for an official tensor, for messages."""
    return (src.names_for(official_name) or (official_name,))[0]
