"""A mapping table inferred for a from-scratch BERT: which of its tensors is which official one.

    bertconv infer PKG.MODULE:NAME [--config CONFIG] [--out TABLE]

The model is built on a small config whose sizes all differ (so that a shape says much) and run
once, traced (trace.py). How its forward uses each parameter says what the parameter is: the
weight and bias of one projection (`F.linear(x, W, b)`, `x @ W + b`: stored as it is or
transposed), the gamma and beta of one LayerNorm (`F.layer_norm`, or `g * (x - mean) / std + b`
written by hand), an embedding table (`F.embedding`, `W[ids]`, `W[:T]`), query, key and value
fused in one tensor; and in which order the forward uses them, and on what (every token, or one
per sequence). That settles pairs and roles that names cannot (`g1`/`b1`, `a_2`/`b_2`,
`proj_q`); name hints only break ties.

The first assignment is then checked by running the model with the weights of a random BERT
against bertconv's own (the class its heads make, which verify proves computes what
transformers' does, so that infer needs no transformers), part by part: the embeddings, the
layers, the pooler, the heads. Where a part differs, its alternatives (the query, key and value
in another order, the LayerNorms the other way round, ...) are tried until one agrees within the
float32 tolerance. A model no assignment makes compute BERT (a pre-LayerNorm block, a missing
part) is refused, naming where the closest assignment diverges.
"""

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from . import storage, usermodel
from .config import BertConfig
from .errors import NotBertError, UsageError
from .mapping import ENCODER, architecture, class_for, expand, layout, outputs, shapes
from .trace import Trace

# Sizes that all differ, so that a tensor's shape tells what it can be.
PROBE = dict(
    vocab_size=83,
    hidden_size=24,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=40,
    max_position_embeddings=29,
    type_vocab_size=2,
    num_labels=5,
)
TOLERANCE = 1e-5
UNUSED = 1 << 30  # the order of a unit the forward never uses
OUT_OF_ORDER = 6  # assignments run where none is in an order BERT's could be
PROBE_LENGTH = 20  # tokens in the probe's longest sequence: few, but no other size
MAX_TRIALS = 400  # candidate tables run before giving up
WEIGHT_WORDS = {"weight", "w", "gamma", "g", "scale", "kernel", "a"}
BIAS_WORDS = {"bias", "b", "beta"}
LINEAR_CALLS = {"linear", "matmul", "mm", "bmm", "__matmul__", "addmm", "einsum"}
NORM_CALLS = {"layer_norm"}
LOOKUP_CALLS = {"embedding", "__getitem__", "index_select", "take", "narrow"}
VIEWS = {"contiguous", "float", "to", "type", "clone", "detach", "__getitem__", "narrow",
         "unsqueeze", "squeeze", "expand", "expand_as", "double", "half", "bfloat16"}  # fmt: skip
FLIPS = {"T", "t", "mT", "H", "mH"}


def _roles() -> dict[str, tuple[str, str, set[str]]]:
    """BERT's units, from the architecture's catalog: role -> (official prefix, group, hints)."""
    units = architecture()["units"]
    return {r: (u["prefix"], u["group"], set(u["hints"])) for r, u in units.items()}


ROLES = _roles()
LAYER = ("query", "key", "value", "attention output", "attention norm", "intermediate", "output",
         "output norm")  # fmt: skip
EMBEDDINGS = ("word embeddings", "position embeddings", "token type embeddings")
NORMS = ("embeddings norm", "attention norm", "output norm", "mlm norm")
SINGLE = ("mlm bias",)  # a unit of one tensor: PREFIX itself
# Which part of the model each compared output belongs to, in the order they are computed.
PARTS = ("embeddings", "layers", "pooler", "heads")
# What people get wrong in each part, most often.
SUSPECTS = {
    "embeddings": "the embeddings summed otherwise, positions offset, or their LayerNorm's eps?",
    "layers": "a LayerNorm before each sublayer (pre-LN), another activation, or the attention "
    "scaled or masked otherwise?",
    "pooler": "the pooler's tanh missing or applied twice, or another token than the first?",
    "heads": "a head's activation or LayerNorm, or its decoder not tied to the word embeddings?",
}


@dataclass
class Unit:
    """Tensors the forward uses as one piece of BERT: a projection's weight and bias, a
    LayerNorm's gamma and beta, an embedding table. Names are layer 0's for a layer's unit."""

    weight: str
    shape: tuple[int, ...]
    bias: str | None = None
    kind: str = "other"  # linear, norm, embedding, other
    transposed: bool | None = None  # a projection stored (in, out); None: either, for all we know
    order: int = UNUSED  # the first call that uses it
    per_token: bool = True  # a projection applied to every token, or to one per sequence
    lookup: frozenset[str] = frozenset()  # an embedding: the inputs its indices come from
    fused: int = 1  # a projection of several (query, key and value): how many

    @property
    def names(self) -> list[str]:
        return [self.weight] + ([self.bias] if self.bias else [])


@dataclass
class Assignment:
    """Which unit is each of BERT's, and how."""

    units: dict[str, Unit]  # role -> unit
    transposed: dict[str, bool] = field(default_factory=dict)  # role -> stored (in, out)
    swapped: frozenset[str] = frozenset()  # norms whose two tensors are the other way round
    fused: tuple[str, ...] = ("query", "key", "value")  # the order a fused unit holds them
    tied: dict[str, str] = field(default_factory=dict)  # a copy's name -> the name it copies


@dataclass
class Inference:
    """What `bertconv infer` found: the table, and how well its assignment did."""

    text: str | None  # the table, as a TOML file; None where nothing computes BERT
    checked: dict[str, float]  # compared output -> max abs difference from BERT's
    trials: int
    reason: str | None = None  # why no table was found
    diagnosis: object = None  # diagnose.Diagnosis: where and why the closest assignment differs


