"""When a model differs from BERT: where, and why.

Given a traced forward of the model (trace.py), the table of its names and BERT's weights, the
first output that failed (the embeddings, a layer, the pooler) is taken apart step by step. Each
step is recomputed BERT's way from the model's own values at that step (so that an earlier,
tolerated difference does not spread), and compared with what the model computed there:

    the query, key and value projections -> the attention (scores, scaling, mask, softmax) ->
    its output projection -> the residual and LayerNorm -> the feed-forward's first projection
    -> its activation -> its second projection -> the residual and LayerNorm

The first step that differs is named, with the steps before it that agree. Then the deviations
people make at that step are recomputed the other way, each (an eps, a GELU, a scaling, a mask,
heads split in another order, ...): the one that reproduces the model's values is the cause,
and that recomputation is its proof.
"""

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from ..config import BertConfig
from ..mapping import Table
from .trace import Trace, tensors_in

# A step agrees where it is within this of BERT's, relative to its scale: float32 rounding of
# one step recomputed from the same inputs is far below it.
STEP_TOLERANCE = 1e-6
# A deviation explains a step where it reproduces the model's values this many times better
# than BERT's way does (a small deviation, GELU's sqrt(2) as 1.41421, stays under any tolerance).
CLEAR = 10.0
EPS = (1e-5, 1e-6, 1e-7, 1e-8, 1e-3)
ACTIVATIONS: dict[str, tuple[str, Callable]] = {
    "gelu": ('the exact (erf) GELU ("gelu")', F.gelu),
    "gelu_new": ('tanh-approximate GELU ("gelu_new")', lambda x: F.gelu(x, approximate="tanh")),
    "gelu_1.41421": (
        "GELU with 1.41421 for sqrt(2)",
        lambda x: 0.5 * x * (1.0 + torch.erf(x / 1.41421)),
    ),
    "gelu_sigmoid": (
        "the sigmoid GELU, x * sigmoid(1.702 x)",
        lambda x: x * torch.sigmoid(1.702 * x),
    ),
    "relu": ('ReLU ("relu")', F.relu),
    "silu": ("SiLU (swish)", F.silu),
}
ACTIVATIONS["gelu_pytorch_tanh"] = ACTIVATIONS["gelu_new"]
LAYER = "encoder.layer.{layer}."
UNITS = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "attention output": "attention.output.dense",
    "attention norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "output norm": "output.LayerNorm",
}


@dataclass
class Diagnosis:
    """Where a model first differs from BERT inside a failing output, and why."""

    row: str
    step: str | None  # None: every step agrees, the difference grew across them
    max_abs: float
    agreeing: list[tuple[str, float]] = field(default_factory=list)
    cause: str | None = None
    confirmed_max_abs: float | None = None  # the step recomputed with the cause, against yours
    detail: str = ""  # what BERT does there, from config.json

    def to_dict(self) -> dict:
        return asdict(self)

    def message(self) -> str:
        agree = _together([name for name, _ in self.agreeing])
        worst = max((d for _, d in self.agreeing), default=0.0)
        verb = "agrees" if len(self.agreeing) == 1 else "agree"
        before = f"; {agree} {verb} (<= {worst:.1e})" if agree else ""
        if self.step is None and self.max_abs != self.max_abs:
            return f"{self.row}: bertconv could not take it apart step by step ({self.detail})."
        if self.step is None:
            return (
                f"{self.row}: every step agrees with BERT recomputed from your model's own values"
                f" ({agree}, <= {worst:.1e}); the difference ({self.max_abs:.1e}) builds up "
                "across them."
            )
        lines = [f"{self.row}: {self.step} differs (max abs {self.max_abs:.1e}){before}."]
        if self.cause:
            lines.append(
                f"Your model computes {self.cause}: this step recomputed that way from your "
                f"model's own values gives what it computed (max abs "
                f"{self.confirmed_max_abs:.1e}).{self.detail}"
            )
        else:
            lines.append(
                f"No deviation bertconv knows explains it: {self.step} computes something else "
                f"than BERT's{self.detail}."
            )
        return "\n".join(lines)


