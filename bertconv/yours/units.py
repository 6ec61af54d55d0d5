"""How a traced forward uses each of a model's parameters: its units (a projection's weight and
bias, a LayerNorm's gamma and beta, an embedding table), and the layer each is in."""

import re
from dataclasses import dataclass

import torch

from ..config import BertConfig
from .trace import Trace

UNUSED = 1 << 30  # the order of a unit the forward never uses
WEIGHT_WORDS = {"weight", "w", "gamma", "g", "scale", "kernel", "a"}
BIAS_WORDS = {"bias", "b", "beta"}
NORM_CALLS = {"layer_norm"}
LOOKUP_CALLS = {"embedding", "__getitem__", "index_select", "take", "narrow"}
VIEWS = {"contiguous", "float", "to", "type", "clone", "detach", "data", "__getitem__", "narrow",
         "unsqueeze", "squeeze", "expand", "expand_as", "double", "half", "bfloat16"}  # fmt: skip
FLIPS = {"T", "t", "mT", "H", "mH"}
# A unit paired by names alone: its kind by (the weight's dimensions, has it a bias).
KINDS = {(1, True): "norm", (2, True): "linear", (2, False): "embedding"}


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


def words(name: str) -> set[str]:
    """The words of a name: `attn.W_qkv` -> {attn, w, qkv}; `tkTypeEmb` -> {tk, type, emb}."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w and not w.isdigit()}


def layer_pattern(shapes: dict[str, tuple], layers: int, first_may_lack=False) -> dict[str, str]:
    """Each name with its layer index replaced by `{layer}` (names outside the layers as they
    are). The index is a number in a name that runs over 0..layers-1 (or 1..layers) where the
    rest of the name stays the same, and the tensors are alike (every layer's is the same
    shape; a list of three embeddings is not three layers): `blocks.1.mlp.0.weight`,
    `params.l1_wq`, `Wq.1`. `shapes`: each tensor's, by name; `first_may_lack`: the
    architecture has a tensor in every layer but the first, whose index then runs 1..layers-1."""
    seen: dict[str, dict[int, tuple]] = {}
    found: dict[str, list[str]] = {}
    for name, shape in shapes.items():
        for match in re.finditer(r"(?<![0-9])[0-9]+(?![0-9])", name):
            pattern = name[: match.start()] + "{layer}" + name[match.end() :]
            seen.setdefault(pattern, {})[int(match.group())] = tuple(shape)
            found.setdefault(name, []).append(pattern)
    runs = [set(range(layers)), set(range(1, layers + 1))]  # counted from 0, or from 1
    if first_may_lack and layers > 2:  # in every layer but the first (ModernBERT's attention norm)
        runs.append(set(range(1, layers)))

    def is_layers(pattern: str) -> bool:
        return set(seen[pattern]) in runs and len(set(seen[pattern].values())) == 1

    return {
        name: next((p for p in found.get(name, []) if layers > 1 and is_layers(p)), name)
        for name in shapes
    }


def layer_index(pattern: str, name: str) -> int | None:
    """The layer `name` is in, by its pattern (counted from 0, whichever way the name counts)."""
    if "{layer}" not in pattern:
        return None
    head, tail = pattern.split("{layer}", 1)
    return int(name[len(head) : len(name) - len(tail)])


def units_from(trace: Trace, state: dict[str, torch.Tensor], config: BertConfig) -> list[Unit]:
    """The model's units, as its traced forward uses its parameters (those unused: by name)."""

    def candidates():
        for call in trace.calls:  # tables first: a tied decoder is the word embeddings' table
            yield from _lookups(call, trace, state)
        for call in trace.calls:
            yield from _linears(call, trace, state, config) + _norms(call, trace, state)
        yield from by_names([n for n in state if n not in taken], state)  # what is left by then

    units, taken = [], set()
    for unit in candidates():
        if not taken & set(unit.names):
            units.append(unit)
            taken.update(unit.names)
    return sorted(units, key=lambda u: u.order)


