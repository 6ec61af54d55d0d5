"""The outputs verify compares, each named by a small type, and how they are read from a forward of
bertconv's model or transformers' (the two take the same arguments). Below both verify and your
own BERT (bertconv.yours), which read the same outputs from a trace.
"""

import inspect
import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from .catalog import Architecture

FLOAT32_MAX_ABS = 1e-5  # the float32 tolerance: every compared value of a model, against another
# In-place calls that do not end with an underscore.
IN_PLACE = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
            "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__"}  # fmt: skip
# Calls that move values without arithmetic (a lookup in an embedding table): run on the
# tensors as they are, and what they return cast, which is exact and never casts a whole table.
GATHERS = {"embedding", "__getitem__", "index_select", "take", "gather", "take_along_dim"}


@dataclass(frozen=True)
class Output:
    """One compared output: the embeddings, a layer's (`index` from 1), the pooler, or a head's
    row (`kind` its group, `name` the row the catalog gives it: "mlm logits")."""

    kind: str
    index: int | None = None
    name: str | None = None

    def __str__(self) -> str:
        if self.name is not None:
            return self.name
        return self.kind if self.index is None else f"{self.kind} {self.index}"

    @property
    def hidden(self) -> bool:
        """A hidden state (the embeddings', a layer's), read at the real tokens."""
        return self.kind in ("embeddings", "layer")

    @property
    def part(self) -> str:
        """The part of BERT that computes it: embeddings, layers, pooler or heads."""
        if self.kind == "layer":
            return "layers"
        return self.kind if self.kind in ("embeddings", "pooler") else "heads"


EMBEDDINGS, POOLER = Output("embeddings"), Output("pooler")
SENTENCE = Output("sentence embedding")  # a sentence-transformers directory's whole pipeline


@dataclass(frozen=True)
class Note:
    """What verify says besides its rows; `str()` gives it as printed and in --json. `inside`:
    the outputs it is said of as the model computes them inside (where its forward returns
    something else), a field so that what is said of several is said once, naming them all."""

    text: str
    inside: tuple[Output, ...] = ()

    def __str__(self) -> str:
        if not self.inside:
            return self.text
        return f"{', '.join(map(str, self.inside))} as computed inside: {self.text}"


def layer(index: int) -> Output:
    """Layer `index`'s output, counted from 1 as verify prints it."""
    return Output("layer", index)


@dataclass(frozen=True)
class Head:
    """A head's compared output: its row, transformers' name for it, and whether it is per
    token (else per sequence)."""

    output: Output
    attribute: str
    per_token: bool
    score: bool = False  # one number per token: a model's (tokens, 1) read as (tokens,)


def heads(model_class: str, arch: Architecture) -> list[Head]:
    """What a class computes beyond the hidden states and the pooler, as its architecture says;
    each row is named after the group that computes it ("qa start logits": qa's)."""
    spec = arch.classes[model_class]
    return [
        Head(
            Output(next(g for g in spec.groups if row.startswith(f"{g} ")), name=row),
            name,
            token,
            row in spec.scores,
        )
        for row, name, token in spec.outputs
    ]


def compared(
    model, batch: dict[str, torch.Tensor], heads: list[Head]
) -> dict[Output, torch.Tensor]:
    """One forward pass: hidden states at real positions, the pooler, and each head's outputs
    (per-token ones at real positions), on the CPU (`exact`). For bertconv's model and
    transformers' alike: transformers' task classes do not return the pooler output, so a hook
    on the pooler catches it."""
    from .model import BertModel

    ours = isinstance(model, BertModel)
    base = model if ours else model.base_model  # transformers' task classes hold it inside
    pooled = []
    hook = nullcontext()
    if getattr(base, "pooler", None) is not None:
        hook = base.pooler.register_forward_hook(lambda m, a, out: pooled.append(out))
    with hook, torch.inference_mode():
        # return_dict: a config.json may say false, which would give tuples
        theirs = {} if ours else {"output_hidden_states": True, "return_dict": True}
        if not ours and "token_type_ids" not in inspect.signature(model.forward).parameters:
            batch = {k: v for k, v in batch.items() if k != "token_type_ids"}  # DistilBERT's
        out = model(**batch, **theirs)
    real = batch["attention_mask"].reshape(-1, batch["attention_mask"].shape[-1]).bool()
    named = {EMBEDDINGS: out.hidden_states[0][real]}
    named |= {layer(i): h[real] for i, h in enumerate(out.hidden_states[1:], 1)}
    if pooled:
        named[POOLER] = pooled[0]
    for head in heads:
        value = getattr(out, head.attribute)
        named[head.output] = value[real] if head.per_token else value
    return {k: exact(v) for k, v in named.items()}


