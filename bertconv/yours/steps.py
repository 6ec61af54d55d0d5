"""BERT's steps inside one output, each recomputed by bertconv's own model (the modules and
functions `bertconv.BertModel` runs, holding BERT's weights) from the user's model's values at
that step, put in place by forward hooks; and the deviations people make there, as variants of
those calls (another eps, another activation, no scaling, the heads split otherwise, ...)."""

import copy
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ACTIVATIONS, BertConfig
from ..mapping import Layout
from ..model import (
    AddNorm,
    BertModel,
    Encoder,
    SelfAttention,
    activation,
    attention,
    relative_position_bucket,
)
from .assign import ATTENTION, roles
from .reading import per_batch
from .trace import Trace, tensors_in

# the eps people write, the likeliest first where two are too close for float32 to tell
EPS = (1e-12, 1e-5, 1e-6, 1e-7, 1e-8, 1e-3)
PRE_LN = "the LayerNorm before the sublayer (pre-LN), not after it"
EXCHANGED = "the query and the key exchanged (K Q^T, not Q K^T)"
# The activations config.json can name, as a diagnosis says them (model.activation computes them)
NAMED = {
    "gelu": 'the exact (erf) GELU ("gelu")',
    "gelu_new": 'tanh-approximate GELU ("gelu_new")',
    "relu": 'ReLU ("relu")',
}
# and those people write that no config.json names.
UNNAMED: dict[str, Callable] = {
    "GELU with 1.41421 for sqrt(2)": lambda x: 0.5 * x * (1.0 + torch.erf(x / 1.41421)),
    "the sigmoid GELU, x * sigmoid(1.702 x)": lambda x: x * torch.sigmoid(1.702 * x),
    "SiLU (swish)": F.silu,
}


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
        return [*pairs, ("dropout left active", self.dropped)]

    def dropout_ratio(self) -> float | None:
        """The scale 1 / (1 - p) of a dropout left active: the kept values, over BERT's."""
        yours, bert = self.yours.float(), self.bert.float()
        dropped = (yours == 0) & (bert.abs() > 1e-6)
        kept = (yours != 0) & (bert.abs() > 1e-3)
        if not dropped.any() or not kept.any():
            return None
        ratio = float((yours[kept] / bert[kept]).median())
        return ratio if ratio > 1.01 else None

    def dropped(self) -> torch.Tensor | None:
        """BERT's values, dropped where the model's are zero, the rest scaled as dropout does."""
        ratio = self.dropout_ratio()
        return None if ratio is None else torch.where(self.yours == 0, 0.0, self.bert * ratio)