def words(name: str) -> set[str]:
    """The words of a name: `attn.W_qkv` -> {attn, w, qkv}; `tkTypeEmb` -> {tk, type, emb}."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w and not w.isdigit()}


# Layers ------------------------------------------------------------------------------------------


def layer_pattern(shapes: dict[str, tuple], layers: int) -> dict[str, str]:
    """Each name with its layer index replaced by `{layer}` (names outside the layers as they
    are). The index is a number in a name that runs over 0..layers-1 (or 1..layers) where the
    rest of the name stays the same, and the tensors are alike (every layer's is the same
    shape; a list of three embeddings is not three layers): `blocks.1.mlp.0.weight`,
    `params.l1_wq`, `Wq.1`. `shapes`: each tensor's, by name."""
    seen: dict[str, dict[int, tuple]] = {}
    found: dict[str, list[str]] = {}
    for name, shape in shapes.items():
        for match in re.finditer(r"(?<![0-9])[0-9]+(?![0-9])", name):
            pattern = name[: match.start()] + "{layer}" + name[match.end() :]
            seen.setdefault(pattern, {})[int(match.group())] = tuple(shape)
            found.setdefault(name, []).append(pattern)
    runs = (set(range(layers)), _one(layers))

    def is_layers(pattern: str) -> bool:
        return set(seen[pattern]) in runs and len(set(seen[pattern].values())) == 1

    out = {}
    for name in shapes:
        fits = [p for p in found.get(name, []) if is_layers(p)]
        out[name] = fits[0] if fits and layers > 1 else name
    return out


def _one(layers: int) -> set[int]:
    return set(range(1, layers + 1))


def layer_index(pattern: str, name: str) -> int | None:
    """The layer `name` is in, by its pattern (counted from 0, whichever way the name counts)."""
    if "{layer}" not in pattern:
        return None
    head, tail = pattern.split("{layer}", 1)
    return int(name[len(head) : len(name) - len(tail)])


# How the forward uses each parameter -------------------------------------------------------------


def units_from(trace: Trace, state: dict[str, torch.Tensor], config: BertConfig) -> list[Unit]:
    """The model's units, as its traced forward uses its parameters; parameters it never uses,
    paired by their names."""
    units: dict[str, Unit] = {}
    taken: set[str] = set()

    def add(unit: Unit) -> None:
        if unit.weight in taken or (unit.bias and unit.bias in taken):
            return
        units[unit.weight] = unit
        taken.update(unit.names)

    for call in trace.calls:  # tables first: a tied decoder is the word embeddings' table
        for unit in _lookups(call, trace, state):
            add(unit)
    for call in trace.calls:
        for unit in _linears(call, trace, state, config) + _norms(call, trace, state):
            add(unit)
    unused = [n for n in state if n not in taken]
    for unit in by_names(unused, state):
        add(unit)
    return sorted(units.values(), key=lambda u: u.order)


def _param(trace: Trace, value) -> tuple[str, int] | None:
    """(the parameter a tensor is, flips of its two last dims on the way) for a tensor made of
    one parameter by views alone; None for any other."""
    if not isinstance(value, torch.Tensor):
        return None
    origin = trace.origin(value)
    if origin is None or len(origin.params) != 1:
        return None
    flips = 0
    for name, args in origin.steps:
        if _flips(name, args):
            flips += 1
        elif name not in VIEWS:
            return None
    return origin.params[0], flips


def _flips(name: str, args: tuple) -> bool:
    """Does a view exchange a matrix's rows and columns (`W.T`, `W.transpose(0, 1)`)?"""
    if name in ("transpose", "swapaxes"):
        return _swaps_last_two(args)
    return name in FLIPS or (name == "permute" and args in (((1, 0),), (1, 0)))


def _swaps_last_two(args: tuple) -> bool:
    dims = [a for a in args if isinstance(a, int)]
    return sorted(d % 2 for d in dims) == [0, 1] and len(dims) == 2


def _arg(call, index: int, name: str):
    if len(call.args) > index:
        return call.args[index]
    return call.kwargs.get(name)


def _linears(call, trace: Trace, state: dict, config: BertConfig) -> list[Unit]:
    """The projections a call computes: F.linear(x, W, b), x @ W, W @ x, addmm(b, x, W),
    einsum, and nn.MultiheadAttention's two (query, key and value fused; the output)."""
    found = []  # (weight, bias, stored (in, out) when not flipped, fused, the input)
    args = call.args
    if call.name == "linear":
        found.append((_arg(call, 1, "weight"), _arg(call, 2, "bias"), False, 1, args[0]))
    elif call.name in ("matmul", "mm", "bmm", "__matmul__") and len(args) == 2:
        if _param(trace, args[1]) and not _param(trace, args[0]):
            found.append((args[1], _bias_after(call, trace), True, 1, args[0]))
        elif _param(trace, args[0]) and not _param(trace, args[1]):
            found.append((args[0], _bias_after(call, trace), False, 1, args[1]))
    elif call.name == "addmm" and len(args) >= 3:
        found.append((args[2], args[0], True, 1, args[1]))
    elif call.name == "einsum":
        found += _einsum(call, trace)
    elif call.name == "multi_head_attention_forward":
        found.append((args[5], args[6], False, 3, args[0]))
        found.append((args[11], args[12], False, 1, args[0]))
    units = []
    for weight, bias, stored_in_out, fused, x in found:
        w, b = _param(trace, weight), _param(trace, bias)
        if w is None or state[w[0]].dim() != 2:
            continue
        bias_name = b[0] if b and state[b[0]].dim() == 1 else None
        transposed = stored_in_out != bool(w[1] % 2)
        out_features = state[w[0]].shape[1 if transposed else 0]
        if fused == 1 and out_features == 3 * config.hidden_size:
            fused = 3
        units.append(
            Unit(
                w[0],
                tuple(state[w[0]].shape),
                bias_name,
                "linear",
                transposed,
                call.index,
                per_token=_per_token(x, trace),
                fused=fused,
            )
        )
    return units


