"""Conversion between layouts as a pure function on state dicts: no files, no printing.

    convert(state_dict, config, "transformers", "bertconv") -> Conversion

Every tensor is read through the source layout's table into the official names, checked against
the shapes config.json implies, then written out through the target layout's table. Problems are
collected, and raised once, all of them, naming each tensor. Tensors are storage references
(storage.py): converting moves names and byte ranges, not data, and needs no torch.
"""

from collections import Counter
from dataclasses import dataclass, field

from . import storage
from .config import BertConfig
from .errors import CheckpointError
from .mapping import OFFICIAL, Layout, head_names, layout, official_shapes

# How many names an error lists per kind of problem before it says "and N more".
LISTED = 12
FLOATS = ("F32", "F16", "BF16", "F64")  # what a parameter may be stored as


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

    def raise_if_any(self) -> None:
        if not (self.missing or self.unexpected or self.shapes or self.dtypes or self.values):
            return
        lines = [f"{self.source}: its tensors do not fit the {self.layout!r} layout."]
        for label, names in [
            ("missing tensors", self.missing),
            ("unexpected tensors, which no table maps", self.unexpected),
            ("wrong shapes", self.shapes),
            ("wrong dtypes", self.dtypes),
            ("wrong values", self.values),
        ]:
            if names:
                shown = ", ".join(names[:LISTED])
                more = f", and {len(names) - LISTED} more" if len(names) > LISTED else ""
                lines.append(f"  {label} ({len(names)}): {shown}{more}")
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
            "layouts` lists them). bertconv reads BERT's encoder and its pre-training heads; a "
            "file with other tensors (a task head, another architecture) or fewer layers than "
            "config.json says cannot be converted as it is."
        )


@dataclass
class Conversion:
    state_dict: dict[str, storage.Tensor]
    heads: bool  # the result holds the pre-training heads
    dropped_heads: list[str]  # official head tensors the target layout has no place for


def to_official(
    state_dict: dict[str, storage.Tensor], config: BertConfig, src: Layout, source: str
) -> dict[str, storage.Tensor]:
    """Read a state dict in layout `src` into the official names, checking everything."""
    problems = Problems(source, src.name)
    official: dict[str, storage.Tensor] = {}
    named: dict[str, str] = {}  # official name -> the name the file gives it, for messages
    tied = {}
    for name, tensor in state_dict.items():
        if name in src.ignored:
            continue
        if name in src.tied:
            tied[name] = tensor
        elif name in src.generated:
            _check_generated(name, tensor, src, problems)
        elif name in src.rows or name in src.aliases:
            row = src.rows[src.aliases.get(name, name)]
            for official_name, part in zip(row.official, _unpack(row, tensor, config), strict=True):
                if official_name in official and not storage.equal(official[official_name], part):
                    problems.values.append(f"{name} differs from the other copy of {official_name}")
                official[official_name] = part
                named[official_name] = name
        else:
            problems.unexpected.append(name)
    _check_tied(tied, official, src, problems)
    _check_complete(official, config, src, named, problems)
    _check_dtypes(official, named, problems)
    problems.raise_if_any()
    return official


def from_official(
    official: dict[str, storage.Tensor], config: BertConfig, dst: Layout
) -> dict[str, storage.Tensor]:
    """Write official tensors into layout `dst`'s names. Rows whose tensors are absent (the
    heads of a BertModel checkpoint) are left out."""
    heads = set(head_names(config))
    prefix = dst.prefix if heads & official.keys() else ""
    out = {}
    for name, row in dst.rows.items():
        if all(o in official for o in row.official):
            written = name if row.official[0] in heads else prefix + name
            out[written] = _pack(row, [official[o] for o in row.official])
    for name, gen in dst.generated.items():
        out[name] = storage.arange(gen.arange, gen.shape)
    return out


def convert(
    state_dict: dict[str, storage.Tensor],
    config: BertConfig,
    from_layout: str = OFFICIAL,
    to_layout: str = "bertconv",
    heads: bool | None = None,
    source: str = "state dict",
) -> Conversion:
    """Convert between layouts. heads: None keeps the pre-training heads where the target layout
    has a place for them, False leaves them out, True requires them."""
    src, dst = layout(from_layout, config), layout(to_layout, config)
    official = to_official(state_dict, config, src, source)
    head_tensors = [n for n in head_names(config) if n in official]
    if heads and not head_tensors:
        raise CheckpointError(
            f"{source}: has no pre-training heads (cls.*), and heads were asked for"
        )
    if heads and not dst.has_heads(config):
        raise CheckpointError(f"{source}: the {to_layout!r} layout has no pre-training heads")
    keep_heads = heads is not False and dst.has_heads(config)
    dropped = [] if keep_heads else head_tensors
    for name in dropped:
        del official[name]
    kept = bool(head_tensors) and not dropped
    return Conversion(from_official(official, config, dst), kept, dropped)


def _unpack(row, tensor: storage.Tensor, config: BertConfig) -> list[storage.Tensor]:
    if row.transform == "transpose":
        return [storage.transpose(tensor)]
    if row.transform == "concat":
        sizes = [official_shapes(config)[o][0] for o in row.official]
        if tensor.shape[0] == sum(sizes):
            return storage.split_rows(tensor, sizes)
        # Wrong size: hand it on whole, so the shape check names it.
        return [tensor] * len(sizes)
    return [tensor]


def _pack(row, tensors: list[storage.Tensor]) -> storage.Tensor:
    if row.transform == "transpose":
        return storage.transpose(tensors[0])
    if row.transform == "concat":
        return storage.join_rows(tensors)
    return tensors[0]


def _check_generated(name: str, tensor: storage.Tensor, src: Layout, problems: Problems) -> None:
    gen = src.generated[name]
    if tensor.shape != gen.shape or not storage.equal(
        tensor, storage.arange(gen.arange, gen.shape)
    ):
        problems.values.append(f"{name} should be arange({gen.arange}) of shape {gen.shape}")


def _check_tied(tied: dict, official: dict, src: Layout, problems: Problems) -> None:
    for name, tensor in tied.items():
        target = src.tied[name]
        if target in official and not storage.equal(tensor, official[target]):
            problems.values.append(
                f"{name} differs from {target}, which it should be a tied copy of "
                "(bertconv's model ties them, so it cannot hold an untied decoder)"
            )


def _check_complete(
    official: dict, config: BertConfig, src: Layout, named: dict[str, str], problems: Problems
) -> None:
    """Every encoder tensor, the heads all or none, each the shape config.json implies."""
    wanted = official_shapes(config)
    heads = [n for n in head_names(config) if n in wanted]
    has_heads = any(n in official for n in heads)
    for name, shape in wanted.items():
        if name not in official:
            if name not in heads or has_heads:
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
    for name, row in src.rows.items():
        if official_name in row.official:
            return name
    return official_name