def distance(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """Max abs difference at the real positions (every row of a per-sequence output)."""
    if a.shape != b.shape:
        return math.inf
    diff = (a.float() - b.float()).abs()
    if diff.dim() >= 2 and tuple(diff.shape[:2]) == tuple(mask.shape):
        diff = diff[mask.bool()]
    value = float(diff.max()) if diff.numel() else 0.0
    return math.inf if value != value else value


def replacing(given: dict[nn.Module, object], compute: Callable[[], torch.Tensor]):
    """`compute()`, each module of `given` returning the value given instead of its own."""
    with ExitStack() as hooks:
        for module, value in given.items():
            hooks.enter_context(module.register_forward_hook(lambda _m, _a, _o, v=value: v))
        return compute()


def prefixes(table: Layout, index: int = 0) -> dict[str, str]:
    """Each unit of the table's architecture -> its official prefix, in layer `index`."""
    units = roles(table.architecture).units
    return {role: prefix.replace("{layer}", str(index)) for role, (prefix, _, _) in units.items()}


class Values:
    """What the traced model computed at each unit of BERT's, found through its table."""

    def __init__(self, trace: Trace, table: Layout, pooled: torch.Tensor | None = None):
        self.trace, self.table, self.pooled = trace, table, pooled
        self.mask = trace.inputs["attention_mask"]
        self.unseen: set[str] = set()  # the table's names no call of the trace reads

    def names(self, prefix: str) -> set[str]:
        """The model's names of a unit's tensors: a task class's encoder under its prefix."""
        names = self.table.model_names
        found = {n for part in ("weight", "bias") for n in names(f"{prefix}.{part}")}
        return (found & set(self.trace.names.values())) or found

    def _call(self, prefix: str, last: bool = True):
        names = self.names(prefix)
        uses = self.trace.uses(names)
        unseen = names - set().union(*(call.param_names for call in uses))
        self.unseen |= unseen
        if not uses or unseen:  # a part of the step out of the trace's sight: not told apart
            return None
        call = uses[-1] if last else uses[0]
        fused = {h.name for h in self.table.holders.get(f"{prefix}.weight", ()) if h.parts > 1}
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
        holders = self.table.holders.get(f"{prefix}.weight", ())
        if value is not None and holders and holders[0].parts > 1:  # one third of a fused qkv
            value = value.chunk(holders[0].parts, dim=-1)[holders[0].part]
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

    def hidden(self, prefix: str) -> torch.Tensor | None:
        """The hidden state the LayerNorm `prefix` gives, where the model last uses it."""
        call = self.trace.last_use(self.names(prefix))
        return None if call is None else self.btf(next(tensors_in(call.output), None))

    def btf(self, value) -> torch.Tensor | None:
        value = per_batch(value, self.mask)  # (B, T, F)
        return None if value is None else value.float()


# Deviations shared by the steps ----------------------------------------------------------------


def norm_deviations(x, norm: nn.Module, config: BertConfig, residual=None, sublayer=None) -> dict:
    """The LayerNorm's deviations: its eps, its variance, and where the residual goes."""
    out = {}
    for eps in (e for e in EPS if e != config.layer_norm_eps):
        other = copy.copy(norm)  # the same gamma and beta, another eps
        other.eps = eps
        cause = f"LayerNorm eps {eps:g} (the config's layer_norm_eps is {config.layer_norm_eps:g})"
        out[cause] = lambda other=other: other(x)
    g, b, eps = norm.gamma, norm.beta, config.layer_norm_eps
    out["a LayerNorm dividing by the unbiased standard deviation plus eps"] = lambda: (
        g * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) + b
    )
    if residual is not None and sublayer is not None:
        out["no residual: the LayerNorm of the sublayer's output alone"] = lambda: norm(sublayer)
        out["the residual added after the LayerNorm, not before it"] = lambda: (
            norm(sublayer) + residual
        )
    out["no LayerNorm"] = lambda: x
    return out


def projection_deviations(x, linear: nn.Linear, square: bool) -> dict:
    out = {"the projection without its bias": lambda: F.linear(x, linear.weight)}
    if square:
        out["the projection's weight used transposed (x @ W where BERT has x @ W.T)"] = lambda: (
            F.linear(x, linear.weight.T, linear.bias)
        )
    return out