def _einsum(call, trace: Trace) -> list:
    """An einsum of the input with one parameter: stored (in, out) where the parameter's first
    index is the one summed over."""
    equation, operands = call.args[0], call.args[1:]
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    if not isinstance(equation, str) or "->" not in equation or len(operands) != 2:
        return []
    inputs, output = equation.replace(" ", "").split("->")
    subscripts = inputs.split(",")
    for i in (0, 1):
        weight, x = operands[i], operands[1 - i]
        if _param(trace, weight) and not _param(trace, x) and len(subscripts[i]) == 2:
            first, second = subscripts[i]
            if first not in output and second in output:
                return [(weight, _bias_after(call, trace), True, 1, x)]
            if second not in output and first in output:
                return [(weight, _bias_after(call, trace), False, 1, x)]
    return []


ADDS = ("add", "__add__", "__radd__", "add_", "__iadd__")


def _bias_after(call, trace: Trace, hops: int = 3):
    """The vector a projection's next calls add to it (`x @ W + b`, or `x + h @ W + b`, which
    adds the residual first), if it is a parameter."""
    current = call
    for _ in range(hops):
        following = next(trace.consumers(current), None)
        if following is None or following.name not in ADDS:
            return None
        for value in following.args[:2]:
            if _param(trace, value) and value.dim() == 1:
                return value
        if following.params:
            return None
        current = following
    return None


def _per_token(x, trace: Trace) -> bool:
    """Is a projection's input every token's (B, T, H) or (N, H), rather than one vector per
    sequence (B, H)?"""
    if not isinstance(x, torch.Tensor):
        return True
    batch = next(iter(trace.inputs.values())).shape[0]
    return x.dim() != 2 or x.shape[0] != batch


def _norms(call, trace: Trace, state: dict) -> list[Unit]:
    """LayerNorms: F.layer_norm(x, shape, gamma, beta), or by hand: gamma times the normalised
    input, then beta added (through division, say, but no other parameter)."""
    if call.name in NORM_CALLS:
        g, b = _param(trace, _arg(call, 2, "weight")), _param(trace, _arg(call, 3, "bias"))
        if g is None:
            return []
        return [Unit(g[0], tuple(state[g[0]].shape), b[0] if b else None, "norm", order=call.index)]
    if call.name not in ("mul", "__mul__", "__rmul__", "mul_", "addcmul"):
        return []
    vectors = [_param(trace, a) for a in call.args[:3] if isinstance(a, torch.Tensor)]
    vectors = [v for v in vectors if v and state[v[0]].dim() == 1]
    if call.name == "addcmul" and len(vectors) == 2:  # addcmul(beta, gamma, x)
        beta, gamma = vectors
        return [Unit(gamma[0], tuple(state[gamma[0]].shape), beta[0], "norm", order=call.index)]
    if len(vectors) != 1:
        return []
    beta = _added_after(call, trace)
    gamma = vectors[0][0]
    if beta is None:
        return []
    return [Unit(gamma, tuple(state[gamma].shape), beta, "norm", order=call.index)]


def _added_after(call, trace: Trace, hops: int = 3) -> str | None:
    """The vector parameter added to what `call` made, within a few calls that read no other
    parameter (`g * (x - mean) / (std + eps) + b`)."""
    current = call
    for _ in range(hops):
        following = next(trace.consumers(current), None)
        if following is None:
            return None
        params = [_param(trace, a) for a in following.args[:2]]
        params = [p for p in params if p]
        if following.name in ADDS and len(params) == 1:
            return params[0][0]
        if params:
            return None
        current = following
    return None


def _lookups(call, trace: Trace, state: dict) -> list[Unit]:
    """Embedding tables: F.embedding(ids, W), W[ids], W.index_select(0, ids); and a table read
    without the inputs (positions: W[:T], W(arange)), where what it gave is added."""
    units = []
    if call.name in LOOKUP_CALLS:
        table, index = (
            (_arg(call, 1, "weight"), call.args[0])
            if call.name == "embedding"
            else (
                call.args[0],
                call.args[-1],
            )
        )
        found = _param(trace, table)
        if found and _is_table(state[found[0]]):
            sources = trace.sources(index) if isinstance(index, torch.Tensor) else frozenset()
            units.append(_embedding(found[0], state, call.index, sources))
    for value in call.args[:2]:
        origin = trace.origin(value) if isinstance(value, torch.Tensor) else None
        if origin and len(origin.params) == 1 and _is_table(state[origin.params[0]]):
            steps = [s for s, _ in origin.steps]
            if any(s in LOOKUP_CALLS for s in steps):
                units.append(_embedding(origin.params[0], state, call.index, frozenset()))
    return units


def _is_table(t: torch.Tensor) -> bool:
    """(n, h), or (1, n, h): a table kept with a leading 1, to broadcast over the batch."""
    return t.dim() == 2 or (t.dim() == 3 and t.shape[0] == 1)


def _embedding(name: str, state: dict, order: int, sources: frozenset[str]) -> Unit:
    return Unit(name, tuple(state[name].shape), kind="embedding", order=order, lookup=sources)


def by_names(names: list[str], state: dict) -> list[Unit]:
    """Units of tensors the forward never used, paired by their names: `ln1.weight` with
    `ln1.bias`, `W_q` with `b_q`."""
    keyed: dict[str, list[str]] = {}
    for name in names:
        keyed.setdefault(_split_role(name)[0], []).append(name)
    units = []
    for group in keyed.values():
        weights = [n for n in group if _split_role(n)[1] != "bias"]
        biases = [n for n in group if _split_role(n)[1] == "bias"]
        for weight in weights:
            bias = biases.pop(0) if biases and state[weight].dim() <= 2 else None
            kind = "embedding" if bias is None and state[weight].dim() == 2 else "other"
            kind = "norm" if state[weight].dim() == 1 and bias else kind
            kind = "linear" if state[weight].dim() == 2 and bias else kind
            units.append(Unit(weight, tuple(state[weight].shape), bias, kind))
        units += [Unit(b, tuple(state[b].shape), None, "other") for b in biases]
    return units


