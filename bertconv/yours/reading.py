"""What a user's model computed, read from a traced forward (harness.Run): each hidden state where
the model computes it (the last call reading the LayerNorm the table names for it), the pooler
as the model makes it, each head's outputs as the rows verify compares."""

import torch

from ..config import BertConfig
from ..errors import UsageError
from ..mapping import Layout
from ..outputs import EMBEDDINGS, POOLER, SENTENCE, Head, Note, Output, layer
from .harness import Run
from .trace import fields, tensors_in

LAST = "last_layer"  # a catalog's anchor of the last layer's state, where not the others' kind


class Anchors(dict):
    """{output: the user's tensors whose last use returns it}; `sums`: the outputs that are
    instead the residual sum that call's output is added into (a pre-LN layer's state)."""

    sums: frozenset[Output] = frozenset()
    # where an anchor's tensors are never used (a port with no final norm), the tensors whose
    # residual sum holds the state instead
    fallback: dict[Output, set[str]] = {}


def anchors(table: Layout, config: BertConfig, groups: set[str]) -> Anchors:
    """The anchors of `table`'s model: the embeddings, each layer (the last one where the
    catalog reads it apart: after ModernBERT's final norm), the pooler and each head of
    `groups` the table maps (a head by its group)."""
    arch, layers = table.architecture, config.num_hidden_layers
    out = Anchors()
    for key, officials in arch.anchors.items():
        if key not in ("embeddings", "layer") and key not in groups:
            continue
        count = layers if key == "layer" else 1
        for i in range(count):
            label = Output(key, i + 1 if key == "layer" else None)
            users = _users(table, officials, i)
            if label == layer(layers) and LAST in arch.anchors:
                out.fallback = {label: users}
                users = _users(table, arch.anchors[LAST], i)
            if users:
                out[label] = users
    if arch.residual_layers:
        out.sums = frozenset(layer(i + 1) for i in range(layers)) - {layer(layers)}
    return out


def _users(table: Layout, officials, index: int) -> set[str]:
    return {n for o in officials for n in table.model_names(o.replace("{layer}", str(index)))}


def read(run: Run, found: dict[Output, set[str]]) -> dict[Output, torch.Tensor | None]:
    """What the model computed at each anchor, at real positions (None: its forward never did)."""
    mask = run.batch["attention_mask"]
    returned = {id(t) for t in tensors_in(run.output)}
    out: dict[Output, torch.Tensor | None] = {}
    for label, names in found.items():
        call = run.trace.last_use(names)
        if call is not None and label in getattr(found, "sums", ()):
            call = run.trace.residual_sum(call)
        elif call is None and label in getattr(found, "fallback", {}):
            before = run.trace.last_use(found.fallback[label])
            call = before and run.trace.residual_sum(before)
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


def misread_pooler(run: Run, found: dict[Output, set[str]], named: dict) -> Note | None:
    """Why the pooler the model computes is not one vector per sequence, where it is not: what
    its dense layer reads (x[0], one sequence's tokens, for x[:, 0], each one's first)."""
    value, rows = named.get(POOLER), run.batch["input_ids"].reshape(-1, _tokens(run)).shape[0]
    states = [v for k, v in named.items() if k.hidden]
    if value is None or not states or tuple(value.shape) == (rows, states[0].shape[-1]):
        return None  # no hidden state computed (a forward that returns a cached one): its rows fail
    hidden = states[0].shape[-1]
    call = run.trace.last_use(found[POOLER])
    weights = {i for i, _ in call.params}
    read = next(t for i, t in enumerate(call.inputs) if i not in weights)
    what = f"a tensor of shape {tuple(read.shape)}"
    if tuple(read.shape) == (_tokens(run), hidden):
        what = "one sequence's tokens (tokens, hidden), x[0] for x[:, 0]?"
    return Note(
        f"pooler: your model's pooler reads {what}, where BERT's reads the first token of each "
        "sequence (batch, hidden): it computes no pooled output (the row: NaN)"
    )