def embedding_steps(view: Values, model: BertModel, config: BertConfig) -> Iterator[Step]:
    emb, p = model.embeddings, prefixes(view.table)
    ids, types = view.trace.inputs["input_ids"], view.trace.inputs["token_type_ids"]
    T, typed = ids.shape[1], emb.token_type_embeddings is not None  # DistilBERT has no types
    word = emb.word_embeddings(ids)
    yours_word = view.output(p["word embeddings"], last=False)
    yield Step("the word embeddings", yours_word, word)
    word = word if yours_word is None else yours_word
    typ = 0  # none added
    if typed:
        typ = emb.token_type_embeddings(types)
        yours_typ = view.output(p["token type embeddings"], last=False)
        yield Step("the token type embeddings", yours_typ, typ)
        typ = typ if yours_typ is None else yours_typ

    def summed(w=word, t=typ, positions=None):
        """The model's own embeddings (sum, LayerNorm) of these words, types and positions."""
        given = {emb.word_embeddings: w} | ({emb.token_type_embeddings: t} if typed else {})
        if positions is not None:
            given[emb.position_embeddings] = positions
        return replacing(given, lambda: emb(ids, types))

    table, offset = emb.position_embeddings.weight, config.pad_token_id + 1
    deviations = {}
    if typed:
        deviations["no token type embeddings (token types left out)"] = lambda: summed(t=0 * typ)
    if config.relative:  # BERT adds none: the attention has them
        deviations["position embeddings added (relative positions are the attention's)"] = lambda: (
            emb.LayerNorm(word + typ + table[:T])
        )
    elif config.positions_after_pad:  # RoBERTa's: the real tokens from the pad id + 1
        deviations |= {
            "no position embeddings (positions left out)": lambda: summed(positions=0 * table[:T]),
            f"positions counted from 0 (BERT's way), not from the pad id + 1 ({offset})": lambda: (
                summed(positions=table[:T])
            ),
            f"positions counted from 1, not from the pad id + 1 ({offset}): the pad id's offset "
            "left out": lambda: summed(positions=table[1 : T + 1]),
        }
    else:
        deviations |= {
            "no position embeddings (positions left out)": lambda: summed(positions=0 * table[:T]),
            "positions offset by one (counted from 1)": lambda: summed(positions=table[1 : T + 1]),
            f"positions offset past the pad id (from {offset}, RoBERTa's way)": lambda: summed(
                positions=table[offset : offset + T]
            ),
        }
    deviations["the word embeddings scaled by sqrt(hidden_size)"] = lambda: summed(
        w=word * math.sqrt(config.hidden_size)
    )
    read = []  # what the LayerNorm reads: the sum
    with emb.LayerNorm.register_forward_pre_hook(lambda _m, args: read.append(args[0])):
        summed()
    deviations |= norm_deviations(read[0], emb.LayerNorm, config)
    # What the first layer reads shows an embedding added after the LayerNorm, which the
    # LayerNorm's own output does not.
    if typed:
        deviations["the token type embeddings added after the LayerNorm"] = lambda: (
            summed(t=0 * typ) + typ
        )
    if not config.relative:
        deviations["the position embeddings added after the LayerNorm"] = lambda: (
            summed(positions=0 * table[:T]) + table[:T]
        )
    yours = view.input(p["query"])
    yours = view.output(p["embeddings norm"]) if yours is None else yours
    yield Step("the embeddings' sum and its LayerNorm", yours, summed(), deviations)


