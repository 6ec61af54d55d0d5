"""The likeliest ways a model's units can be BERT's (an assignment of roles), and its table."""

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cache

from ..catalog import ENCODER, TOKEN_TYPES, Architecture
from ..config import BertConfig
from .units import UNUSED, Unit, split_role, words

OUT_OF_ORDER = 6  # assignments run where none is in an order BERT's could be


# The heads read once per sequence (from the pooled output) and those read per token, with the
# width of each: fixed, or None for a classifier's, which is its label count (read off its shape).
SEQUENCE = {"nsp": 2, "classifier": None}
PER_TOKEN = {"token classifier": None, "qa": 2}
# The query, key and value: read from one input, in any order (a fused unit holds all three).
ATTENTION = ("query", "key", "value")
GATED = ("intermediate", "up")  # a gated feed-forward's two projections of one input
DISCRIMINATOR = "discriminator"  # ELECTRA's head: its role and group
SHARED_HEAD = "head"  # ModernBERT's prediction head, which every head of its begins with


@dataclass(frozen=True)
class Roles:
    """BERT's units from the architecture's catalog (its `[units]`, in the order BERT computes
    them), and what infer needs to know of each, read off the catalog's tensors."""

    units: dict[str, tuple[str, str, frozenset[str]]]  # role -> (official prefix, group, hints)
    layer: tuple[str, ...]  # a layer's, in order: the prefix has {layer}
    # a table (a matrix, no bias) -> config.json's fields of its rows and columns (the hidden
    # size; MPNet's relative bias: the heads)
    embeddings: dict[str, tuple[str, str]]
    single: tuple[str, ...]  # one tensor, `prefix` itself (the masked LM's bias)
    before: dict[str, tuple[str, ...]]  # a layer's role -> the roles it reads the output of


@cache
def roles(arch: Architecture, token_types: bool = True) -> Roles:
    """`token_types`: False for a model with no token type table (held without: [holding])."""
    shapes = {n: d for g, s in arch.tensors.items() for n, d in s.items()}
    left_out = set() if token_types else {TOKEN_TYPES}
    units = {r: (u["prefix"], u["group"], frozenset(u["hints"]))
             for r, u in arch.units.items() if r not in left_out}  # fmt: skip
    layer = tuple(r for r, (prefix, _, _) in units.items() if "{layer}" in prefix)
    embeddings = {  # the encoder's tables outside its layers (not a projection without bias)
        r: tuple(shapes[f"{prefix}.weight"])
        for r, (prefix, group, _) in units.items()
        if len(shapes.get(f"{prefix}.weight", ())) == 2
        and f"{prefix}.bias" not in shapes
        and group == ENCODER
        and "{layer}" not in prefix
    }
    single = tuple(r for r, (prefix, _, _) in units.items() if prefix in shapes)
    # Each unit of a layer reads the one before it; the attention's output reads all three.
    # A gated feed-forward's two projections read one input, in either order, as the three do.
    together = [tuple(r for r in g if r in layer) for g in (ATTENTION, GATED)]
    group = {r: g for g in together for r in g}
    before = {}
    for previous, role in itertools.pairwise(layer):
        if role in group and previous in group[role]:
            continue  # one of a parallel group: it reads what the first of them reads
        for member in group.get(role, (role,)):
            before[member] = group.get(previous, (previous,))
    return Roles(units, layer, embeddings, single, before)


@dataclass
class Assignment:
    """Which unit is each of BERT's, and how."""

    units: dict[str, Unit]  # role -> unit
    transposed: dict[str, bool] = field(default_factory=dict)  # role -> stored (in, out)
    swapped: frozenset[str] = frozenset()  # norms whose two tensors are the other way round
    fused: tuple[str, ...] = ("query", "key", "value")  # the order a fused unit holds them
    # a gated feed-forward's two projections in one unit (ModernBERT's Wi): the order it holds
    # the activated one and the up one
    gated: tuple[str, ...] = ("intermediate", "up")