def head_input(run: Run, found: dict[Output, set[str]], names: set[str]) -> Output | None:
    """Which compared output the head of tensors `names` reads (through a dropout, an
    activation: calls of no weight on it alone), by the trace: the output whose anchor made its
    first call's input; None where it is none of them."""
    uses = run.trace.uses(names)
    if not uses:
        return None
    made = {}
    for label, anchor in found.items():
        if (call := run.trace.last_use(anchor)) is not None:
            made[call.index] = label
    first, weights = uses[0], {i for i, _ in uses[0].params}
    at = next((p for i, p in enumerate(first.producers) if i not in weights), None)
    while at is not None and at not in made:
        call = run.trace.calls[at]
        before = [p for p in call.producers if p is not None]
        if call.params or len(before) != 1:
            return None
        at = before[0]
    return made.get(at)


def _tokens(run: Run) -> int:
    return run.batch["input_ids"].shape[-1]


def head_rows(group: str, value: torch.Tensor, heads: list[Head], mask: torch.Tensor) -> dict:
    """A head's output as the rows verify compares: per token at the real positions, QA's
    start and end apart, multiple choice's scores as (items, choices)."""
    rows = [head for head in heads if head.output.kind == group]
    out = {}
    for i, head in enumerate(rows):
        part = at_real_positions(value, mask, head.output) if head.per_token else value
        part = part[..., i] if len(rows) > 1 else part
        part = part.squeeze(-1) if head.score and part.shape[-1:] == (1,) else part
        out[head.output] = part.reshape(mask.shape[0], -1) if group == "choice" else part
    return out


def returned(run: Run, named: dict, lenient: bool, sentence: int | None = None) -> tuple:
    """What the forward returned, set against what each tensor stands for: per token and of
    hidden size, the last layer (in a list of one per layer, or + 1, each hidden state in turn);
    per sequence and of hidden size, the pooler; else the head of its shape. Gives {output: the
    returned value} where it is not what the model computed (the last layer NaN where nothing
    returned is compared, unless `lenient` and it returns a tensor: a head the checkpoint lacks,
    not compared), and why. A returned tensor that is what the model computed is compared where
    computed, whatever stands beside it (the embeddings beside the last layer: noted). Where the
    directory computes a sentence embedding of width `sentence` and the model has no pooler, a
    tensor of one such vector per sequence is its sentence embedding (SENTENCE)."""
    layers = [k.index for k in named if k.kind == "layer"]
    if not layers:  # no hidden state computed where the table says: those rows fail as NaN
        return {}, []
    mask = run.batch["attention_mask"]
    mask = mask.reshape(-1, mask.shape[-1]).bool()
    last = layer(max(layers))
    stands_for = _standing_for(run.output, named, last, mask, sentence)
    wrong = {SENTENCE: stands_for.pop(SENTENCE)[0]} if SENTENCE in stands_for else {}
    notes = []
    for label in sorted(stands_for, key=list(named).index):  # in the report's order
        values = stands_for[label]
        value, said = _set_against(label, values, named, named[last].dtype)
        notes += said
        if value is not None:
            wrong[label] = value
    if not stands_for and not wrong and not (lenient and any(True for _ in tensors_in(run.output))):
        wrong[last] = torch.full_like(named[last], float("nan"))
        what = f"{type(run.output).__name__}, nothing that stands for a compared output"
        notes.append(Note(f"your forward returns {what} (the row: NaN)", (last,)))
    return wrong, _together(notes)


def _together(notes: list[Note]) -> list[Note]:
    """Each note once, and the outputs that one note is said of named in one (layers 1-6)."""
    said: dict[Note, tuple[Output, ...]] = {}
    for note in dict.fromkeys(notes):
        alone = Note(note.text)
        said[alone] = said.get(alone, ()) + note.inside
    return [Note(note.text, inside) for note, inside in said.items()]


def _standing_for(output, named: dict, last: Output, mask, sentence: int | None) -> dict:
    """{a compared output: the returned tensors (at real positions) that stand for it}, each
    returned tensor once (a dict's last_hidden_state may be its hidden_states[-1] too)."""
    hidden = named[last].shape[-1]
    labels = {}
    for seq in _sequences(output):
        if len(seq) in (last.index, last.index + 1) and all(_per_token(t, hidden) for t in seq):
            first = last.index + 1 - len(seq)
            labels |= {id(t): layer(i) if i else EMBEDDINGS for i, t in enumerate(seq, first)}
    out: dict[Output, list] = {}
    for t in {id(t): t for t in tensors_in(output)}.values():
        if (value := real(t, mask)) is None:
            continue
        if _per_token(t, hidden):
            label = labels.get(id(t), last)
        elif _sentence_vector(value, mask, hidden, sentence, named):
            label = SENTENCE  # not the pooler: a sentence vector (before Dense, or after)
        elif value.shape == (len(mask), hidden):
            label = POOLER
        else:
            same = [k for k, v in named.items() if v.shape == value.shape]
            label = (_equal_to(value, named) or same or [None])[0]
        if label in named or label == SENTENCE:
            out.setdefault(label, []).append(value)
    return out