def _together(names: list[str]) -> str:
    """Steps named in a list, the query, key and value projections as one."""
    qkv = [f"the {n} projection" for n in ("query", "key", "value")]
    if all(n in names for n in qkv):
        at = names.index(qkv[0])
        names = [n for n in names if n not in qkv]
        names.insert(at, "the query, key and value projections")
    return ", ".join(names)


def diagnose(
    trace: Trace, table: Table, weights: dict, config: BertConfig, row: str, pooled=None
) -> Diagnosis | None:
    """Take the failing output `row` apart, in a traced forward (`trace`) of a model holding
    BERT's `weights` (official names, torch) through `table` (`pooled`: its pooled output, as
    verify read it). None where the row is not one bertconv looks inside (a head's)."""
    view = Values(trace, table)
    view.pooled = pooled
    if row == "embeddings":
        steps = embedding_steps(view, weights, config)
    elif row.startswith("layer "):
        steps = layer_steps(view, weights, config, int(row.split()[1]) - 1)
    elif row == "pooler":
        steps = pooler_steps(view, weights, config)
    else:
        return None
    try:
        return walk(row, steps, view.mask)
    except (RuntimeError, ValueError, IndexError, KeyError) as e:
        # A model laid out in a way no step foresaw: the failing row stands, said plainly.
        return Diagnosis(row, None, math.nan, detail=f"{type(e).__name__}: {e}"[:300])


@dataclass
class Step:
    """One step: what the model computed there (None where the trace cannot tell it apart),
    BERT's way from the model's own inputs, and the deviations people make there."""

    name: str
    yours: torch.Tensor | None
    bert: torch.Tensor
    # (cause, the step computed that way): a dict, or pairs where a cause has two ways
    deviations: dict | list[tuple[str, Callable[[], torch.Tensor]]] = field(default_factory=dict)
    detail: str = ""

    def ways(self) -> list[tuple[str, Callable[[], torch.Tensor]]]:
        pairs = self.deviations.items() if isinstance(self.deviations, dict) else self.deviations
        return [*pairs, ("dropout left active", lambda: _dropout(self))]


def walk(row: str, steps, mask: torch.Tensor) -> Diagnosis:
    """The first step that differs, and the deviation that explains it."""
    agreeing, largest = [], 0.0
    for step in steps:
        if step.yours is None or step.yours.shape != step.bert.shape:
            continue  # not told apart in this model (inside nn.MultiheadAttention, say)
        d0 = distance(step.yours, step.bert, mask)
        scale = max(1.0, float(step.bert.abs().max()))
        cause, d1 = _explained(step, mask, d0, scale)
        if d0 > STEP_TOLERANCE * scale or cause is not None:
            return Diagnosis(row, step.name, d0, agreeing, cause, d1, step.detail)
        agreeing.append((step.name, d0))
        largest = max(largest, d0)
    return Diagnosis(row, None, largest, agreeing)


def _explained(step: Step, mask, d0: float, scale: float) -> tuple[str | None, float | None]:
    """The deviation that reproduces the model's values, clearly better than BERT's way."""
    if not d0 > 0.0:
        return None, None
    best, best_d = None, math.inf
    for cause, compute in step.ways():
        try:
            value = compute()
        except (RuntimeError, ValueError, IndexError):  # a variant of another shape
            continue
        if value is None or value.shape != step.bert.shape:
            continue
        d = distance(step.yours, value, mask)
        if d < best_d:
            best, best_d = cause, d
    if best is not None and best_d * CLEAR < d0 and best_d <= STEP_TOLERANCE * scale:
        name = best if best != "dropout left active" else _dropout_name(step)
        return name, best_d
    return None, None