@dataclass
class Model:
    """The user's model as infer sees it: its units in a layer (layer 0's) and outside."""

    layer: list[Unit]
    outside: list[Unit]
    patterns: dict[str, str]  # every tensor's name -> its name with {layer}
    tied: dict[str, str]  # a second name of a parameter -> its first
    config: BertConfig
    architecture: Architecture
    declared: frozenset[str] = frozenset()  # the groups of config.json's `architectures`

    @property
    def roles(self) -> Roles:
        return roles(self.architecture, self.config.token_types)

    def tables(self) -> dict[tuple[str, tuple[int, int]], list[Unit]]:
        """Each embedding's (role, shape), with the units outside the layers that can be it:
        (rows, columns), or (1, rows, columns) kept to broadcast over the batch."""
        sizes = {
            r: tuple(getattr(self.config, f) for f in fields)
            for r, fields in self.roles.embeddings.items()
        }
        return {
            (r, s): [u for u in self.outside if u.bias is None and u.shape in (s, (1, *s))]
            for r, s in sizes.items()
        }


def fits(unit: Unit, out: int, inp: int) -> list[bool]:
    """How a unit can be a projection inp -> out: stored (out, in) [False] or (in, out) [True],
    as its use showed, or either where its use did not show it."""
    if unit.kind not in ("linear", "other") or unit.shape[2:] not in ((), (1,)):
        return []  # (out, in), (in, out), or Conv1d's (out, in, 1)
    options = [unit.transposed] if unit.transposed is not None else [False, True]
    return [
        t for t in dict.fromkeys(options) if unit.shape[:2] == ((inp, out) if t else (out, inp))
    ]


def is_norm(unit: Unit, h: int, bias: bool = True) -> bool:
    """Can `unit` be a LayerNorm of the hidden size (with a bias, or, `bias` False, either)?"""
    with_bias = unit.bias is not None or not bias
    return unit.kind in ("norm", "other") and unit.shape == (h,) and with_bias


def _hint(unit: Unit, role: str, known: Roles) -> int:
    """Name hints a unit's name holds; one of two words (`seq_relationship`) counts twice."""
    hints = known.units[role][2]
    return len(words(unit.weight) & hints) + 2 * sum("_" in w and w in unit.weight for w in hints)


def layer_choices(model: Model) -> Iterator[Assignment]:
    """Every way a layer's units can be BERT's, the likeliest first: the query, key and value
    (or a fused unit) the first square projections the forward uses, then the attention's
    output, the first LayerNorm, the feed-forward, the second."""
    h, i = model.config.hidden_size, model.config.intermediate_size
    units = model.layer
    norms = [u for u in units if is_norm(u, h)]
    square = [u for u in units if fits(u, h, h)]
    fused = [u for u in units if fits(u, 3 * h, h)]
    ffn_in = [(u, t) for u in units for t in fits(u, i, h)]
    ffn_out = [(u, t) for u in units for t in fits(u, h, i)]
    options = []
    for (inter, ti), (out, to) in itertools.product(ffn_in, ffn_out):
        if inter is out:
            continue
        for ln1, ln2 in itertools.permutations(norms, 2):
            base = {"intermediate": inter, "output": out, "attention norm": ln1, "output norm": ln2}
            flips = {"intermediate": ti, "output": to}
            options += _attention_choices(base, flips, square, fused)
    ranked = sorted(options, key=lambda a: -_score(a, model.roles))
    in_order = [a for a in ranked if _in_order(a, model.roles.before)]
    # A model whose units are used in no order BERT's could be does not compute BERT: a few of
    # its assignments are run, to say where the closest diverges.
    for choice in in_order or ranked[:OUT_OF_ORDER]:
        yield from _swaps(choice, ("attention norm", "output norm"))


def _in_order(choice: Assignment, before: dict[str, tuple[str, ...]]) -> bool:
    """Could the forward have used the units in this order? A unit computed from another is
    used after it (where the trace saw both used), so the attention's output projection is the
    square one used last, the first LayerNorm the one used first."""
    units = choice.units
    return all(
        units[role].order > units[earlier].order
        for role, earlier_roles in before.items()
        for earlier in earlier_roles
        if units[role] is not units[earlier]
        and max(units[role].order, units[earlier].order) < UNUSED
    )