def _param(trace: Trace, value) -> tuple[str, int] | None:
    """(the parameter a tensor is, flips of its two last dims on the way) for a tensor made of
    one parameter by views alone; None for any other."""
    origin = trace.origin(value) if isinstance(value, torch.Tensor) else None
    if origin is None or len(origin.params) != 1:
        return None
    flips = [_flips(name, args) for name, args in origin.steps]
    if not all(flip or name in VIEWS for flip, (name, _) in zip(flips, origin.steps, strict=True)):
        return None
    return origin.params[0], sum(flips)


def _flips(name: str, args: tuple) -> bool:
    """Does a view exchange a matrix's rows and columns (`W.T`, `W.transpose(0, 1)`)?"""
    if name in ("transpose", "swapaxes"):
        dims = [a for a in args if isinstance(a, int)]
        return sorted(d % 2 for d in dims) == [0, 1] and len(dims) == 2
    return name in FLIPS or (name == "permute" and args in (((1, 0),), (1, 0)))


def _arg(call, index: int, name: str):
    return call.args[index] if len(call.args) > index else call.kwargs.get(name)


def _linears(call, trace: Trace, state: dict, config: BertConfig) -> list[Unit]:
    """The projections a call computes: F.linear(x, W, b), x @ W, W @ x, addmm(b, x, W),
    einsum, and nn.MultiheadAttention's two (query, key and value fused; the output)."""
    found = []  # (weight, bias, stored (in, out) when not flipped, fused, the input)
    args = call.args
    if call.name == "linear":
        bias = _arg(call, 2, "bias")  # else added apart: F.linear(x, W) + b, b + F.linear(x, W)
        bias = _added_after(call, trace, adds_only=True) if bias is None else bias
        found.append((_arg(call, 1, "weight"), bias, False, 1, args[0]))
    elif call.name in ("matmul", "mm", "bmm", "__matmul__") and len(args) == 2:
        if _param(trace, args[1]) and not _param(trace, args[0]):
            found.append((args[1], _added_after(call, trace, adds_only=True), True, 1, args[0]))
        elif _param(trace, args[0]) and not _param(trace, args[1]):
            found.append((args[0], _added_after(call, trace, adds_only=True), False, 1, args[1]))
    elif call.name == "conv1d":  # Conv1d(kernel_size=1): weights (out, in, 1)
        found.append((_arg(call, 1, "weight"), _arg(call, 2, "bias"), False, 1, args[0]))
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
        conv = call.name == "conv1d"
        if w is None or state[w[0]].shape[2:] != (1,) * conv or state[w[0]].dim() < 2:
            continue
        bias = b[0] if b and state[b[0]].dim() == 1 else None
        transposed = stored_in_out != bool(w[1] % 2)
        out_features = state[w[0]].shape[1 if transposed else 0]
        if fused == 1 and out_features == 3 * config.hidden_size:
            fused = 3
        shape, per_token = tuple(state[w[0]].shape), _per_token(x, trace)
        unit = Unit(w[0], shape, bias, "linear", transposed, call.index, per_token, fused=fused)
        units.append(unit)
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
                return [(weight, _added_after(call, trace, adds_only=True), True, 1, x)]
            if second not in output and first in output:
                return [(weight, _added_after(call, trace, adds_only=True), False, 1, x)]
    return []


ADDS = ("add", "__add__", "__radd__", "add_", "__iadd__")


def _per_token(x, trace: Trace) -> bool:
    """Is a projection's input every token's ((B, T, H), (N, H)), not one per sequence (B, H)?"""
    if not isinstance(x, torch.Tensor):
        return True
    batch = next(iter(trace.inputs.values())).shape[0]
    return x.dim() != 2 or x.shape[0] != batch