def distance(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """Max abs difference at the real positions (every row of a per-sequence output)."""
    if a.shape != b.shape:
        return math.inf
    diff = (a.float() - b.float()).abs()
    if diff.dim() >= 2 and tuple(diff.shape[:2]) == tuple(mask.shape):
        diff = diff[mask.bool()]
    value = float(diff.max()) if diff.numel() else 0.0
    return math.inf if value != value else value


# Dropout ------------------------------------------------------------------------------------


def _dropout_ratio(step: Step) -> float | None:
    """The scale 1 / (1 - p) of a dropout left active: the kept values, over BERT's."""
    yours, bert = step.yours.float(), step.bert.float()
    dropped = (yours == 0) & (bert.abs() > 1e-6)
    kept = (yours != 0) & (bert.abs() > 1e-3)
    if not dropped.any() or not kept.any():
        return None
    ratio = float((yours[kept] / bert[kept]).median())
    return ratio if ratio > 1.01 else None


def _dropout(step: Step):
    ratio = _dropout_ratio(step)
    if ratio is None:
        return None
    return torch.where(step.yours == 0, torch.zeros_like(step.bert), step.bert * ratio)


def _dropout_name(step: Step) -> str:
    ratio = _dropout_ratio(step)
    return f"dropout left active (p = {1 - 1 / ratio:.2f}: the model in training mode?)"


# The model's values, through its table ---------------------------------------------------------


class Values:
    """What the traced model computed at each unit of BERT's, found through its table."""

    def __init__(self, trace: Trace, table: Table):
        self.trace = trace
        self.mask = trace.inputs["attention_mask"]
        self.pooled: torch.Tensor | None = None
        self.holders: dict[str, list[tuple[str, int, int]]] = {}
        for row in table.rows.values():
            for index, official in enumerate(row.official):
                self.holders.setdefault(official, []).append((row.name, index, len(row.official)))
        for copy, original in table.tied.items():
            for official in table.rows[original].official:
                self.holders.setdefault(official, []).append((copy, 0, 1))

    def names(self, prefix: str) -> set[str]:
        found = self.holders.get(f"{prefix}.weight", []) + self.holders.get(f"{prefix}.bias", [])
        return {name for name, _, _ in found}

    def _call(self, prefix: str, last: bool = True):
        names = self.names(prefix)
        uses = self.trace.uses(names)
        if not uses:
            return None
        call = uses[-1] if last else uses[0]
        fused = {n for n, _, count in self.holders.get(f"{prefix}.weight", []) if count > 1}
        if not call.param_names <= names | fused:
            return None  # the call computes more than this unit (nn.MultiheadAttention)
        return call

    def output(self, prefix: str, last: bool = True) -> torch.Tensor | None:
        """What the unit `prefix` (an official name less .weight) returned, as (B, T, F): at
        its last use (a table, looked up: at its first; a tied decoder uses it again)."""
        call = self._call(prefix, last)
        if call is None:
            return None
        value = self.btf(next(tensors_in(call.output), None))
        holders = self.holders.get(f"{prefix}.weight", [])
        if value is not None and holders and holders[0][2] > 1:  # one third of a fused qkv
            _, index, count = holders[0]
            value = value.chunk(count, dim=-1)[index]
        return value

    def input(self, prefix: str) -> torch.Tensor | None:
        """What the unit `prefix` read (its input from the model's computation), as (B, T, F)."""
        call = self._call(prefix, last=False)
        if call is None:
            return None
        for value, producer in zip(call.inputs, call.producers, strict=True):
            if producer is not None and self.trace.origin(value) is None:
                return self.btf(value)
        return None

    def hidden(self, names: set[str]) -> torch.Tensor | None:
        call = self.trace.last_use(names)
        return None if call is None else self.btf(next(tensors_in(call.output), None))

    def btf(self, value) -> torch.Tensor | None:
        """A per-token value as (B, T, F): from (T, B, F), packed (N, F) or (B * T, F)."""
        if not isinstance(value, torch.Tensor):
            return None
        real = self.mask.bool()
        B, T = real.shape
        value = value.float()
        if value.dim() == 3 and tuple(value.shape[:2]) == (B, T):
            return value
        if value.dim() == 3 and tuple(value.shape[:2]) == (T, B):
            return value.transpose(0, 1)
        if value.dim() == 2 and value.shape[0] == B * T:
            return value.reshape(B, T, -1)
        if value.dim() == 2 and value.shape[0] == int(real.sum()):
            out = value.new_zeros(B, T, value.shape[-1])
            out[real] = value
            return out
        if value.dim() == 2 and value.shape[0] == B:
            return value
        return None


# BERT's steps ----------------------------------------------------------------------------------


def norm(x, weights, prefix, eps):
    return F.layer_norm(
        x, x.shape[-1:], weights[f"{prefix}.weight"], weights[f"{prefix}.bias"], eps
    )


def linear(x, weights, prefix, transposed=False, bias=True):
    w = weights[f"{prefix}.weight"]
    return F.linear(x, w.T if transposed else w, weights[f"{prefix}.bias"] if bias else None)


def _norm_deviations(x, weights, prefix, config, residual=None, sublayer=None) -> dict:
    """The LayerNorm's deviations: its eps, its variance, and where the residual goes."""
    out = {
        f"LayerNorm eps {eps:g} (the config's layer_norm_eps is {config.layer_norm_eps:g})": (
            lambda eps=eps: norm(x, weights, prefix, eps)
        )
        for eps in EPS
        if eps != config.layer_norm_eps
    }
    g, b = weights[f"{prefix}.weight"], weights[f"{prefix}.bias"]
    out["a LayerNorm dividing by the unbiased standard deviation plus eps"] = lambda: (
        g * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + config.layer_norm_eps) + b
    )
    if residual is not None and sublayer is not None:
        out["no residual: the LayerNorm of the sublayer's output alone"] = lambda: norm(
            sublayer, weights, prefix, config.layer_norm_eps
        )
        out["the residual added after the LayerNorm, not before it"] = lambda: (
            norm(sublayer, weights, prefix, config.layer_norm_eps) + residual
        )
    out["no LayerNorm"] = lambda: x
    return out