def _attention_choices(
    base: dict, flips: dict, square: list[Unit], fused: list[Unit], h: int | None = None
) -> list:
    roles = ("query", "key", "value", "attention output")
    taken = set(map(id, base.values()))
    free = [u for u in square if id(u) not in taken]
    h = h or base["output norm"].shape[0]
    out = []
    for perm in itertools.permutations(free, 4):
        units = base | dict(zip(roles, perm, strict=True))
        for stored in itertools.product(*(fits(u, h, h) for u in perm)):
            out.append(Assignment(units, flips | dict(zip(roles, stored, strict=True))))
    for qkv in fused:
        for order in itertools.permutations(roles[:3]):
            for o in free:
                units = base | {"query": qkv, "key": qkv, "value": qkv, "attention output": o}
                for tq, to in itertools.product(fits(qkv, 3 * h, h), fits(o, h, h)):
                    stored = {"query": tq, "key": tq, "value": tq, "attention output": to}
                    out.append(Assignment(units, flips | stored, fused=order))
    return out


def modern_layer_choices(model: Model) -> Iterator[Assignment]:
    """Every way a layer's units can be a modern encoder's (ModernBERT's pre-LN block, or
    NomicBERT's post-LN one, gated, without biases), the likeliest first: the query, key and
    value (or a fused unit), the attention's output, the feed-forward's activated projection
    and its up projection (or one unit holding both, either way round), the one back, and the
    two LayerNorms in the order the forward uses them."""
    h, i = model.config.hidden_size, model.config.intermediate_size
    units = model.layer
    norms = [u for u in units if is_norm(u, h, model.config.norm_bias)]
    square = [u for u in units if fits(u, h, h)]
    fused = [u for u in units if fits(u, 3 * h, h)]
    halves = [(u, t) for u in units for t in fits(u, i, h)]
    both = [(u, t) for u in units for t in fits(u, 2 * i, h)]
    ffn_out = [(u, t) for u in units for t in fits(u, h, i)]
    first, second = [r for r in model.roles.layer if r.endswith("norm")][:2]
    feeds = []  # (units, stored, gated order)
    for (a, ta), (b, tb) in itertools.permutations(halves, 2):
        if a is not b:
            feeds.append(({"intermediate": a, "up": b}, {"intermediate": ta, "up": tb}, None))
    for (u, t), order in itertools.product(both, (("intermediate", "up"), ("up", "intermediate"))):
        feeds.append(({"intermediate": u, "up": u}, {"intermediate": t, "up": t}, order))
    options = []
    for (feed, stored, order), (out, to) in itertools.product(feeds, ffn_out):
        if any(out is u for u in feed.values()):
            continue
        for n1, n2 in itertools.permutations(norms, 2):
            base = feed | {"output": out, first: n1, second: n2}
            flips = stored | {"output": to}
            for choice in _attention_choices(base, flips, square, fused, h):
                options.append(replace(choice, gated=order or choice.gated))
    ranked = sorted(options, key=lambda a: -_score(a, model.roles) + (a.gated[0] != "intermediate"))
    in_order = [a for a in ranked if _in_order(a, model.roles.before)]
    yield from in_order or ranked[:OUT_OF_ORDER]


def modern_global_choices(model: Model) -> Iterator[Assignment]:
    """The units outside the layers as a modern encoder's: its tables (the words; NomicBERT's
    token types), the embeddings' norm, and (ModernBERT's) the final norm, used after them."""
    h, roles = model.config.hidden_size, model.roles.units
    tables = {role: units for (role, _), units in model.tables().items()}
    norms = sorted(
        (u for u in model.outside if is_norm(u, h, model.config.norm_bias)), key=lambda u: u.order
    )
    wanted = [r for r in ("embeddings norm", "final norm") if r in roles]
    options = []
    for embeddings in itertools.product(*tables.values()):
        if len(set(map(id, embeddings))) < len(tables):
            continue
        for chosen_norms in itertools.permutations(norms, len(wanted)):
            chosen = dict(zip(tables, embeddings, strict=True))
            options.append(Assignment(chosen | dict(zip(wanted, chosen_norms, strict=True))))
    yield from sorted(options, key=lambda a: -_embedding_score(a, model.roles))


def _score(choice: Assignment, known: Roles) -> float:
    """How well the order of use, name hints and storage agree with an assignment: BERT's
    order of computation first, names second."""
    score = 0.0
    seen = [choice.units[r] for r in known.layer if r in choice.units]
    distinct = list({id(u): u for u in seen}.values())
    score += 4 * sum(a.order < b.order for a, b in itertools.pairwise(distinct))
    score += sum(_hint(u, r, known) for r, u in choice.units.items() if r in known.layer)
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
    return unit.kind == "norm" or [split_role(n)[1] for n in unit.names] == ["weight", "bias"]