def cast(model: torch.nn.Module, device, dtype: torch.dtype) -> torch.nn.Module:
    """`model` on `device`, its floating parameters and buffers in `dtype`; complex ones (a
    rotary port's turns, polar(1, angle)) kept complex, which Module.to(dtype) would make real,
    dropping their imaginary parts."""
    model.to(device)
    return model._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)


def exact(value: torch.Tensor) -> torch.Tensor:
    """A compared value on the CPU, in float32, or in float64 where computed in it."""
    return value.cpu().to(torch.float64 if value.dtype == torch.float64 else torch.float32)


def at_token_starts(outputs: dict, batch: dict, heads: list[Head]) -> dict:
    """`outputs` of the sequences whose first place holds a token, for what is read off that
    place (the pooler, a head reading it or the first token): a sequence padded on the left
    has padding there, which carries no meaning, as no hidden state at the padding does (a
    sentence vector pools the real tokens wherever they are: all kept). Multiple choice's
    scores: of the items each of whose choices starts with a token."""
    mask = batch["attention_mask"]
    starts = mask.reshape(-1, mask.shape[-1])[:, 0].bool()
    if starts.all():
        return outputs
    items = starts.view(mask.shape[:-1]).reshape(mask.shape[0], -1).all(-1)
    per_token = {h.output for h in heads if h.per_token}
    out = {}
    for k, v in outputs.items():
        if k.hidden or k in per_token or k == SENTENCE or v.dim() == 0:
            out[k] = v
        elif len(v) == len(starts):
            out[k] = v[starts.to(v.device)]
        else:
            out[k] = v[items.to(v.device)] if len(v) == len(items) else v
    return out


def truth(dtype: torch.dtype) -> torch.dtype:
    """What a model run in `dtype` is compared against: transformers in float64 where it ran in
    float64, else in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def cast_order(dtype: torch.dtype) -> bool:
    """The order a model is run in dtypes: half precision last, since casting the model into
    it rounds its weights (float32 runs on them as read, float64 too: InFloat64)."""
    return dtype.itemsize < 4


def key(batch: dict[str, torch.Tensor]) -> tuple:
    """A batch as a dict key: a model's outputs on it are looked up by what it holds."""
    return tuple((n, tuple(t.shape), t.numpy().tobytes()) for n, t in sorted(batch.items()))