def _split_role(name: str) -> tuple[str, str | None]:
    """`ln1.weight` -> (`ln1`, weight); `W_q` -> (`q`, weight); `ln1_b` -> (`ln1`, bias)."""
    head, _, last = name.rpartition(".")
    if last.lower() in WEIGHT_WORDS | BIAS_WORDS:
        return head, "bias" if last.lower() in BIAS_WORDS else "weight"
    tokens = last.split("_")
    for index in (0, -1):
        token = tokens[index].lower()
        if len(tokens) > 1 and token in WEIGHT_WORDS | BIAS_WORDS:
            rest = "_".join(tokens[1:] if index == 0 else tokens[:-1])
            key = f"{head}.{rest}" if head else rest
            return key, "bias" if token in BIAS_WORDS else "weight"
    return name, None


# The likeliest assignment, and its alternatives --------------------------------------------------


@dataclass
class Model:
    """The user's model as infer sees it: its units in a layer (layer 0's) and outside."""

    layer: list[Unit]
    outside: list[Unit]
    patterns: dict[str, str]  # every tensor's name -> its name with {layer}
    tied: dict[str, str]  # a second name of a parameter -> its first
    config: BertConfig


def _logical(unit: Unit, transposed: bool | None) -> tuple[int, ...]:
    """A projection's (out, in), however it is stored."""
    return tuple(reversed(unit.shape)) if transposed else unit.shape


def _fits(unit: Unit, out: int, inp: int) -> list[bool]:
    """How a unit can be a projection inp -> out: stored (out, in) [False] or (in, out) [True],
    as its use showed, or either where its use did not show it."""
    if unit.kind not in ("linear", "other") or len(unit.shape) != 2:
        return []
    options = [unit.transposed] if unit.transposed is not None else [False, True]
    return [t for t in dict.fromkeys(options) if _logical(unit, t) == (out, inp)]


def _is_norm(unit: Unit, h: int) -> bool:
    return unit.kind in ("norm", "other") and unit.shape == (h,) and unit.bias is not None


def _hint(unit: Unit, role: str) -> int:
    return len(words(unit.weight) & ROLES[role][2])


def layer_choices(model: Model) -> Iterator[Assignment]:
    """Every way a layer's units can be BERT's, the likeliest first: the query, key and value
    (or a fused unit) the first square projections the forward uses, then the attention's
    output, the first LayerNorm, the feed-forward, the second."""
    h, i = model.config.hidden_size, model.config.intermediate_size
    units = model.layer
    norms = [u for u in units if _is_norm(u, h)]
    square = [u for u in units if _fits(u, h, h)]
    fused = [u for u in units if _fits(u, 3 * h, h)]
    ffn_in = [(u, t) for u in units for t in _fits(u, i, h)]
    ffn_out = [(u, t) for u in units for t in _fits(u, h, i)]
    options = []
    for (inter, ti), (out, to) in itertools.product(ffn_in, ffn_out):
        if inter is out:
            continue
        for ln1, ln2 in itertools.permutations(norms, 2):
            base = {"intermediate": inter, "output": out, "attention norm": ln1, "output norm": ln2}
            flips = {"intermediate": ti, "output": to}
            options += _attention_choices(base, flips, square, fused)
    ranked = sorted(options, key=lambda a: -_score(a, LAYER))
    in_order = [a for a in ranked if _in_order(a)]
    # A model whose units are used in no order BERT's could be does not compute BERT: a few of
    # its assignments are run, to say where the closest diverges.
    for choice in in_order or ranked[:OUT_OF_ORDER]:
        yield from _swaps(choice, ("attention norm", "output norm"))


# What each of a layer's units needs computed before it can be: by data, in any BERT.
BEFORE = {
    "attention output": ("query", "key", "value"),
    "attention norm": ("attention output",),
    "intermediate": ("attention norm",),
    "output": ("intermediate",),
    "output norm": ("output",),
}


def _in_order(choice: Assignment) -> bool:
    """Could the forward have used the units in this order? A unit computed from another is
    used after it (where the trace saw both used), so the attention's output projection is the
    square one used last, the first LayerNorm the one used first."""
    units = choice.units
    return all(
        units[role].order > units[earlier].order
        for role, earlier_roles in BEFORE.items()
        for earlier in earlier_roles
        if units[role] is not units[earlier]
        and max(units[role].order, units[earlier].order) < UNUSED
    )


def _attention_choices(base: dict, flips: dict, square: list[Unit], fused: list[Unit]) -> list:
    roles = ("query", "key", "value", "attention output")
    taken = set(map(id, base.values()))
    free = [u for u in square if id(u) not in taken]
    h = base["output norm"].shape[0]
    out = []
    for perm in itertools.permutations(free, 4):
        units = base | dict(zip(roles, perm, strict=True))
        for stored in itertools.product(*(_fits(u, h, h) for u in perm)):
            out.append(Assignment(units, flips | dict(zip(roles, stored, strict=True))))
    for qkv in fused:
        for order in itertools.permutations(roles[:3]):
            for o in free:
                units = base | {"query": qkv, "key": qkv, "value": qkv, "attention output": o}
                for tq, to in itertools.product(_fits(qkv, 3 * h, h), _fits(o, h, h)):
                    stored = {"query": tq, "key": tq, "value": tq, "attention output": to}
                    out.append(Assignment(units, flips | stored, fused=order))
    return out


def _score(choice: Assignment, roles: tuple[str, ...]) -> float:
    """How well the order of use, name hints and storage agree with an assignment: BERT's
    order of computation first, names second."""
    score = 0.0
    seen = [choice.units[r] for r in roles if r in choice.units]
    distinct = list({id(u): u for u in seen}.values())
    score += 4 * sum(a.order < b.order for a, b in itertools.pairwise(distinct))
    score += sum(_hint(u, r) for r, u in choice.units.items() if r in roles)
    if choice.fused != ("query", "key", "value"):
        score -= 1
    score += 2 * sum(choice.units[r].transposed is not None for r in choice.transposed)
    return score