def _sentence_vector(value, mask, hidden: int, sentence: int | None, named: dict) -> bool:
    """Where the directory computes a sentence vector of width `sentence`: is `value` one vector
    per sequence of that width (or the encoder's), and not the pooler the model computes?"""
    widths = (hidden, sentence)
    per_text = value.dim() == 2 and len(value) == len(mask) and value.shape[-1] in widths
    pooler = POOLER in named and bool(_equal_to(value, {POOLER: named[POOLER]}))
    return bool(sentence) and per_text and not pooler


def _set_against(label: Output, values: list, named: dict, dtype) -> tuple:
    """The value to compare for `label` where the returned ones are not what the model computed
    (None where one is), and what to say of them: a tensor standing beside the one that is, one
    in another dtype than the model computes in (`dtype`: compared as returned, rounded), a
    head's log-softmax or softmax (the logits compared where computed)."""
    inside = named[label]
    notes = [
        Note(
            f"{label}: your forward returns it in {_dtype(v)}, rounded from the {_dtype(dtype)} "
            "it computes in: compared as returned"
        )
        for v in values[:1]
        if v.is_floating_point() and v.dtype != dtype and dtype != torch.float64
    ]
    if any(_equal_to(v, {label: inside}) for v in values):
        return None, notes + [
            Note(
                f"{label}: beside it your forward returns {_what(v, named, beside=True)} "
                "(not compared)"
            )
            for v in values
            if not _equal_to(v, {label: inside})
        ]
    value = values[0]
    if notes:
        return value.to(inside.dtype), notes
    if not label.hidden and label != POOLER and (how := _normalised(value, inside)):
        said = f"{label}: your forward returns their {how}; compared where it computes them"
        return None, [Note(said)]
    return value.to(inside.dtype), [
        Note(f"your forward returns {_what(value, named)} in its place", (label,))
    ]


def _equal_to(value: torch.Tensor, named: dict) -> list[Output]:
    """The compared outputs `value` is (to float32's rounding of what is computed): the very
    values first (a head's logits returned as computed: no second pass over them)."""
    return [k for k, v in named.items() if v.shape == value.shape and _close(v, value)]


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype == b.dtype and torch.equal(a, b):
        return True
    return torch.allclose(a.float(), b.float(), 0, 1e-6)


def _what(value: torch.Tensor, named: dict, beside: bool = False) -> str:
    equal = _equal_to(value, named)
    if equal:
        return f"the {equal[0]} output"
    return "a tensor computed nowhere inside it" if beside else "no output computed inside it"


def _normalised(value: torch.Tensor, logits: torch.Tensor) -> str | None:
    """`value` as the log-softmax or the softmax of the logits `logits` over its last
    dimension (BERT-pytorch's MLM head returns the former), or their sigmoid (an ELECTRA
    discriminator's probabilities); None where it is none of them."""
    if value.shape != logits.shape or not value.is_floating_point():
        return None
    logits = logits.float()
    over_last = [("log-softmax", torch.log_softmax), ("softmax", torch.softmax)]
    found = [(n, f(logits, -1)) for n, f in over_last if value.dim() >= 2]
    for name, made in [*found, ("sigmoid", torch.sigmoid(logits))]:
        if torch.allclose(value.float(), made, 0, 1e-5):
            return name
    return None


def _dtype(t: torch.Tensor | torch.dtype) -> str:
    return str(getattr(t, "dtype", t)).removeprefix("torch.")


def _per_token(t, hidden: int) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[-1] == hidden


def _sequences(value, depth: int = 0):
    """The tuples and lists in a returned value (in dicts and objects' fields too), outermost
    first."""
    value = fields(value)
    if isinstance(value, tuple | list) and depth < 4:
        yield value
        for item in value:
            yield from _sequences(item, depth + 1)
