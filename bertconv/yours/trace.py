"""A trace of a model's forward at the level of torch functions: every call that reads the model's
inputs, which parameters it reads (directly, or through a view of one: `W.T`, `W[:T]`, a chunk),
and what it returns. It sees inside any model, whether a module holds each step or a function of
raw parameters computes it: `F.linear`, `x @ W`, `F.layer_norm` or a LayerNorm written by hand,
`F.embedding` or `W[ids]`, `softmax`, `nn.MultiheadAttention` as one call.

    with Trace(model, batch) as trace:
        out = model(**batch)
    trace.last_use({"ln2.weight", "ln2.bias"}).output  # a layer's hidden state, where computed

Tensors are told apart by identity: the trace holds every tensor it sees until it is dropped, so
that no two tensors share an id while it lives. A value a later in-place call (`x += y`,
`masked_fill_`) would change is copied before that call, so each call keeps what it returned.
"""

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..outputs import written_into

# Attribute reads that are views of a tensor (the rest, `.shape`, `.device`, ..., are metadata).
VIEW_ATTRIBUTES = {"T", "mT", "H", "mH", "data"}
# Calls that answer a question about a tensor rather than compute one.
METADATA = {"size", "dim", "numel", "stride", "is_floating_point", "is_contiguous", "data_ptr",
            "element_size", "__len__", "__bool__", "item", "tolist", "__format__", "__repr__",
            "is_complex", "nelement", "ndimension", "storage_offset", "untyped_storage",
            "get_device", "__hash__"}  # fmt: skip
DEPTH = 4  # how deep outputs and arguments are searched for tensors (nested tuples, dicts)
SUMS = {"add", "__add__", "__radd__", "add_", "__iadd__"}  # a residual connection's sum


@dataclass(frozen=True)
class Origin:
    """A tensor made from parameters alone (no input of the model): which, and how (the calls
    from the parameter to it, each as (name, its non-tensor arguments))."""

    params: tuple[str, ...]
    steps: tuple[tuple[str, tuple], ...] = ()


@dataclass
class Call:
    """One call of a torch function that reads the model's inputs."""

    index: int
    name: str  # the function's name: linear, matmul, add, layer_norm, __getitem__, T, ...
    args: tuple
    kwargs: dict
    inputs: list[torch.Tensor]  # its tensor arguments, in order
    producers: list[int | None]  # the call that made each input (None: not made in the trace)
    params: list[tuple[int, Origin]]  # (position in inputs, the parameters it is made of)
    output: Any

    @property
    def param_names(self) -> set[str]:
        return {name for _, origin in self.params for name in origin.params}


