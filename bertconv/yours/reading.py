"""What a user's model computed, read from a traced forward (harness.Run): each hidden state where
the model computes it (the last call reading the LayerNorm the table names for it), the pooler
as the model makes it, each head's outputs as the rows verify compares."""

import torch

from .. import mapping
from ..errors import UsageError
from ..mapping import Table
from .harness import Run
from .trace import tensors_in


def anchors(table: Table, layers: int, groups: set[str]) -> dict[str, set[str]]:
    """{hidden state or head: the user's tensors whose last use returns it}, through `table`:
    `embeddings`, `layer 1` .. `layer N`, `pooler` and each head of `groups` the table maps."""
    holders: dict[str, set[str]] = {}
    for row in table.rows.values():
        for official in row.official:
            holders.setdefault(official, set()).add(row.name)
    for copy, original in table.tied.items():  # a tied decoder is read under either name
        for official in table.rows[original].official:
            holders.setdefault(official, set()).add(copy)
    out = {}
    for key, officials in mapping.anchors().items():
        if key not in ("embeddings", "layer") and key not in groups:
            continue
        labels = [f"layer {i + 1}" for i in range(layers)] if key == "layer" else [key]
        for i, label in enumerate(labels):
            names = {o.replace("{layer}", str(i)) for o in officials}
            users = set().union(*(holders.get(n, set()) for n in names))
            if users:
                out[label] = users
    return out


def read(run: Run, found: dict[str, set[str]]) -> dict[str, torch.Tensor | None]:
    """What the model computed at each anchor, at real positions; None where its forward never
    used the anchor's tensors."""
    mask = run.batch["attention_mask"]
    returned = {id(t) for t in tensors_in(run.output)}
    out: dict[str, torch.Tensor | None] = {}
    for label, names in found.items():
        call = run.trace.last_use(names)
        if call is None:
            out[label] = None
        elif label == "pooler":
            chain = run.trace.unary_chain(call)
            given = [t for t in chain if id(t) in returned]
            out[label] = (given or chain)[-1]
        elif label == "embeddings" or label.startswith("layer "):
            out[label] = at_real_positions(next(tensors_in(call.output)), mask, label)
        else:  # a head's: head_rows reads it
            out[label] = next(tensors_in(call.output))
    return out


def at_real_positions(value: torch.Tensor, mask: torch.Tensor, label: str) -> torch.Tensor:
    """An output at the real tokens, (N, features), from (B, T, F), (T, B, F), (B * T, F) or
    already packed (N, F); a per-sequence output (B, F) as it is."""
    real = mask.bool()
    B, T = real.shape
    if value.dim() == 3 and tuple(value.shape[:2]) == (B, T):
        return value[real]
    if value.dim() == 3 and tuple(value.shape[:2]) == (T, B):
        return value.transpose(0, 1)[real]
    if value.dim() == 2 and value.shape[0] == B * T and int(real.sum()) != B * T:
        return value.view(B, T, -1)[real]
    if value.dim() == 2 and value.shape[0] in (int(real.sum()), B):
        return value
    raise UsageError(
        f"the model's {label} has shape {tuple(value.shape)}, which is not (batch, tokens, "
        f"features) for a batch of {(B, T)}"
    )


def outputs_of(run: Run, found: dict[str, set[str]], heads) -> tuple[dict, list[str]]:
    """The compared outputs of a traced forward: hidden states and the pooler at their anchors,
    and each head's outputs as the rows `heads` names (mapping.outputs); and the anchors its
    forward never used."""
    named, unused = {}, []
    for label, value in read(run, found).items():
        if value is None:
            unused.append(label)
        elif label in ("embeddings", "pooler") or label.startswith("layer "):
            named[label] = value
        else:
            named |= head_rows(label, value, heads, run.batch["attention_mask"])
    return named, unused


def head_rows(group: str, value: torch.Tensor, heads, mask: torch.Tensor) -> dict:
    """A head's output as the rows verify compares: per token at the real positions, QA's
    start and end apart, multiple choice's scores as (items, choices)."""
    rows = [(row, per_token) for row, _, per_token in heads if row.startswith(f"{group} ")]
    out = {}
    for i, (row, per_token) in enumerate(rows):
        part = at_real_positions(value, mask, row) if per_token else value
        part = part[..., i] if len(rows) > 1 else part
        out[row] = part.reshape(mask.shape[0], -1) if group == "choice" else part
    return out