def _swaps(choice: Assignment, norms: tuple[str, ...]) -> Iterator[Assignment]:
    """The choice, then with the gamma and beta of norms whose roles their use did not show
    (and their names do not say) swapped."""
    yield choice
    unclear = [n for n in norms if n in choice.units and not _roles_known(choice.units[n])]
    for n in range(1, len(unclear) + 1):
        for swapped in itertools.combinations(unclear, n):
            yield replace(choice, swapped=frozenset(swapped))


def _roles_known(unit: Unit) -> bool:
    if unit.kind == "norm":
        return True
    return _split_role(unit.weight)[1] == "weight" and _split_role(unit.bias)[1] == "bias"


def global_choices(model: Model) -> Iterator[Assignment]:
    """Every way the units outside the layers can be the embeddings, the likeliest first."""
    c, h = model.config, model.config.hidden_size
    sizes = {
        "word embeddings": c.vocab_size,
        "position embeddings": c.max_position_embeddings,
        "token type embeddings": c.type_vocab_size,
    }
    tables = {
        n: [u for u in model.outside if u.bias is None and u.shape in ((s, h), (1, s, h))]
        for n, s in sizes.items()
    }
    norms = [u for u in model.outside if _is_norm(u, h)]
    options = []
    for embeddings in itertools.product(*tables.values()):
        if len(set(map(id, embeddings))) < 3:
            continue
        for norm in norms:
            chosen = dict(zip(EMBEDDINGS, embeddings, strict=True)) | {"embeddings norm": norm}
            options.append(Assignment(chosen))
    ranked = sorted(options, key=lambda a: -_embedding_score(a))
    for choice in ranked:
        yield from _swaps(choice, ("embeddings norm",))


def _embedding_score(choice: Assignment) -> float:
    """Embeddings read as BERT's are: the words by the ids, the types by the token types; the
    LayerNorm the first outside the layers."""
    units = choice.units
    score = 2 * ("input_ids" in units["word embeddings"].lookup)
    score += 2 * ("token_type_ids" in units["token type embeddings"].lookup)
    score += 2 * (not units["position embeddings"].lookup & {"input_ids", "token_type_ids"})
    score += sum(_hint(u, r) for r, u in units.items())
    return score - units["embeddings norm"].order / UNUSED


def pooler_choices(model: Model, taken: set[int]) -> list[Assignment]:
    """The pooler: a square projection outside the layers, best one applied once per sequence;
    or none."""
    h = model.config.hidden_size
    found = [
        Assignment({"pooler": u}, {"pooler": t})
        for u in model.outside
        if id(u) not in taken
        for t in _fits(u, h, h)
    ]
    found.sort(key=lambda a: (a.units["pooler"].per_token, -_hint(a.units["pooler"], "pooler")))
    return found


def head_choices(model: Model, taken: set[int], word: Unit) -> list[Assignment]:
    """The heads the units left outside the layers make (each the likeliest way), most first:
    a masked-LM head (a square projection per token, a LayerNorm, the decoder tied to the word
    embeddings and its bias), next sentence prediction, a classifier, question answering."""
    c, h = model.config, model.config.hidden_size
    free = [u for u in model.outside if id(u) not in taken]
    units: dict[str, Unit] = {}
    flips: dict[str, bool] = {}

    def pick(role, candidates, per_token):
        for unit, t in candidates:
            if id(unit) not in map(id, units.values()) and unit.per_token == per_token:
                units[role], flips[role] = unit, t
                return

    pick("mlm transform", [(u, t) for u in free for t in _fits(u, h, h)], True)
    norms = [u for u in free if _is_norm(u, h)]
    if "mlm transform" in units and norms:
        units["mlm norm"] = norms[0]
    biases = [u for u in free if u.shape == (c.vocab_size,)]
    decoders = [u for u in free if u.shape == (c.vocab_size, h) and u is not word]
    if "mlm norm" in units and (biases or any(d.bias for d in decoders)):
        decoder = decoders[0] if decoders else None
        units["mlm bias"] = (
            Unit(decoder.bias, (c.vocab_size,)) if decoder and decoder.bias else biases[0]
        )
        if decoder is not None:
            model.tied.setdefault(decoder.weight, word.weight)
    else:
        units.pop("mlm transform", None), units.pop("mlm norm", None)
    pick("nsp", [(u, t) for u in free for t in _fits(u, 2, h)], False)
    pick("classifier", [(u, t) for u in free for t in _fits(u, c.num_labels, h)], False)
    pick("token classifier", [(u, t) for u in free for t in _fits(u, c.num_labels, h)], True)
    pick("qa", [(u, t) for u in free for t in _fits(u, 2, h)], True)
    return [Assignment(units, flips)] if units else []


# From an assignment to a table ---------------------------------------------------------------


def sections(choice: Assignment, model: Model) -> dict[str, dict[str, object]]:
    """The table's sections: {group: {the user's name: its row's value}}."""
    out: dict[str, dict[str, object]] = {}
    fused_done = False
    for role in (r for r in ROLES if r in choice.units):  # BERT's order
        unit, (prefix, group, _) = choice.units[role], ROLES[role]
        target = out.setdefault(group, {})
        if role in SINGLE:
            target[model.patterns[unit.weight]] = prefix
        elif role in choice.fused and unit.fused == 3:
            if not fused_done:
                target.update(_fused_rows(unit, choice, model))
                fused_done = True
        else:
            target.update(_unit_rows(unit, prefix, choice, role, model))
    return out


def _unit_rows(unit: Unit, prefix: str, choice: Assignment, role: str, model: Model) -> dict:
    name = model.patterns
    if unit.bias is None:  # an embedding, maybe kept as (1, n, h)
        official = f"{prefix}.weight"
        return {name[unit.weight]: {"unsqueeze": official} if len(unit.shape) == 3 else official}
    weight, bias = (unit.bias, unit.weight) if role in choice.swapped else (unit.weight, unit.bias)
    transposed = choice.transposed.get(role)
    rows = {
        name[weight]: {"transpose": f"{prefix}.weight"} if transposed else f"{prefix}.weight",
        name[bias]: f"{prefix}.bias",
    }
    return dict(sorted(rows.items(), key=lambda kv: kv[0] != name[unit.weight]))