def global_choices(model: Model) -> Iterator[Assignment]:
    """Every way the units outside the layers can be the embeddings, the likeliest first."""
    h = model.config.hidden_size
    tables = {role: units for (role, _), units in model.tables().items()}
    norms = [u for u in model.outside if is_norm(u, h)]
    options = []
    for embeddings in itertools.product(*tables.values()):
        if len(set(map(id, embeddings))) < len(tables):
            continue
        for norm in norms:
            chosen = dict(zip(tables, embeddings, strict=True)) | {"embeddings norm": norm}
            options.append(Assignment(chosen))
    ranked = sorted(options, key=lambda a: -_embedding_score(a, model.roles))
    for choice in ranked:
        yield from _swaps(choice, ("embeddings norm",))


def _embedding_score(choice: Assignment, known: Roles) -> float:
    """Embeddings read as BERT's are: the words by the ids, the types by the token types; the
    LayerNorm the first outside the layers."""
    units = choice.units
    score = 2 * ("input_ids" in units["word embeddings"].lookup)
    if TOKEN_TYPES in units:
        score += 2 * ("token_type_ids" in units[TOKEN_TYPES].lookup)
    if "position embeddings" in units:  # rotary encoders have no table of them
        score += 2 * (not units["position embeddings"].lookup & {"input_ids", "token_type_ids"})
    score += sum(_hint(u, r, known) for r, u in units.items())
    return score - units["embeddings norm"].order / UNUSED


def pooler_choices(model: Model, taken: set[int]) -> list[Assignment]:
    """The pooler: a square projection outside the layers, those used once per sequence first."""
    h = model.config.hidden_size
    if "pooler" not in model.roles.units:  # an architecture without one (ELECTRA's)
        return []
    free = [u for u in model.outside if id(u) not in taken]
    free.sort(key=lambda u: (u.per_token, -_hint(u, "pooler", model.roles)))
    return [Assignment({"pooler": u}, {"pooler": t}) for u in free for t in fits(u, h, h)]


def width(unit: Unit, h: int) -> int | None:
    """How many outputs a projection of the hidden state has (a head's labels), read off its
    shape as its use stored it; None for a unit that is no such projection, or a square one
    (a pooler's, a masked LM's transform: never a head of labels)."""
    widths = {n for n in unit.shape[:2] if fits(unit, n, h)} - {h}
    return widths.pop() if len(widths) == 1 else None


def head_role(unit: Unit, model: Model, beside: set[str]) -> str | None:
    """The head a unit outside the layers is (read once per sequence, or per token): the only
    one of its width a class holds beside the heads placed (`beside`: NSP beside a masked-LM
    head; a classifier, of any label count, where the width is not 2); of two that fit (NSP or
    a 2-label classifier, QA or a 2-tag tagger), the one config.json's `architectures` names,
    else the one its name says, else per token QA; per sequence never the one its width
    suggests (None where nothing says)."""
    n = width(unit, model.config.hidden_size)
    held = [c.groups for c in model.architecture.classes.values()]
    kinds = PER_TOKEN if unit.per_token else SEQUENCE
    fitting = [r for r, w in kinds.items() if n is not None and w in (None, n)]
    fitting = [r for r in fitting if r in model.roles.units]  # the architecture's heads
    group = {r: model.roles.units[r][1] for r in fitting}
    fitting = [r for r in fitting if any(beside | {group[r]} <= set(g) for g in held)]
    if len(fitting) <= 1:
        return fitting[0] if fitting else None
    declared = {r: 9 * (group[r] in model.declared) for r in fitting}  # first
    hints = {r: declared[r] + _hint(unit, r, model.roles) for r in fitting}
    named = [r for r in fitting if hints[r] > sum(hints.values()) / 2]
    return named[0] if named else "qa" if unit.per_token else None


