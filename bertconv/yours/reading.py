"""What a user's model computed, read from a traced forward (harness.Run): each hidden state where
the model computes it (the last call reading the LayerNorm the table names for it), the pooler
as the model makes it, each head's outputs as the rows verify compares."""

import torch

from ..catalog import anchors as catalog_anchors
from ..config import BertConfig
from ..errors import UsageError
from ..mapping import Table
from ..outputs import EMBEDDINGS, POOLER, Head, Output, layer
from .harness import Run
from .trace import tensors_in


def anchors(table: Table, config: BertConfig, groups: set[str]) -> dict[Output, set[str]]:
    """{output: the user's tensors whose last use returns it}, through `table`: the embeddings,
    each layer, the pooler and each head of `groups` the table maps (a head by its group)."""
    out = {}
    for key, officials in catalog_anchors(config.model_type).items():
        if key not in ("embeddings", "layer") and key not in groups:
            continue
        count = config.num_hidden_layers if key == "layer" else 1
        for i in range(count):
            label = Output(key, i + 1 if key == "layer" else None)
            users = {n for o in officials for n in table.names_for(o.replace("{layer}", str(i)))}
            if users:
                out[label] = users
    return out


def read(run: Run, found: dict[Output, set[str]]) -> dict[Output, torch.Tensor | None]:
    """What the model computed at each anchor, at real positions (None: its forward never did)."""
    mask = run.batch["attention_mask"]
    returned = {id(t) for t in tensors_in(run.output)}
    out: dict[Output, torch.Tensor | None] = {}
    for label, names in found.items():
        call = run.trace.last_use(names)
        if call is None:
            out[label] = None
        elif label == POOLER:
            chain = run.trace.unary_chain(call)
            given = [t for t in chain if id(t) in returned]
            out[label] = (given or chain)[-1]
        elif label.hidden:
            out[label] = at_real_positions(next(tensors_in(call.output)), mask, label)
        else:  # a head's: head_rows reads it
            out[label] = next(tensors_in(call.output))
    return out


def per_batch(value, mask: torch.Tensor) -> torch.Tensor | None:
    """A per-token value as (B, T, F), from (B, T, F), (T, B, F), (B * T, F) or the real tokens
    packed (N, F); a per-sequence one (B, F) as it is; None for any other."""
    if not isinstance(value, torch.Tensor):
        return None
    real = mask.bool()
    B, T = real.shape
    if value.dim() == 3 and tuple(value.shape[:2]) in ((B, T), (T, B)):
        return value if tuple(value.shape[:2]) == (B, T) else value.transpose(0, 1)
    if value.dim() == 2 and value.shape[0] == B * T:
        return value.reshape(B, T, -1)
    if value.dim() == 2 and value.shape[0] == int(real.sum()):
        return value.new_zeros(B, T, value.shape[-1]).index_put_((real,), value)
    return value if value.dim() == 2 and value.shape[0] == B else None


def real(value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """An output at the real tokens, (N, features) or (N,) of a per-token score (B, T); a
    per-sequence output (B, F) as it is; None for another shape."""
    full = value[mask.bool()] if tuple(value.shape) == tuple(mask.shape) else per_batch(value, mask)
    return full[mask.bool()] if full is not None and full.dim() == 3 else full


def at_real_positions(value: torch.Tensor, mask: torch.Tensor, label: Output) -> torch.Tensor:
    if (full := real(value, mask)) is None:
        raise UsageError(
            f"the model's {label} has shape {tuple(value.shape)}, which is not (batch, tokens, "
            f"features) for a batch of {tuple(mask.shape)}"
        )
    return full


def outputs_of(
    run: Run, found: dict[Output, set[str]], heads: list[Head]
) -> tuple[dict[Output, torch.Tensor], list[Output]]:
    """The compared outputs of a traced forward: hidden states and the pooler at their anchors,
    and each head's outputs as the rows `heads` names; and the anchors its forward never used."""
    named, unused, state = {}, [], None
    for label, value in read(run, found).items():
        if value is None:
            unused.append(label)
            if label.hidden and state is not None:  # a layer skipped: the state it carries on
                named[label] = state
        elif label.hidden or label == POOLER:
            named[label] = state = value
        else:
            named |= head_rows(label.kind, value, heads, run.batch["attention_mask"])
    return named, unused


def head_rows(group: str, value: torch.Tensor, heads: list[Head], mask: torch.Tensor) -> dict:
    """A head's output as the rows verify compares: per token at the real positions, QA's
    start and end apart, multiple choice's scores as (items, choices)."""
    rows = [head for head in heads if head.output.kind == group]
    out = {}
    for i, head in enumerate(rows):
        part = at_real_positions(value, mask, head.output) if head.per_token else value
        part = part[..., i] if len(rows) > 1 else part
        out[head.output] = part.reshape(mask.shape[0], -1) if group == "choice" else part
    return out


def returned(run: Run, named: dict, lenient: bool) -> tuple[dict, list[str]]:
    """What the forward returned, set against what each tensor stands for: per token and of
    hidden size, the last layer (in a list of one per layer, or + 1, each hidden state in turn);
    per sequence and of hidden size, the pooler; else the head of its shape. Gives {output: the
    returned value} where it is not what the model computed (the last layer NaN where nothing
    returned is compared, unless `lenient` and it returns a tensor: a head the checkpoint lacks,
    not compared), and why."""
    mask = run.batch["attention_mask"]
    mask = mask.reshape(-1, mask.shape[-1]).bool()
    last = layer(max(k.index for k in named if k.kind == "layer"))
    hidden, wrong, notes, labels = named[last].shape[-1], {}, [], {}
    for seq in _sequences(run.output):
        if len(seq) in (last.index, last.index + 1) and all(_per_token(t, hidden) for t in seq):
            first = last.index + 1 - len(seq)
            labels |= {id(t): layer(i) if i else EMBEDDINGS for i, t in enumerate(seq, first)}
    tensors, placed = list(tensors_in(run.output)), False
    for t in tensors:
        if (value := real(t, mask)) is None:
            continue
        same = [k for k, v in named.items() if v.shape == value.shape]
        equal = [k for k in same if torch.allclose(named[k], value, 0, 1e-6)]
        if _per_token(t, hidden):
            label = labels.get(id(t), last)
        else:
            label = POOLER if value.shape == (len(mask), hidden) else (equal or same or [None])[0]
        placed |= label in named
        if label in named and label not in equal:
            wrong[label] = value.to(named[label].dtype)
            match = f"the {equal[0]} output" if equal else "no output computed inside it"
            notes.append(f"{label} as computed inside: your forward returns {match} in its place")
    if not placed and not (lenient and tensors):
        wrong[last] = torch.full_like(named[last], float("nan"))
        what = f"{type(run.output).__name__}, nothing that stands for a compared output"
        notes.append(f"{last} as computed inside: your forward returns {what} (the row: NaN)")
    return wrong, notes


def _per_token(t, hidden: int) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[-1] == hidden


def _sequences(value, depth: int = 0):
    """The tuples and lists in a returned value (in dicts too), outermost first."""
    value = list(value.values()) if isinstance(value, dict) else value
    if isinstance(value, tuple | list) and depth < 4:
        yield value
        for item in value:
            yield from _sequences(item, depth + 1)