class Trace(TorchFunctionMode):
    """Records the calls of a forward of `model` on `inputs` ({our name: tensor})."""

    def __init__(
        self,
        model: nn.Module,
        inputs: dict[str, torch.Tensor],
        keep: set[str] | None = None,
        sums: set[str] = frozenset(),
    ):
        super().__init__()
        self.model, self.inputs = model, inputs
        self.calls: list[Call] = []
        # Each weight by its first name: a tied weight is one parameter under two names.
        self.names = {id(p): name for name, p in reversed(weights(model).items())}
        self._origin: dict[int, Origin] = {}
        self._sources = {id(t): frozenset({name}) for name, t in self.inputs.items()}
        self._producer: dict[int, int] = {}
        self._keep: list = list(self.inputs.values())
        # `keep`: the weights whose calls are read once the forward is done (verify's anchors).
        # Those calls keep their tensors, and so does a call of no weight on one of them alone
        # (an activation after the pooler); every other call keeps its place in the graph but
        # lets its tensors go as the forward goes (a forward of every position holds no
        # attention map), each id forgotten when its tensor goes, so that none is taken for
        # another. None: every call keeps its tensors (the diagnosis reads them all).
        self.keep = keep
        # `sums`: the weights whose call's output a residual sum is read after (a pre-LN
        # layer's state): that sum's call keeps its tensors too
        self.sums = sums
        self._kept: set[int] = set()
        self._watched: set[int] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if name is None or name in METADATA:
            return func(*args, **kwargs)
        self._before_in_place(name, args, kwargs)
        out = func(*args, **kwargs)
        self._record(name, args, kwargs, out)
        return out

    def origin(self, t: torch.Tensor) -> Origin | None:
        if id(t) in self.names:
            return Origin((self.names[id(t)],))
        return self._origin.get(id(t))

    def sources(self, t: torch.Tensor) -> frozenset[str]:
        return self._sources.get(id(t), frozenset())

    def uses(self, params: set[str]) -> list[Call]:
        """The calls that read any of `params` together with the model's inputs, in order."""
        return [c for c in self.calls if c.param_names & params]

    def last_use(self, params: set[str]) -> Call | None:
        return next(reversed(self.uses(params)), None)

    def consumers(self, call: Call) -> Iterator[Call]:
        """The later calls that read a tensor `call` returned."""
        return (later for later in self.calls[call.index + 1 :] if call.index in later.producers)

    def unary_chain(self, call: Call) -> list[torch.Tensor]:
        """`call`'s output, then what each next call that reads only it (and no parameter)
        makes of it, keeping its shape: an activation, a dropout (tanh(W x + b) from W x + b)."""
        chain = [next(tensors_in(call.output), None)]
        current = call
        while True:
            following = next(self.consumers(current), None)
            if (
                following is None
                or following.params
                or len([p for p in following.producers if p is not None]) != 1
                or not isinstance(following.output, torch.Tensor)
                or following.output.shape != chain[-1].shape
            ):
                return chain
            chain.append(following.output)
            current = following

    def residual_sum(self, call: Call) -> Call | None:
        """The call adding `call`'s output (or what calls of no weight made of it alone: a
        dropout) to another tensor of its shape: a residual connection's sum, a pre-LN layer's
        state. None where nothing adds it."""
        shape = getattr(next(tensors_in(call.output), None), "shape", None)
        current = call
        for _ in range(DEPTH):
            following = list(self.consumers(current))
            for later in following:
                out = later.output
                if later.name in SUMS and isinstance(out, torch.Tensor) and out.shape == shape:
                    return later
            alone = [c for c in following if not c.params and len(c.inputs) == 1]
            if not alone:
                return None
            current = alone[0]
        return None

    def _before_in_place(self, name: str, args: tuple, kwargs: dict) -> None:
        """Keep, for the call that made it, a copy of what an in-place call is about to change."""
        target = written_into(name, args, kwargs)
        for t in (target, getattr(target, "_base", None)):
            if isinstance(t, torch.Tensor) and self._producer.get(id(t)) in self._kept:
                made = self.calls[self._producer[id(t)]]
                made.output = _replace(made.output, t, t.detach().clone())

    def _record(self, name: str, args: tuple, kwargs: dict, out) -> None:
        inputs = list(tensors_in((args, kwargs)))
        if not inputs:
            return
        sources = frozenset().union(*(self.sources(t) for t in inputs))
        used = [(i, o) for i, t in enumerate(inputs) if (o := self.origin(t)) is not None]
        outputs = [t for t in tensors_in(out) if not any(t is i for i in inputs)]
        if not sources:  # made from parameters and constants only: a view of a parameter
            if used and outputs:
                step = (name, tuple(a for a in args if not isinstance(a, torch.Tensor)))
                params = tuple(dict.fromkeys(n for _, o in used for n in o.params))
                steps = used[0][1].steps + (step,) if len(params) == 1 else (step,)
                for t in outputs:
                    self._origin[id(t)] = Origin(params, steps)
                    self._hold(t)
            return
        producers = [self._producer.get(id(t)) for t in inputs]
        call = Call(len(self.calls), name, args, kwargs, inputs, producers, used, out)
        self.calls.append(call)
        for t in inputs:
            self._hold(t)
        for t in tensors_in(out):
            self._sources[id(t)] = sources
            self._producer[id(t)] = call.index
            self._hold(t)
        if self.keep is None or self._read_later(call):
            self._kept.add(call.index)
        else:
            call.args, call.kwargs, call.inputs, call.output = (), {}, [], None

    def _read_later(self, call: Call) -> bool:
        """Does `call` keep its tensors in a trace that keeps some (`keep`)?"""
        if call.param_names & self.keep:
            return True
        made = [p for p in call.producers if p is not None]
        if call.params or not made:
            return False
        if len(made) == 1:  # what a call read later made, alone (an activation)
            return made[0] in self._kept
        # or summed with another tensor, where that call's is a pre-LN layer's residual sum
        summed = [p for p in made if p in self._kept and self.calls[p].param_names & self.sums]
        return call.name in SUMS and bool(summed)

    def _hold(self, t: torch.Tensor) -> None:
        """Keep `t` alive while the trace lives, or (`keep`) forget its id when it goes (the
        model's weights outlive the trace: their ids are never another's meanwhile)."""
        if self.keep is None:
            self._keep.append(t)
        elif id(t) not in self._watched and id(t) not in self.names:
            self._watched.add(id(t))
            weakref.finalize(t, _forget, weakref.ref(self), id(t))