def labelled(choice: Assignment) -> Unit | None:
    """The classifier (per sequence or per token) a choice places, whose width is its label
    count whatever config.num_labels says (a head of 2 labels written `nn.Linear(h, 2)`)."""
    return next(
        (choice.units[r] for r in ("classifier", "token classifier") if r in choice.units), None
    )


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

    if DISCRIMINATOR in model.roles.units:  # ELECTRA's, before a square unit is taken for MLM's
        _discriminator(free, h, pick)
    pick("mlm transform", [(u, t) for u in free for t in fits(u, h, h)], True)
    norms = [u for u in free if is_norm(u, h)]
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
    beside = {model.roles.units[r][1] for r in units}
    for per_token in (False, True):  # the heads of the pooled output first
        for unit in (u for u in free if u.per_token == per_token):
            role = head_role(unit, model, beside)
            if role and role not in units:
                pick(role, [(unit, t) for t in fits(unit, width(unit, h), h)], per_token)
    return [Assignment(units, flips)] if units else []


def modern_head_choices(model: Model, taken: set[int], word: Unit) -> list[Assignment]:
    """ModernBERT's heads: its prediction head (a square projection, then a norm, used after
    the layers) before the decoder (the word embeddings, tied) and its bias, or before a
    classifier of the sequence (as wide as its labels)."""
    c, h = model.config, model.config.hidden_size
    free = sorted((u for u in model.outside if id(u) not in taken), key=lambda u: u.order)
    squares = [(u, t) for u in free for t in fits(u, h, h)]
    norms = [u for u in free if is_norm(u, h, c.norm_bias)]
    if "mlm transform" not in model.roles.units or not squares or not norms:
        return []
    (dense, stored), norm = squares[0], norms[0]
    units, flips = {"mlm transform": dense, "mlm norm": norm}, {"mlm transform": stored}
    rest = [u for u in free if u is not dense and u is not norm]
    biases = [u for u in rest if u.shape == (c.vocab_size,)]
    labels = [(u, t) for u in rest if (n := width(u, h)) for t in fits(u, n, h)]
    if biases:
        units["mlm bias"] = biases[0]
    elif labels and "classifier" in model.roles.units:
        units["classifier"], flips["classifier"] = labels[0]
    else:
        return []
    return [Assignment(units, flips)]


def _discriminator(free: list[Unit], h: int, pick) -> None:
    """ELECTRA's discriminator: a score per token (a projection of width 1) of the square
    projection per token computed just before it."""
    scores = [(u, t) for u in free if u.per_token for t in fits(u, 1, h)]
    if not scores:
        return
    before = [(u, t) for u in free for t in fits(u, h, h) if u.order < scores[0][0].order]
    if before:
        pick(DISCRIMINATOR, scores[:1], True)
        pick(f"{DISCRIMINATOR} dense", [max(before, key=lambda c: c[0].order)], True)


# From an assignment to a table ---------------------------------------------------------------


def sections(choice: Assignment, model: Model) -> dict[str, dict[str, object]]:
    """The table's sections: {group: {the user's name: its row's value}}."""
    out: dict[str, dict[str, object]] = {}
    known = model.roles
    for role in (r for r in known.units if r in choice.units):  # BERT's order
        unit, (prefix, group, _) = choice.units[role], known.units[role]
        target = out.setdefault(group, {})
        if role in known.single:
            target[model.patterns[unit.weight]] = prefix
        elif role in choice.fused and unit.fused == 3:  # the same rows for the three
            target.update(_fused_rows(unit, choice, model))
        elif role in choice.gated and choice.units.get("up") is choice.units.get("intermediate"):
            target.update(_fused_rows(unit, choice, model, choice.gated))
        else:
            target.update(_unit_rows(unit, prefix, choice, role, model))
    return out


def _unit_rows(unit: Unit, prefix: str, choice: Assignment, role: str, model: Model) -> dict:
    name = model.patterns
    if unit.bias is None:  # an embedding, maybe kept as (1, n, h); a projection without bias
        official = f"{prefix}.weight"
        transform = "unsqueeze" if len(unit.shape) == 3 and unit.kind != "linear" else None
        transform = transform or ("transpose" if choice.transposed.get(role) else None)
        return {name[unit.weight]: {transform: official} if transform else official}
    weight, bias = (unit.bias, unit.weight) if role in choice.swapped else (unit.weight, unit.bias)
    transform = "conv1d" if len(unit.shape) == 3 else choice.transposed.get(role) and "transpose"
    rows = {
        name[weight]: {transform: f"{prefix}.weight"} if transform else f"{prefix}.weight",
        name[bias]: f"{prefix}.bias",
    }
    return dict(sorted(rows.items(), key=lambda kv: kv[0] != name[unit.weight]))