def layer_steps(view: Values, model: BertModel, config: BertConfig, index: int) -> Iterator[Step]:
    """A layer's steps, each from the model's own values before it."""
    block, p = model.encoder.layer[index], prefixes(view.table, index)
    sa, first, second = block.attention.self, block.attention.output, block.output
    before = prefixes(view.table, index - 1)["output norm"] if index else p["embeddings norm"]
    x = view.hidden(before)
    if x is None:
        return
    # whichever of its two LayerNorms a table takes for the first
    pre_ln = [(PRE_LN, lambda: first.LayerNorm(x)), (PRE_LN, lambda: second.LayerNorm(x))]
    yield Step("the layer's input", view.input(p["query"]), x, pre_ln)
    own = {}
    projections = dict(zip(ATTENTION, (sa.Wq, sa.Wk, sa.Wv), strict=True))
    for name, W in projections.items():
        deviations = projection_deviations(x, W, square=True)
        deviations[PRE_LN] = lambda W=W: W(first.LayerNorm(x))
        other = {"query": "key", "key": "query"}.get(name)
        if other:
            deviations[f"the {other}'s projection for the {name}'s (query and key exchanged)"] = (
                lambda o=projections[other]: o(x)
            )
        yours, bert = view.output(p[name]), W(x)
        scale = _scale(yours, bert) if name == "query" else None
        as_bert = scale is not None and math.isclose(
            scale * math.sqrt(sa.head_dim), 1, rel_tol=1e-4
        )
        if as_bert:  # the queries scaled before the scores (fairseq's way): BERT's scaling
            bert = bert * scale
        elif scale is not None:
            deviations[_scaled_after(scale, sa.head_dim)] = lambda s=scale, b=bert: b * s
        yield Step(f"the {name} projection", yours, bert, deviations)
        own[name] = yours / scale if as_bert else (bert if yours is None else yours)
    shared = model.encoder.position_bias(x.shape[1], x.device)  # MPNet's, every layer's
    context = attend(sa, own, view.mask, shared=shared)
    yours_context = view.input(p["attention output"])
    deviations = attention_deviations(sa, own, view.mask, config, shared)
    detail = ""
    if shared is not None:
        biases = bias_deviations(model.encoder, x.shape[1], config, index)
        deviations |= {cause: lambda b=b: attend(sa, own, view.mask, shared=b)
                       for cause, b in biases.items()}  # fmt: skip
        detail = f" {SHARED_BIAS}."
    name = "the attention (scores, scaling, mask, softmax)"
    yield Step(name, yours_context, context, deviations, detail)
    context = context if yours_context is None else yours_context
    dense, norm = p["attention output"], p["attention norm"]
    yield from sublayer(view, first, config, context, x, dense, norm, after=p["intermediate"])
    mid = view.output(p["attention norm"])
    mid = first(context, x) if mid is None else mid
    dense = block.intermediate.dense
    deviations = projection_deviations(mid, dense, square=False)
    deviations[PRE_LN] = lambda: dense(second.LayerNorm(mid))
    yours_inter = view.output(p["intermediate"])
    yield Step("the feed-forward's first projection", yours_inter, dense(mid), deviations)
    inter = dense(mid) if yours_inter is None else yours_inter
    yours_act = view.input(p["output"])
    yield activation_step(yours_act, inter, config)
    activated = activation(config.hidden_act)(inter) if yours_act is None else yours_act
    yield from sublayer(view, second, config, activated, mid, p["output"], p["output norm"])


def _scale(yours: torch.Tensor | None, bert: torch.Tensor) -> float | None:
    """The constant the model multiplied BERT's projection by, read off their ratio where it
    is one (None where they differ otherwise, or agree)."""
    if yours is None or yours.shape != bert.shape:
        return None
    big = bert.abs() > 1e-3
    if not big.any():
        return None
    scale = float((yours[big] / bert[big]).median())
    return None if math.isclose(scale, 1.0, rel_tol=1e-4) or scale == 0 else scale


def _scaled_after(scale: float, d: int) -> str:
    root = 1 / math.sqrt(d)
    said = (
        f"1/sqrt({round(1 / scale**2)})"
        if math.isclose(1 / scale**2, round(1 / scale**2), rel_tol=1e-4)
        else f"{scale:.6g}"
    )
    return (
        f"the queries multiplied by a fixed {scale:.6g} ({said}) after their projection, where "
        f"heads {d} wide are scaled by 1/sqrt({d}) = {root:.6g} (BERT divides the scores by "
        "sqrt(head size))"
    )


def activation_step(yours, inter: torch.Tensor, config: BertConfig) -> Step:
    """The feed-forward's activation: config.json's, by the model's own activation(); each
    other one people use, as a deviation."""
    ours = ACTIVATIONS[config.hidden_act]
    named = next(NAMED[n] for n, spec in ACTIVATIONS.items() if n in NAMED and spec == ours)
    deviations = {
        NAMED[n]: lambda n=n: activation(n)(inter)
        for n, spec in ACTIVATIONS.items()
        if n in NAMED and spec != ours
    }
    deviations |= {cause: lambda f=f: f(inter) for cause, f in UNNAMED.items()}
    detail = f' The config\'s hidden_act is "{config.hidden_act}", {named}.'
    bert = activation(config.hidden_act)(inter)
    return Step("the feed-forward's activation", yours, bert, deviations, detail)