def _norms(call, trace: Trace, state: dict) -> list[Unit]:
    """LayerNorms: F.layer_norm(x, shape, gamma, beta), or by hand: gamma times the normalised
    input, then beta added (through division, say, but no other parameter)."""

    def norm(gamma: str, beta: str | None) -> list[Unit]:
        return [Unit(gamma, tuple(state[gamma].shape), beta, "norm", order=call.index)]

    if call.name in NORM_CALLS:
        g, b = _param(trace, _arg(call, 2, "weight")), _param(trace, _arg(call, 3, "bias"))
        return [] if g is None else norm(g[0], b[0] if b else None)
    if call.name not in ("mul", "__mul__", "__rmul__", "mul_", "addcmul"):
        return []
    vectors = [_param(trace, a) for a in call.args[:3] if isinstance(a, torch.Tensor)]
    vectors = [v[0] for v in vectors if v and state[v[0]].dim() == 1]
    if call.name == "addcmul" and len(vectors) == 2:  # addcmul(beta, gamma, x)
        return norm(vectors[1], vectors[0])
    beta = _added_after(call, trace, adds_only=False) if len(vectors) == 1 else None
    return [] if beta is None else norm(vectors[0], _param(trace, beta)[0])


def _added_after(call, trace: Trace, adds_only: bool) -> torch.Tensor | None:
    """The parameter added to what `call` made, within a few calls that read no other parameter:
    by adds alone for a projection's bias (`x @ W + b`; `x + h @ W + b` adds the residual
    first), by any call for a LayerNorm's beta (`g * (x - mean) / (std + eps) + b`)."""
    current = call
    for _ in range(3):
        following = next(trace.consumers(current), None)
        if following is None or (adds_only and following.name not in ADDS):
            return None
        params = [a for a in following.args[:2] if _param(trace, a)]
        if following.name in ADDS and len(params) == 1:
            return params[0]
        if params:
            return None
        current = following
    return None


def _lookups(call, trace: Trace, state: dict) -> list[Unit]:
    """Embedding tables: F.embedding(ids, W), W[ids], W.index_select(0, ids); and a table read
    without the inputs (positions: W[:T], W(arange)), where what it gave is added."""
    units = []
    if call.name in LOOKUP_CALLS:
        if call.name == "embedding":
            table, index = _arg(call, 1, "weight"), call.args[0]
        else:
            table, index = call.args[0], call.args[-1]
        found = _param(trace, table)
        if found and _is_table(state[found[0]]):
            sources = trace.sources(index) if isinstance(index, torch.Tensor) else frozenset()
            units.append(_embedding(found[0], state, call.index, sources))
    for value in call.args[:2] if call.name not in PROJECTIONS else ():  # W[0:H] @ x: a slice
        origin = trace.origin(value) if isinstance(value, torch.Tensor) else None
        looked_up = origin and any(step in LOOKUP_CALLS for step, _ in origin.steps)
        if looked_up and len(origin.params) == 1 and _is_table(state[origin.params[0]]):
            units.append(_embedding(origin.params[0], state, call.index, frozenset()))
    return units


# Calls that project by a parameter: a slice of one they read (fairseq's in_proj_weight[0:H])
# is a projection's weight, not rows of a table.
PROJECTIONS = {"linear", "matmul", "mm", "bmm", "__matmul__", "addmm", "einsum", "conv1d"}


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
        keyed.setdefault(split_role(name)[0], []).append(name)
    units = []
    for group in keyed.values():
        weights = [n for n in group if split_role(n)[1] != "bias"]
        biases = [n for n in group if split_role(n)[1] == "bias"]
        for weight in weights:
            bias = biases.pop(0) if biases and state[weight].dim() <= 2 else None
            kind = KINDS.get((state[weight].dim(), bias is not None), "other")
            units.append(Unit(weight, tuple(state[weight].shape), bias, kind))
        units += [Unit(b, tuple(state[b].shape), None, "other") for b in biases]
    return units


def split_role(name: str) -> tuple[str, str | None]:
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