def _fused_rows(unit: Unit, choice: Assignment, model: Model) -> dict:
    prefixes = [ROLES[role][0] for role in choice.fused]
    kind = "concat_transposed" if choice.transposed[choice.fused[0]] else "concat"
    out = {model.patterns[unit.weight]: {kind: [f"{p}.weight" for p in prefixes]}}
    if unit.bias is not None:
        out[model.patterns[unit.bias]] = {"concat": [f"{p}.bias" for p in prefixes]}
    return out


def raw_table(name: str, rows: dict, model: Model, generated: dict) -> dict:
    raw = {"name": name, "description": "inferred", ENCODER: rows.get(ENCODER, {})}
    groups = {g: r for g, r in rows.items() if g != ENCODER and r}
    if groups:
        raw["groups"] = groups
    if model.tied:
        raw["tied"] = {model.patterns[k]: model.patterns[v] for k, v in model.tied.items()}
    if generated:
        raw["generated"] = generated
    return raw


def table_text(raw: dict, spec: str, notes: list[str]) -> str:
    """The table as a file, in the shipped tables' style."""
    lines = [
        f"# The names of {spec}, as `bertconv infer` found them: every row settled by running",
        "# the model against BERT, output by output (`bertconv verify --model` proves it).",
        *[f"# {note}" for note in notes],
        "",
        f"name = {_toml(raw['name'])}",
        f"description = {_toml(f'{spec}, inferred by bertconv infer')}",
    ]
    if "pooler" in raw.get("groups", {}):
        lines += [
            "",
            "# Its class builds the pooler: a file without one cannot load into it.",
            'requires = ["pooler"]',
        ]
    blocks = [(f"[{ENCODER}]", raw[ENCODER])]
    blocks += [(f"[groups.{g}]", rows) for g, rows in raw.get("groups", {}).items()]
    blocks += [("[tied]", raw.get("tied", {})), ("[generated]", raw.get("generated", {}))]
    for title, section in blocks:
        if section:
            lines += ["", title] + [f"{_toml(k)} = {_toml(v)}" for k, v in section.items()]
    return "\n".join(lines) + "\n"


def _toml(value) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return str(value)


# Running candidates ----------------------------------------------------------------------------


class Probe:
    """The user's model and bertconv's BERT (the class its heads make; verify proves it computes
    what transformers' does) on the probe config, the same random weights (every LayerNorm and
    bias random too, so that none can be mistaken for another), and the batch both read."""

    def __init__(self, harness: usermodel.Harness, config: BertConfig, groups: frozenset[str]):
        from .verify import _outputs, random_batch

        self.harness, self.config, self.groups = harness, config, groups
        self.model_class = class_for(set(groups))
        self.heads = outputs(self.model_class)
        self.official = random_weights(config, groups)
        reference = _reference(self.official, config, self.model_class, groups)
        self.batch = harness.prepare(random_batch(config, PROBE_LENGTH))
        self.expected = _outputs(reference, self.batch, self.heads)
        self.trials = 0

    def traced(self, raw: dict):
        """The user's model holding the random weights through table `raw`, run traced: the
        run, the table and its groups."""
        from .convert import write_layout

        table = expand(raw, raw["name"], self.config)
        groups = frozenset(raw.get("groups", {}))
        tensors = write_layout(self.official, self.config, table, groups)
        self.harness.model.load_state_dict(
            {n: storage.to_torch(t) for n, t in tensors.items()}, strict=False
        )
        return self.harness.run(self.batch, guard=False), table, groups

    def run(self, raw: dict) -> dict[str, float] | None:
        """How far the user's model, holding the random weights through table `raw`, is from
        BERT at each compared output; None where the table does not fit it."""
        self.trials += 1
        try:
            run, table, groups = self.traced(raw)
        except Exception:  # a wrong candidate may break the user's forward in any way
            return None
        found = usermodel.anchors(table, self.config.num_hidden_layers, set(groups))
        try:
            got = usermodel.outputs(run, found, self.heads)[0]
        except UsageError:
            return None
        return {
            label: (got[label].float() - expected).abs().max().item()
            if label in got and got[label].shape == expected.shape
            else float("inf")
            for label, expected in self.expected.items()
        }

    def diagnose(self, raw: dict, row: str):
        """Where and why the model, through table `raw`, differs inside output `row`."""
        from .diagnose import diagnose

        run, table, groups = self.traced(raw)
        anchors = usermodel.anchors(table, self.config.num_hidden_layers, set(groups))
        pooled = usermodel.read(run, anchors).get("pooler") if row == "pooler" else None
        weights = {n: storage.to_torch(t) for n, t in self.official.items()}
        return diagnose(run.trace, table, weights, self.config, row, pooled)


def random_weights(config: BertConfig, groups: frozenset[str]) -> dict[str, storage.Tensor]:
    """Seeded random official tensors of the encoder and `groups`: LayerNorms' gammas around 1
    and every bias random (so no two are alike), matrices scaled by their fan-in."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for name, shape in shapes(config, sorted(groups)).items():
        t = torch.randn(shape, generator=g)
        if name.endswith("LayerNorm.weight"):
            t = 1.0 + 0.5 * t
        elif len(shape) == 1:
            t = 0.5 * t
        else:
            t = t / shape[-1] ** 0.5
        out[name] = storage.from_torch(t)
    return out


def _reference(official: dict, config: BertConfig, model_class: str, groups: frozenset[str]):
    """bertconv's class for the groups, holding `official`."""
    from .api import build
    from .convert import Conversion, write_layout

    tensors = write_layout(official, config, layout("bertconv", config), groups)
    return build(Conversion(tensors, model_class, groups, {}, [], 0), config)


def progress(distances: dict[str, float] | None) -> tuple[int, float]:
    """How far a candidate got: the outputs within tolerance, in order, and the error at the
    first that is not (more outputs, then a smaller error, is closer)."""
    if distances is None:
        return (-1, float("inf"))
    done = 0
    for value in distances.values():
        if not value <= TOLERANCE:
            return (done, value)
        done += 1
    return (done, 0.0)