def _forget(trace: "weakref.ref[Trace]", tensor_id: int) -> None:
    """A tensor of a trace that keeps some gone: its id no longer stands for it (the trace
    held weakly, so that the tensors it watches never keep it and its model alive)."""
    if (found := trace()) is not None:
        found._watched.discard(tensor_id)
        for held in (found._origin, found._sources, found._producer):
            held.pop(tensor_id, None)


def _name(func) -> str | None:
    name = getattr(func, "__name__", None)
    if name == "__get__":  # an attribute: only the views among them compute anything
        attribute = getattr(getattr(func, "__self__", None), "__name__", None)
        return attribute if attribute in VIEW_ATTRIBUTES else None
    return None if name in ("__set__", "_set_grad_enabled") else name


def tensors_in(value, depth: int = 0) -> Iterator[torch.Tensor]:
    """The tensors in a value: itself, or inside tuples, lists, dicts and objects' fields."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < DEPTH:
        value = fields(value)
        if isinstance(value, tuple | list):
            for item in value:
                yield from tensors_in(item, depth + 1)


def fields(value):
    """A returned object read as a mapping of its fields, as a dict's values: a dataclass's, or
    those of any class of its own holding tensors (an output class every layer's states are
    in); a tuple, a list, or anything else as it is."""
    if isinstance(value, dict):
        return list(value.values())
    if hasattr(value, "__dataclass_fields__"):
        return [getattr(value, f, None) for f in value.__dataclass_fields__]
    if isinstance(value, tuple | list | torch.Tensor | nn.Module) or not hasattr(value, "__dict__"):
        return value
    held = [v for v in vars(value).values() if isinstance(v, torch.Tensor | tuple | list | dict)]
    return held if any(True for v in held for _ in tensors_in(v, DEPTH - 1)) else value


def _replace(value, old: torch.Tensor, new: torch.Tensor):
    """`value` with `old` replaced by `new`, where it is `old` or a plain tuple or list of it."""
    if value is old:
        return new
    if type(value) in (tuple, list):
        return type(value)(new if v is old else v for v in value)
    return value


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights by name, tied ones under each name: its parameters, and the floating
    buffers it saves (weights some models hold as buffers)."""
    named = dict(model.named_parameters(remove_duplicate=False))
    saved = model.state_dict(keep_vars=True)
    buffers = model.named_buffers(remove_duplicate=False)
    return named | {n: b for n, b in buffers if n in saved and b.is_floating_point()}