def _fused_rows(unit: Unit, choice: Assignment, model: Model, roles=None) -> dict:
    roles = roles or choice.fused
    prefixes = [model.roles.units[role][0] for role in roles]
    kind = "concat_transposed" if choice.transposed[roles[0]] else "concat"
    out = {model.patterns[unit.weight]: {kind: [f"{p}.weight" for p in prefixes]}}
    if unit.bias is not None:
        out[model.patterns[unit.bias]] = {"concat": [f"{p}.bias" for p in prefixes]}
    return out


def dense_rows(dense, own: list[Unit], patterns: dict[str, str]) -> dict[str, str]:
    """The [sentence] rows of a sentence-transformers directory's Dense layer (`dense`; None:
    none): the first of the model's own projections of its shape, stored (out, in) as Dense's
    is, with a bias where it has one."""
    if dense is None:
        return {}
    shape = (dense.out_features, dense.in_features)
    found = [u for u in own if u.shape == shape and u.transposed is not True]
    unit = next((u for u in found if (u.bias is not None) == dense.bias), None)
    if unit is None:
        return {}
    rows = {patterns[unit.weight]: "Dense.linear.weight"}
    return rows | ({patterns[unit.bias]: "Dense.linear.bias"} if unit.bias else {})


def raw_table(
    name: str, rows: dict, model: Model, generated: dict, own: list[str], holding: dict,
    sentence: dict | None = None,
) -> dict:  # fmt: skip
    """`holding`: how the model holds BERT's family ([holding]; empty: as BERT); `sentence`:
    its tensors of sentence-transformers' modules."""
    raw = {"name": name, "description": "inferred", ENCODER: rows.get(ENCODER, {})}
    raw |= {"holding": holding} if holding else {}
    raw |= {"own": own} if own else {}
    raw |= {"sentence": sentence} if sentence else {}
    groups = {g: r for g, r in rows.items() if g != ENCODER and r}
    if groups:
        raw["groups"] = groups
    if model.tied:  # by pattern where both are a layer's, else as named (one layer's copy)
        raw["tied"] = {
            **{k: v for k, v in model.tied.items()},
            **{model.patterns[k]: model.patterns[v] for k, v in model.tied.items()
               if ("{layer}" in model.patterns[k]) == ("{layer}" in model.patterns[v])},
        }  # fmt: skip
        raw["tied"] = {k: v for k, v in raw["tied"].items() if not _covered(k, raw["tied"])}
    if generated:
        raw["generated"] = generated
    return raw


def _covered(name: str, tied: dict) -> bool:
    """Is `name`, one layer's, among the names a pattern of `tied` already gives?"""
    return "{layer}" not in name and any(
        "{layer}" in p and re.fullmatch(re.escape(p).replace(r"\{layer\}", "[0-9]+"), name)
        for p in tied
    )


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
    if raw.get("own"):
        why = "# The model's own, from no checkpoint (never loaded, never compared)."
        lines += ["", why, f"own = {_toml(raw['own'])}"]
    if "pooler" in raw.get("groups", {}):
        why = "# Its class builds the pooler: a file without one cannot load into it."
        lines += ["", why, 'requires = ["pooler"]']
    how = "# How it holds BERT's family: where its positions count from, its token type rows."
    blocks = [(f"{how}\n[holding]", raw.get("holding", {})), (f"[{ENCODER}]", raw[ENCODER])]
    blocks += [(f"[groups.{g}]", rows) for g, rows in raw.get("groups", {}).items()]
    blocks += [("[tied]", raw.get("tied", {})), ("[generated]", raw.get("generated", {}))]
    dense = "# The Dense layer of the sentence embedding, from the directory's module folder."
    blocks += [(f"{dense}\n[sentence]", raw.get("sentence", {}))]
    for title, section in blocks:
        if section:
            lines += ["", title] + [f"{_toml(k)} = {_toml(v)}" for k, v in section.items()]
    return "\n".join(lines) + "\n"


def _toml(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value, ensure_ascii=False)  # a string, a number, a list of them: as in JSON