def closeness(distances: dict[str, float] | None) -> tuple[int, float]:
    """A key that orders candidates, the closest greatest: more outputs that agree, then, at
    the first that does not, a smaller error (NaN counting as the largest)."""
    done, error = progress(distances)
    return done, -error if error == error else float("-inf")


def _listed(labels: list[str]) -> str:
    """`embeddings, layers 1-12, pooler`: outputs named, the layers as a span."""
    layers = [label for label in labels if label.startswith("layer ")]
    if len(layers) > 2:
        span = f"layers 1-{len(layers)}"
        labels = [label for label in labels if label not in layers[1:]]
        labels = [span if label == layers[0] else label for label in labels]
    return ", ".join(labels) or "nothing"


def _part(label: str) -> str:
    if label == "embeddings":
        return "embeddings"
    if label.startswith("layer "):
        return "layers"
    return "pooler" if label == "pooler" else "heads"


def _failing_part(distances: dict[str, float] | None) -> str | None:
    if distances is None:
        return "embeddings"
    for label, value in distances.items():
        if not value <= TOLERANCE:
            return _part(label)
    return None


# Infer ---------------------------------------------------------------------------------------


def infer(spec: str, config_dict: dict | None = None) -> Inference:
    """The table of `spec`'s names (PKG.MODULE:NAME or path.py:NAME), found and checked."""
    config = BertConfig.from_dict({**PROBE, **(config_dict or {})}, "--config")
    factory = usermodel.import_factory(spec)
    config_obj = usermodel.config_object(config_dict or {}, config)
    model = usermodel.construct(factory, spec, config_obj)
    harness = usermodel.Harness(
        model, spec, usermodel.plan(model, spec), config.pad_token_id, config.vocab_size
    )
    from .verify import random_batch

    batch = harness.prepare(random_batch(config, PROBE_LENGTH))
    usermodel.materialise(model, harness, batch)
    run = harness.run(batch)  # the model's own weights: how it uses them
    state = model.state_dict()
    generated = generated_buffers(model, state, config)
    params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    tensors = {n: t for n, t in state.items() if n in params}
    seen = _looked_at(model, tensors, config, spec)
    user = _model(run.trace, tensors, config)
    name = spec.rpartition(":")[2]
    return Search(user, harness, config, name, spec, generated, seen).run()


def _looked_at(model: nn.Module, tensors: dict, config: BertConfig, spec: str) -> list[str]:
    """Refuse a model whose layers are not one tensor per layer (all layers stacked)."""
    stacked = [
        n
        for n, t in tensors.items()
        if t.dim() == 3 and t.shape[0] == config.num_hidden_layers and "{layer}" not in n
    ]
    if stacked:
        raise NotBertError(
            f"{spec}: holds every layer's weights in one tensor ({', '.join(stacked[:4])}): a "
            "table maps one tensor per layer; register a tensor per layer (an nn.ParameterList)"
        )
    return list(tensors)


def _model(trace: Trace, tensors: dict, config: BertConfig) -> Model:
    """The user's units, those of layer 0 standing for every layer's."""
    patterns = layer_pattern({n: t.shape for n, t in tensors.items()}, config.num_hidden_layers)
    # A parameter under two names (a tied decoder) is one unit: its second name a tied copy.
    first: dict[int, str] = {}
    tied = {}
    for name, t in tensors.items():
        key = id(t) if t.data_ptr() == 0 else (t.data_ptr(), t.shape, t.stride())
        if key in first:
            tied[name] = first[key]
        else:
            first[key] = name
    distinct = {n: t for n, t in tensors.items() if n not in tied}
    units = units_from(trace, distinct, config)
    first = min(
        (i for n, p in patterns.items() if (i := layer_index(p, n)) is not None), default=None
    )
    layer, outside = [], []
    for unit in units:
        index = layer_index(patterns[unit.weight], unit.weight)
        if index is None:
            outside.append(unit)
        elif index == first:
            layer.append(unit)
    return Model(layer, outside, patterns, tied, config)


