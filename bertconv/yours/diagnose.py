"""When a model differs from BERT: where, and why.

Given a traced forward of the model (trace.py), the table of its names and BERT's weights, the
first output that failed (the embeddings, a layer, the pooler) is taken apart step by step. Each
step is recomputed by bertconv's own model (steps.py: the same modules and functions
`bertconv.BertModel` runs) from the model's own values at that step (so that an earlier,
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
import os
from dataclasses import asdict, dataclass, field

import torch

from ..errors import listed
from ..mapping import Layout
from ..model import BertModel
from ..outputs import Output
from .steps import (
    EXCHANGED,
    Step,
    Values,
    distance,
    embedding_steps,
    layer_steps,
    pooler_steps,
    prefixes,
)
from .trace import Trace

# A step agrees where it is within this of BERT's, relative to its scale: float32 rounding of
# one step recomputed from the same inputs is far below it.
STEP_TOLERANCE = 1e-6
# A deviation explains a step where it reproduces the model's values this many times better
# than BERT's way does (a small deviation, GELU's sqrt(2) as 1.41421, stays under any tolerance).
CLEAR = 10.0


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
    table: bool = False  # the cause is the table's (its rows exchanged), not the model's
    whole: bool = False  # confirmed by the whole model recomputed so (variants.py), not a step

    def to_dict(self) -> dict:
        return asdict(self)

    def message(self) -> str:
        if self.step is None and self.max_abs != self.max_abs:  # not taken apart (or random)
            why = self.cause or f"bertconv could not take it apart step by step ({self.detail})"
            return f"{self.row}: {why}."
        agree = _together([name for name, _ in self.agreeing])
        worst = max((d for _, d in self.agreeing), default=0.0)
        if self.step is None:
            return (
                f"{self.row}: every step agrees with BERT recomputed from your model's own values"
                f" ({agree}, <= {worst:.1e}); the difference ({self.max_abs:.1e}) builds up "
                "across them."
            )
        verb = "agrees" if len(self.agreeing) == 1 else "agree"
        before = f"; {agree} {verb} (<= {worst:.1e})" if agree else ""
        first = f"{self.row}: {self.step} differs (max abs {self.max_abs:.1e}){before}.\n"
        if self.cause:
            whose = "The table gives" if self.table else "Your model computes"
            how = (
                "bertconv's model recomputed that way, in every layer, from the same weights,"
                if self.whole
                else "this step recomputed that way from your model's own values"
            )
            return (
                f"{first}{whose} {self.cause}: {how} gives what it computed (max abs "
                f"{self.confirmed_max_abs:.1e}).{self.detail}"
            )
        return (
            f"{first}No deviation bertconv knows explains it: {self.step} computes something "
            f"else than BERT's.{self.detail}"
        )


def _together(names: list[str]) -> str:
    """Steps named in a list, the query, key and value projections as one."""
    qkv = [f"the {n} projection" for n in ("query", "key", "value")]
    if all(n in names for n in qkv):
        at = names.index(qkv[0])
        names = [n for n in names if n not in qkv]
        names.insert(at, "the query, key and value projections")
    return ", ".join(names)


def diagnose(trace: Trace, table: Layout, bert: BertModel, row: Output, pooled=None, varies=False):
    """Take the failing output `row` apart, in a traced forward (`trace`) of a model holding
    BERT's weights through `table` (`pooled`: its pooled output, as verify read it), each step
    recomputed by `bert`, bertconv's model holding the same weights (in float32, on the CPU).
    `varies`: a second forward of the same batch gave other outputs. None where the row is not
    one bertconv looks inside (a head's)."""
    if row.kind not in ("embeddings", "layer", "pooler"):
        return None
    view, config = Values(trace, table, pooled), bert.config
    try:
        if row.kind == "layer":
            steps = layer_steps(view, bert, config, row.index - 1)
        else:
            steps = (embedding_steps if row.kind == "embeddings" else pooler_steps)(
                view, bert, config
            )
        with torch.inference_mode():
            found = walk(str(row), steps, view.mask)
        if found.cause == EXCHANGED:
            found = _exchanged_rows(found, table, config)
        if found.step is None and view.unseen:
            found = Diagnosis(str(row), None, math.nan, cause=_unseen(view.unseen, found))
    except (RuntimeError, ValueError, IndexError, KeyError, NotImplementedError) as e:
        # A model laid out in a way no step foresaw: the failing row stands, said plainly.
        found = Diagnosis(str(row), None, math.nan, detail=f"{type(e).__name__}: {e}"[:300])
    if found.cause or not varies:
        return found
    return Diagnosis(str(row), None, math.nan, cause=left_active(trace))


def _exchanged_rows(found: Diagnosis, table: Layout, config) -> Diagnosis:
    """K Q^T is also a table mapping the model's key to BERT's query and its query to BERT's
    key: the model's names say which (`k` given the query's weights, `q` the key's)."""
    p = prefixes(table)
    query, key = (sorted(table.names_for(f"{p[r]}.weight")) for r in ("query", "key"))
    if len(query) != 1 or len(key) != 1 or query == key:
        return found  # a fused projection: its names cannot say
    a, b = query[0], key[0]
    start = len(os.path.commonprefix([a, b]))
    end = len(os.path.commonprefix([a[::-1], b[::-1]]))
    told = a[start : len(a) - end].lower(), b[start : len(b) - end].lower()
    if not (told[0].startswith("k") and told[1].startswith("q")):
        return found
    found.table = True
    found.cause = (
        f"{a} BERT's query weights and {b} its key's: the table's query and key rows exchanged"
        " (as your model names them)"
    )
    return found


def _unseen(names: set[str], found: Diagnosis) -> str:
    """Why no step could be compared: the model's tensors its traced forward never reads."""
    shown = listed(sorted(names))
    if not found.agreeing:
        return (
            f"your model's forward never uses its tensors {shown}, which hold this output: it"
            " skips it, so none of its steps can be compared"
        )
    return (
        f"bertconv never sees your model use {shown} (left unused, or used out of the trace's"
        " sight: a compiled extension, TorchScript loaded from a file); the steps reading them"
        " cannot be compared, so no cause is confirmed"
    )


def left_active(trace: Trace) -> str:
    """Why two forwards of one batch differ: a dropout its forward leaves active (`F.dropout(x,
    p, training=True)`, a Bernoulli mask), named after the module whose parameters were read
    last before it; or another random draw. No step can be compared."""
    last = "the embeddings"
    for call in trace.calls:
        p = call.kwargs.get("p", call.args[1] if len(call.args) > 1 else 0.5)
        on = call.kwargs.get("training", call.args[2] if len(call.args) > 2 else True)
        if ("dropout" in call.name and on and p) or call.name.startswith("bernoulli"):
            return (
                f"dropout left active after {last} ({call.name} in training mode, p = {p}): two "
                "runs of the same batch differ, so no step of it can be compared with BERT's"
            )
        last = min(call.param_names, default=f"{last}.").rpartition(".")[0] or last
    return (
        "outputs that differ between two forwards of the same batch (a random draw in its "
        "forward: noise, or a dropout of its own in training mode), so no step of it can be "
        "compared with BERT's"
    )


def walk(row: str, steps, mask: torch.Tensor) -> Diagnosis:
    """The first step that differs, and the deviation that explains it."""
    agreeing = []
    for step in steps:
        if step.yours is None or step.yours.shape != step.bert.shape:
            continue  # not told apart in this model (inside nn.MultiheadAttention, say)
        d0 = distance(step.yours, step.bert, mask)
        scale = max(1.0, float(step.bert.abs().max()))
        cause, d1 = _explained(step, mask, d0, scale)
        if d0 > STEP_TOLERANCE * scale or cause is not None:
            return Diagnosis(row, step.name, d0, agreeing, cause, d1, step.detail)
        agreeing.append((step.name, d0))
    return Diagnosis(row, None, max((d for _, d in agreeing), default=0.0), agreeing)


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
        # distance: infinite for a value of another shape (walk has the model's of BERT's shape)
        if value is not None and (d := distance(step.yours, value, mask)) < best_d:
            best, best_d = cause, d
    if best is not None and best_d * CLEAR < d0 and best_d <= STEP_TOLERANCE * scale:
        if best == "dropout left active":
            p = 1 - 1 / step.dropout_ratio()
            best = f"dropout left active (p = {p:.2f}: the model in training mode?)"
        return best, best_d
    return None, None