def _projection_deviations(x, weights, prefix, square: bool) -> dict:
    out = {"the projection without its bias": lambda: linear(x, weights, prefix, bias=False)}
    if square:
        out["the projection's weight used transposed (x @ W where BERT has x @ W.T)"] = lambda: (
            linear(x, weights, prefix, transposed=True)
        )
    return out


def embedding_steps(view: Values, weights: dict, config: BertConfig):
    ids, types = view.trace.inputs["input_ids"], view.trace.inputs["token_type_ids"]
    T = ids.shape[1]
    word = F.embedding(ids, weights["embeddings.word_embeddings.weight"])
    typ = F.embedding(types, weights["embeddings.token_type_embeddings.weight"])
    table = weights["embeddings.position_embeddings.weight"]
    pos = table[:T][None]
    yours_word = view.output("embeddings.word_embeddings", last=False)
    yield Step("the word embeddings", yours_word, word)
    yours_typ = view.output("embeddings.token_type_embeddings", last=False)
    yield Step("the token type embeddings", yours_typ, typ)
    word = word if yours_word is None else yours_word
    typ = typ if yours_typ is None else yours_typ
    eps, prefix = config.layer_norm_eps, "embeddings.LayerNorm"

    def summed(w=word, t=typ, p=pos):
        return norm(w + t + p, weights, prefix, eps)

    offset = config.pad_token_id + 1
    deviations = {
        "no token type embeddings (token types left out)": lambda: summed(t=0),
        "no position embeddings (positions left out)": lambda: summed(p=0),
        "positions offset by one (counted from 1)": lambda: summed(p=table[1 : T + 1][None]),
        f"positions offset past the pad id (from {offset}, RoBERTa's way)": lambda: summed(
            p=table[offset : offset + T][None]
        ),
        "the word embeddings scaled by sqrt(hidden_size)": lambda: summed(
            w=word * math.sqrt(config.hidden_size)
        ),
    }
    deviations |= _norm_deviations(word + typ + pos, weights, prefix, config)
    yield Step(
        "the embeddings' sum and its LayerNorm",
        view.output(prefix),
        summed(),
        deviations,
    )