class Runner:
    """A model of bertconv's or transformers' (they take the same arguments) run on verify's
    batches, each in its dtype, and the heads' outputs to compare. A user's own model
    (yours/adapter.py) is run the same way, read from a trace."""

    # a sentence-transformers directory's: the width of its sentence embedding, which a user's
    # model without a pooler may return (yours/reading.py)
    sentence_width: int | None = None

    def __init__(self, model, heads: list[Head]):
        self.model, self.heads = model, heads
        self.notes: list[Note] = []

    def prepare(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch in the form the model reads it."""
        return batch

    def run(self, batches, device: torch.device, dtypes: list) -> dict[Output, torch.Tensor]:
        """The compared outputs over all batches, each run in its dtype, on the CPU (`exact`).
        Each batch's are kept too (`per_batch`, and the dtype each ran in, `dtypes`)."""
        self.per_batch, self.dtypes = [], []
        for batch, dtype in zip(batches, dtypes, strict=True):
            outputs, ran_in = self.run_one(batch, device, dtype)
            self.per_batch.append(outputs)
            self.dtypes.append(ran_in)
        return self.together()

    def rerun(self, which: list[int], batches, device: torch.device, dtype) -> dict:
        """The batches at `which` run again in `dtype`, their outputs in place of the last run's
        (the others' kept): all batches' together, as `run` gives them."""
        for i in which:
            self.per_batch[i], self.dtypes[i] = self.run_one(batches[i], device, dtype)
        return self.together()

    def together(self) -> dict[Output, torch.Tensor]:
        """Every batch's outputs, one after the other (NaN where a batch has none)."""
        keys = dict.fromkeys(k for p in self.per_batch for k in p)  # missing from one: fails
        every = {k: all(k in p for p in self.per_batch) for k in keys}
        nan = torch.tensor(math.nan)
        return {k: torch.cat([p[k] for p in self.per_batch]) if every[k] else nan for k in keys}

    def run_one(self, batch: dict, device: torch.device, dtype: torch.dtype) -> tuple[dict, object]:
        """The outputs of one batch, and the dtype they were computed in (float64: InFloat64,
        the weights as read)."""
        wide = dtype == torch.float64
        cast(self.model, device, torch.float32 if wide else dtype)
        with InFloat64() if wide else nullcontext():
            found = self.outputs({k: v.to(device) for k, v in batch.items()})
        return at_token_starts(found, batch, self.heads), dtype

    def outputs(self, batch: dict[str, torch.Tensor]) -> dict[Output, torch.Tensor]:
        return compared(self.model, batch, self.heads)

    def hold(self, pipeline) -> None:
        """Where a sentence-transformers directory's modules have weights the model holds (a
        user's Dense): give them to it."""

    def differs_inside(self, output: Output, expected: list, limit: float) -> bool:
        """Does the model compute `output` otherwise inside (not only return something else)?
        `expected`: the reference's, batch by batch."""
        return True

    def reference_seeded(self, reference) -> None:
        """Where the model has heads the checkpoint lacks, given seeded weights: the reference
        (reference.Reference) for them, beside `reference`."""

    def reads_left_padding(self) -> bool:
        """Can the model be given a batch padded on the left (its inputs saying where)?"""
        return True

    def on_the_left(self, batch: dict, got: dict, kind: str) -> list[Note]:
        """Why the model differs on a batch padded on the left (`got`: what it computed on
        it) where it agrees on right padding, where recomputed; a checkpoint of type `kind`."""
        return []

    def what_head_reads(self, row: Output, batch: dict) -> list[Note]:
        """Where a head's row fails, what the head reads, where that is not what BERT's does."""
        return []


def written_into(name: str, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The tensor a call of `name` writes into, where it writes into one (`x += y`,
    `masked_fill_`, `out=`)."""
    if not (
        name in IN_PLACE
        or (name.endswith("_") and not name.endswith("__"))
        or kwargs.get("inplace") is True
        or "out" in kwargs
    ):
        return None
    return kwargs.get("out", args[0] if args else None)


class InFloat64(TorchFunctionMode):
    """A forward computed in float64 with the model's weights as they are: each floating tensor
    a call reads is cast to float64 for that call (a weight for the call that reads it), so that
    no float64 copy of the model is ever held (bert-base's would be 880 MB). What a call writes
    into keeps its dtype, as it does in a model cast whole."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", None)
        if name == "__get__":  # an attribute (`.shape`, `.T`): nothing computed
            return func(*args, **kwargs)
        if name in GATHERS:
            return tree_map(_in_float64, func(*args, **kwargs))
        target = written_into(name, args, kwargs)
        args, kwargs = tree_map(partial(_in_float64, keep=target), (args, kwargs))
        return func(*args, **kwargs)


def _in_float64(value, keep=None):
    if isinstance(value, torch.Tensor) and value is not keep and value.is_floating_point():
        return value.to(torch.float64)
    return value


@contextmanager
def no_tf32():
    """float32 means float32: TF32 matmuls would add ~1e-3 of error on Ampere and later GPUs."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