def sublayer(view: Values, add_norm: AddNorm, config, x_in, residual, dense, norm, after=None):
    """A sublayer's output projection, then its residual and LayerNorm (the model's AddNorm);
    `after`: the unit that reads its output, for the attention's."""
    out, yours, mask = add_norm.dense(x_in), view.output(dense), view.mask
    residual_in = residual
    if yours is not None and distance(yours, out + residual, mask) < distance(yours, out, mask):
        out, residual_in = out + residual, None  # the bias added after the residual: one call
    square = after is not None
    what = "the attention's output projection" if square else "the feed-forward's second projection"
    yield Step(what, yours, out, projection_deviations(x_in, add_norm.dense, square))
    sub = out if yours is None else yours
    if residual_in is None:
        summed, bert = sub, add_norm.LayerNorm(sub)
    else:
        summed = sub + residual
        bert = replacing({add_norm.dense: sub}, lambda: add_norm(x_in, residual))
    where = "the attention's" if square else "the feed-forward's"
    # What the next step reads shows a residual added after the LayerNorm, which the
    # LayerNorm's own output does not.
    downstream = view.input(after) if square else None
    normed = view.output(norm) if downstream is None else downstream
    deviations = norm_deviations(summed, add_norm.LayerNorm, config, residual_in, sub)
    yield Step(f"{where} residual and LayerNorm", normed, bert, deviations)


def attend(sa: SelfAttention, own: dict, mask, divisor=None, keys="real", split="heads",
           swap=False, axis=-1, shared=None) -> torch.Tensor:  # fmt: skip
    """The model's attention (its split_heads, relative scores and model.attention) on the
    user's (B, T, H) queries, keys and values; or a deviation from it: the scores divided by
    another `divisor` than sqrt(head size),
    the mask on no keys or `inverted`, the heads `split` (head size, heads), q and k `swap`ped,
    the softmax over another `axis`. `shared`: a bias every layer adds (MPNet's)."""
    B, T, H = own["query"].shape
    q, k, v = (_split(sa, own[n], split) for n in ATTENTION)
    if swap:
        q, k = k, q
    bias = sa.relative_scores(q, k) if hasattr(sa, "distance_embedding") else None
    if shared is not None:
        bias = shared if bias is None else bias + shared
    key_mask = mask.bool()[:, None, None, :]
    if keys == "inverted":  # the real tokens hidden (a row of nothing but them: uniform)
        hidden = torch.zeros(key_mask.shape).masked_fill(key_mask, torch.finfo(q.dtype).min)
        bias = hidden if bias is None else bias + hidden
    if keys != "real":
        key_mask = None
    if (divisor, keys, split, swap, axis) == (None, "real", "heads", False, -1):
        context = attention(q, k, v, key_mask, bias)  # (B, heads, T, head_dim)
    else:  # a deviation, written out as people write it
        scores = q @ k.transpose(-1, -2) / (divisor or math.sqrt(sa.head_dim))
        scores = scores + (0 if bias is None else bias)
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask, torch.finfo(scores.dtype).min)
        context = scores.softmax(axis) @ v
    if split == "heads":
        return context.transpose(1, 2).reshape(B, T, H)
    return context.permute(0, 2, 3, 1).reshape(B, T, H)


def _split(sa: SelfAttention, x: torch.Tensor, split: str) -> torch.Tensor:
    if split == "heads":
        return sa.split_heads(x)
    B, T, _ = x.shape
    return x.view(B, T, sa.head_dim, sa.num_heads).permute(0, 3, 1, 2)


def attention_deviations(sa: SelfAttention, own: dict, mask, config: BertConfig, shared=None):
    """The attention's deviations, each as attend() computes it (`shared`: MPNet's bias)."""
    scaling, d = "the attention's scaling: the scores divided by", sa.head_dim
    ways = {
        f"{scaling} the head size {d}, not its square root": dict(divisor=d),
        "the attention's scaling left out (BERT divides the scores by sqrt(head size))": dict(
            divisor=1.0
        ),
        f"{scaling} sqrt(hidden_size), not sqrt(head size)": dict(
            divisor=math.sqrt(config.hidden_size)
        ),
        "no padding mask on the keys (no mask, or one applied to the queries)": dict(keys="none"),
        "the mask inverted (the padding attended to, the tokens masked)": dict(keys="inverted"),
        "the softmax over the queries (dim -2), not the keys": dict(axis=-2),
        "the heads split in the other order (head size, heads), not (heads, head size)": dict(
            split="size"
        ),
        EXCHANGED: dict(swap=True),
    }
    if d != 64:  # 1/8 written in: BERT-base's sqrt(64), right for heads of 64 only
        fixed = f"{scaling} a fixed 8 (sqrt(64): BERT-base's heads), not sqrt(head size {d})"
        ways[f"{fixed}: as the queries multiplied by a fixed 0.125 (1/sqrt(64))"] = dict(
            divisor=8.0
        )
    return {cause: lambda how=how: attend(sa, own, mask, **how, shared=shared)
            for cause, how in ways.items()}  # fmt: skip