def layer_steps(view: Values, weights: dict, config: BertConfig, index: int):
    """A layer's steps, each from the model's own values before it."""
    p = {name: LAYER.replace("{layer}", str(index)) + unit for name, unit in UNITS.items()}
    previous = _layer_input(view, index)
    if previous is None:
        return
    x, eps = previous, config.layer_norm_eps
    pre_ln = "the LayerNorm before the sublayer (pre-LN), not after it"
    yield Step(
        "the layer's input",
        view.input(p["query"]),
        x,
        [  # whichever of its two LayerNorms a table takes for the first
            (pre_ln, lambda: norm(x, weights, p["attention norm"], eps)),
            (pre_ln, lambda: norm(x, weights, p["output norm"], eps)),
        ],
    )
    own = {}
    for name in ("query", "key", "value"):
        bert = linear(x, weights, p[name])
        deviations = _projection_deviations(x, weights, p[name], square=True)
        deviations["the LayerNorm before the sublayer (pre-LN), not after it"] = lambda n=name: (
            linear(norm(x, weights, p["attention norm"], eps), weights, p[n])
        )
        other = {"query": "key", "key": "query"}.get(name)
        if other:
            deviations[f"the {other}'s projection for the {name}'s (query and key exchanged)"] = (
                lambda o=other: linear(x, weights, p[o])
            )
        yours = view.output(p[name])
        yield Step(f"the {name} projection", yours, bert, deviations)
        own[name] = bert if yours is None else yours
    context = attention(own["query"], own["key"], own["value"], view.mask, config)
    yours_context = view.input(p["attention output"])
    yield Step(
        "the attention (scores, scaling, mask, softmax)",
        yours_context,
        context,
        _attention_deviations(own, view.mask, config),
    )
    context = context if yours_context is None else yours_context
    yield from _sublayer(view, weights, config, p, "attention output", "attention norm", context, x)
    mid = view.output(p["attention norm"])
    if mid is None:
        attended = linear(context, weights, p["attention output"]) + x
        mid = norm(attended, weights, p["attention norm"], eps)
    inter = linear(mid, weights, p["intermediate"])
    deviations = _projection_deviations(mid, weights, p["intermediate"], square=False)
    deviations["the LayerNorm before the sublayer (pre-LN), not after it"] = lambda: linear(
        norm(mid, weights, p["output norm"], eps), weights, p["intermediate"]
    )
    yours_inter = view.output(p["intermediate"])
    yield Step("the feed-forward's first projection", yours_inter, inter, deviations)
    inter = inter if yours_inter is None else yours_inter
    act_name, act = ACTIVATIONS[config.hidden_act]
    detail = f' The config\'s hidden_act is "{config.hidden_act}", {act_name}.'
    deviations = {
        name: (lambda f=f: f(inter)) for key, (name, f) in ACTIVATIONS.items() if name != act_name
    }
    yours_act = view.input(p["output"])
    yield Step("the feed-forward's activation", yours_act, act(inter), deviations, detail)
    activated = act(inter) if yours_act is None else yours_act
    yield from _sublayer(view, weights, config, p, "output", "output norm", activated, mid)


def _layer_input(view: Values, index: int) -> torch.Tensor | None:
    """The hidden state a layer reads: the previous layer's output, or the embeddings'."""
    if index == 0:
        return view.hidden(view.names("embeddings.LayerNorm"))
    return view.hidden(view.names(f"encoder.layer.{index - 1}.output.LayerNorm"))


def _sublayer(view, weights, config, p, dense, norm_name, x_in, residual):
    """A sublayer's output projection, then its residual and LayerNorm."""
    eps = config.layer_norm_eps
    out = linear(x_in, weights, p[dense])
    yours = view.output(p[dense])
    if yours is not None and distance(yours, out + residual, view.mask) < distance(
        yours, out, view.mask
    ):
        out = out + residual  # the bias added after the residual: both in one call
        residual_in = None
    else:
        residual_in = residual
    square = dense == "attention output"
    what = "the attention's output projection" if square else "the feed-forward's second projection"
    yield Step(what, yours, out, _projection_deviations(x_in, weights, p[dense], square))
    sub = out if yours is None else yours
    summed = sub + residual if residual_in is not None else sub
    where = (
        "the attention's residual and LayerNorm"
        if square
        else "the feed-forward's residual and LayerNorm"
    )
    # What the next step reads shows a residual added after the LayerNorm, which the
    # LayerNorm's own output does not.
    downstream = view.input(p["intermediate"]) if square else None
    yield Step(
        where,
        view.output(p[norm_name]) if downstream is None else downstream,
        norm(summed, weights, p[norm_name], eps),
        _norm_deviations(summed, weights, p[norm_name], config, residual_in, sub),
    )