class Search:
    """The likeliest assignment, checked part by part; each part that differs mended by its
    alternatives, in order."""

    def __init__(self, user, harness, config, name, spec, generated, tensors):
        self.user, self.config, self.name, self.spec = user, config, name, spec
        self.generated, self.tensors = generated, tensors
        self.harness = harness
        self.best: tuple[dict | None, dict | None] = (None, None)

    def run(self) -> Inference:
        embeddings = list(global_choices(self.user))
        layers = list(itertools.islice(layer_choices(self.user), MAX_TRIALS))
        if not embeddings or not layers:
            return Inference(None, {}, 0, self._inventory())
        taken = {id(u) for a in (embeddings[0], layers[0]) for u in a.units.values()}
        poolers = pooler_choices(self.user, taken) or [Assignment({})]
        word = embeddings[0].units["word embeddings"]
        heads = head_choices(self.user, taken | {id(u) for u in poolers[0].units.values()}, word)
        parts = {
            "embeddings": embeddings,
            "layers": layers,
            "pooler": poolers,
            "heads": heads or [Assignment({})],
        }
        uncovered = self._uncovered({p: options[0] for p, options in parts.items()})
        if uncovered:
            return Inference(None, {}, 0, uncovered)
        groups = self._groups(parts)
        self.probe = Probe(self.harness, self.config, groups)
        return self._search(parts)

    def _groups(self, parts: dict) -> frozenset[str]:
        chosen = {r for p in ("pooler", "heads") for r in parts[p][0].units}
        return frozenset(ROLES[r][1] for r in chosen)

    def _search(self, parts: dict) -> Inference:
        """The likeliest choice of each part, then, at the first part whose outputs differ, its
        alternatives until one agrees; on to the next part that differs."""
        current = {p: options[0] for p, options in parts.items()}
        distances = self._try(current)
        mended = set()
        while (part := _failing_part(distances)) is not None and part not in mended:
            mended.add(part)
            for option in parts[part][1:]:
                if self.probe.trials >= MAX_TRIALS:
                    break
                trial = current | {part: option}
                found = self._try(trial)
                if _failing_part(found) != part and closeness(found) > closeness(distances):
                    current, distances = trial, found
                    break
        if _failing_part(distances) is None:
            raw = self._raw(current)
            text = table_text(raw, self.spec, self._notes(current))
            return Inference(text, distances, self.probe.trials)
        # Said of the likeliest assignment (its earlier parts mended), as close as any in the
        # outputs it matches: another, of a smaller error by chance, would mislead a diagnosis.
        if distances is not None and progress(distances)[0] >= progress(self.best[1])[0]:
            self.best = (current, distances)
        found = self._diagnosis()
        reason = self._why(found)
        return Inference(None, self.best[1] or {}, self.probe.trials, reason, found)

    def _diagnosis(self):
        """Where and why the closest assignment differs from BERT, taken apart step by step."""
        chosen, distances = self.best
        if distances is None:
            return None
        row = next(label for label, d in distances.items() if not d <= TOLERANCE)
        return self.probe.diagnose(self._raw(chosen), row)

    def _try(self, chosen: dict) -> dict | None:
        distances = self.probe.run(self._raw(chosen))
        if closeness(distances) > closeness(self.best[1]):
            self.best = (chosen, distances)
        return distances

    def _raw(self, chosen: dict) -> dict:
        units = {r: u for a in chosen.values() for r, u in a.units.items()}
        merged = Assignment(
            units,
            {r: t for a in chosen.values() for r, t in a.transposed.items()},
            frozenset().union(*(a.swapped for a in chosen.values())),
            chosen["layers"].fused,
        )
        return raw_table(self.name, sections(merged, self.user), self.user, self.generated)

    def _uncovered(self, chosen: dict) -> str | None:
        """Why no table can hold the model: tensors no part of BERT fits."""
        raw = self._raw(chosen)
        rows = [n for part in (raw[ENCODER], *raw.get("groups", {}).values()) for n in part]
        named = {
            n.replace("{layer}", str(i))
            for n in rows + list(raw.get("tied", {}))
            for i in range(self.config.num_hidden_layers)
        }
        left = [n for n in self.tensors if n not in named]
        if not left:
            return None
        return (
            "no part of BERT fits its tensors "
            f"{', '.join(left[:8])}{', ...' if len(left) > 8 else ''}: BERT's encoder, pooler "
            "and heads have no such tensor (another architecture, or a part BERT lacks)"
        )

    def _notes(self, chosen: dict) -> list[str]:
        unused = [
            u.weight
            for a in chosen.values()
            for u in a.units.values()
            if u.order == UNUSED and u.kind != "embedding"
        ]
        if not unused:
            return []
        return [f"Never used by its forward (placed by name and shape only): {', '.join(unused)}"]

    def _why(self, found=None) -> str:
        chosen, distances = self.best
        if distances is None:
            return (
                "no assignment of its tensors makes it compute BERT: with each, its forward "
                "fails or its outputs have other shapes than BERT's"
            )
        done, error = progress(distances)
        labels = list(distances)
        at = labels[done] if done < len(labels) else "the end"
        return (
            f"no assignment of its tensors makes it compute BERT: the closest matches "
            f"{_listed(labels[:done])} and diverges at {at} (max abs "
            f"{error:.3g} against bertconv's {self.probe.model_class})"
            + (
                f".\n{found.message()}"
                if found is not None and found.step is not None
                else ". Its tensors have BERT's shapes but it computes something else there: "
                f"{SUSPECTS[_part(at)]}" + (f"\n{found.message()}" if found else "")
            )
        )

    def _inventory(self) -> str:
        """What BERT has that the model's tensors cannot be, part by part."""
        c, h, i = self.config, self.config.hidden_size, self.config.intermediate_size
        sizes = {
            "word embeddings": c.vocab_size,
            "position embeddings": c.max_position_embeddings,
            "token type embeddings": c.type_vocab_size,
        }
        outside, layer = self.user.outside, self.user.layer
        missing = [
            f"the {name} (a ({size}, {h}) table)"
            for name, size in sizes.items()
            if not any(u.bias is None and u.shape in ((size, h), (1, size, h)) for u in outside)
        ]
        if not any(_is_norm(u, h) for u in outside):
            missing.append(f"the embeddings' LayerNorm (two ({h},) tensors)")
        if sum(_is_norm(u, h) for u in layer) < 2:
            missing.append(f"a layer's two LayerNorms (two ({h},) tensors each)")
        if not any(_fits(u, i, h) for u in layer):
            missing.append(f"a layer's intermediate projection ({i}, {h}) with its bias")
        square = sum(bool(_fits(u, h, h)) for u in layer)
        fused = any(_fits(u, 3 * h, h) for u in layer)
        if square < 4 and not (fused and square >= 1):
            missing.append(f"a layer's query, key, value and output projections ({h}, {h})")
        found = ", ".join(u.weight for u in outside + layer)
        return (
            "no assignment of its tensors fits BERT's shapes: it has no tensor for "
            f"{'; '.join(missing) or 'some part'}. Its tensors: {found}"
        )


def generated_buffers(model: nn.Module, state: dict, config: BertConfig) -> dict:
    """The model's buffers that bertconv makes (position ids: 0..n-1), for the table's
    [generated]; any other buffer (a sinusoidal table, a mask) is the model's to make."""
    params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    sizes = {
        getattr(config, f): f for f in ("max_position_embeddings", "vocab_size", "hidden_size")
    }
    out = {}
    for name, tensor in state.items():
        if name in params:
            continue
        flat = tensor.flatten()
        if (
            not tensor.is_floating_point()
            and flat.numel() in sizes
            and torch.equal(flat, torch.arange(flat.numel(), dtype=flat.dtype))
        ):
            dims = [sizes.get(d, d) if d != 1 else 1 for d in tensor.shape]
            out[name] = {"arange": sizes[flat.numel()], "shape": dims}
    return out