SHARED_BIAS = (
    "MPNet adds one relative attention bias to every layer's scaled scores: the encoder's table "
    "(a number per head) read at the bucket of each key-minus-query distance, 32 buckets (half "
    "for keys before the query, half after), exact below 8, logarithmic up to 128"
)


def bias_deviations(encoder: Encoder, T: int, config: BertConfig, index: int) -> dict:
    """MPNet's shared relative bias as ports get it wrong: {cause: the (1, heads, T, T) bias
    added instead (None: none)}, read from the encoder's own table."""
    table = encoder.relative_attention_bias
    place = torch.arange(T, device=table.weight.device)
    distance = place[None, :] - place[:, None]  # key - query

    def bias(d, buckets=32, farthest=128):
        found = relative_position_bucket(d, buckets, farthest)
        return table(found).permute(2, 0, 1)[None] if found.max() < len(table.weight) else None

    said, out = config.relative_attention_num_buckets, {}
    for n in (b for b in dict.fromkeys((said, 16, 64, 8, 128)) if b != 32):
        why = " (config.json's relative_attention_num_buckets: transformers makes 32 whatever"
        why = f"{why} it says)" if n == said else ""
        out[f"the relative bias's distances in {n} buckets, not 32{why}"] = bias(distance, n)
    for far in (256, 64, 512, 32):
        out[f"the relative bias's buckets growing up to a distance of {far}, not 128"] = bias(
            distance, farthest=far
        )
    out = {cause: b for cause, b in out.items() if b is not None}  # a table too short for them
    out["the relative bias's distances the other way round (query minus key, not key minus "
        "query: the halves of its buckets exchanged)"] = bias(-distance)  # fmt: skip
    out["the relative bias subtracted from the scores, not added"] = -bias(distance)
    where = "left out" if index == 0 else "not added in this layer, only in those before it"
    out[f"the shared relative attention bias {where} (MPNet adds it in every layer)"] = None
    return out


def pooler_steps(view: Values, model: BertModel, config: BertConfig) -> Iterator[Step]:
    last = view.hidden(prefixes(view.table, config.num_hidden_layers - 1)["output norm"])
    if last is None:
        return
    pooler, real = model.pooler, view.mask.bool()
    first = last[:, 0]
    mean = (last * real[..., None]).sum(1) / real.sum(1, keepdim=True)
    final = last[torch.arange(last.shape[0]), real.sum(1) - 1]
    deviations = {
        "the mean of the tokens pooled, not the first ([CLS])": lambda: pooler.dense(mean),
        "the last token pooled, not the first ([CLS])": lambda: pooler.dense(final),
    } | projection_deviations(first, pooler.dense, square=True)
    yours_dense = view.output(prefixes(view.table)["pooler"])
    yield Step("the pooler's projection", yours_dense, pooler.dense(first), deviations)
    dense = pooler.dense(first) if yours_dense is None else yours_dense
    bert = replacing({pooler.dense: dense}, lambda: pooler(last))
    deviations = {
        "no tanh on the pooled output (the pooler's tanh missing)": lambda: dense,
        "the tanh applied twice": lambda: torch.tanh(bert),
        "GELU for the pooler's tanh": lambda: F.gelu(dense),
    }
    yield Step("the pooler's tanh", view.pooled, bert, deviations)