def attention(q, k, v, mask, config: BertConfig, scale=None, keys=True, invert=False, axis=-1,
              order="heads", swap=False) -> torch.Tensor:  # fmt: skip
    """BERT's attention on (B, T, H) queries, keys and values (or a deviation from it)."""
    B, T, H = q.shape
    heads = config.num_attention_heads
    d = H // heads

    def split(x):
        if order == "heads":
            return x.view(B, T, heads, d).transpose(1, 2)
        return x.view(B, T, d, heads).permute(0, 3, 1, 2)

    q, k, v = split(q), split(k), split(v)
    if swap:
        q, k = k, q
    scores = q @ k.transpose(-1, -2) / (math.sqrt(d) if scale is None else scale)
    if keys:
        keep = mask.bool()[:, None, None, :]
        scores = scores.masked_fill(keep if invert else ~keep, torch.finfo(scores.dtype).min)
    context = scores.softmax(axis) @ v
    if order == "heads":
        return context.transpose(1, 2).reshape(B, T, H)
    return context.permute(0, 2, 3, 1).reshape(B, T, H)


def _attention_deviations(own: dict, mask, config: BertConfig) -> list:
    """The attention's deviations, each as attention() computes it."""
    q, k, v = own["query"], own["key"], own["value"]
    d = config.hidden_size // config.num_attention_heads
    scaling = "the attention's scaling"
    ways = [
        (f"{scaling}: the scores divided by the head size {d}, not its square root", {"scale": d}),
        (f"{scaling} left out (BERT divides the scores by sqrt(head size))", {"scale": 1.0}),
        (
            f"{scaling}: the scores divided by sqrt(hidden_size), not sqrt(head size)",
            {"scale": math.sqrt(config.hidden_size)},
        ),
        ("no padding mask on the keys (no mask, or one applied to the queries)", {"keys": False}),
        ("the mask inverted (the padding attended to, the tokens masked)", {"invert": True}),
        ("the softmax over the queries (dim -2), not the keys", {"axis": -2}),
        (
            "the heads split in the other order (head size, heads), not (heads, head size)",
            {"order": "size"},
        ),
        ("the query and the key exchanged (K Q^T, not Q K^T)", {"swap": True}),
    ]
    return [(cause, lambda how=how: attention(q, k, v, mask, config, **how)) for cause, how in ways]


def pooler_steps(view: Values, weights: dict, config: BertConfig):
    last = view.hidden(view.names(f"encoder.layer.{config.num_hidden_layers - 1}.output.LayerNorm"))
    if last is None:
        return
    real = view.mask.bool()
    first = last[:, 0]
    dense = linear(first, weights, "pooler.dense")
    mean = (last * real[..., None]).sum(1) / real.sum(1, keepdim=True)
    final = last[torch.arange(last.shape[0]), real.sum(1) - 1]
    deviations = {
        "the mean of the tokens pooled, not the first ([CLS])": lambda: linear(
            mean, weights, "pooler.dense"
        ),
        "the last token pooled, not the first ([CLS])": lambda: linear(
            final, weights, "pooler.dense"
        ),
    } | _projection_deviations(first, weights, "pooler.dense", square=True)
    yours_dense = view.output("pooler.dense")
    yield Step("the pooler's projection", yours_dense, dense, deviations)
    dense = dense if yours_dense is None else yours_dense
    yield Step(
        "the pooler's tanh",
        view.pooled,
        torch.tanh(dense),
        {
            "no tanh on the pooled output (the pooler's tanh missing)": lambda: dense,
            "the tanh applied twice": lambda: torch.tanh(torch.tanh(dense)),
            "GELU for the pooler's tanh": lambda: F.gelu(dense),
        },
    )
