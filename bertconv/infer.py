"""A mapping table inferred for a from-scratch BERT: which of its tensors is which official one.

    bertconv infer PKG.MODULE:NAME [--config CONFIG] [--out TABLE]

The model is built on a small config whose sizes all differ (so that a shape says much), and its
tensors are gathered into units: a weight with its bias, a LayerNorm's gamma with its beta, an
embedding. Each unit is matched to a unit of BERT's (the query projection, the first LayerNorm,
...) by its shape, stored as it is, transposed (a raw parameter used as `x @ W`) or fused (the
query, key and value in one tensor); candidates are ranked by name hints (`q`, `Wq`, `query`;
`ln1`, `norm2`; `gamma`, `beta`) and the order the model registers them in. What shapes cannot
tell apart (the four square projections of a layer, its two LayerNorms) is settled by running
the model: each candidate table, best first, is loaded with the weights of a random BERT and
its hidden states compared with transformers' at every layer; the first within the float32
tolerance is the table. A model no candidate makes compute BERT (a pre-LayerNorm block, a
missing part) is refused, naming where the closest candidate diverges.
"""

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from . import storage, usermodel
from .config import BertConfig
from .errors import UsageError
from .mapping import ENCODER, Table

# Sizes that all differ, so that a tensor's shape tells what it can be.
PROBE = dict(
    vocab_size=83,
    hidden_size=24,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=40,
    max_position_embeddings=29,
    type_vocab_size=2,
)
TOLERANCE = 1e-5
MAX_TRIALS = 5000  # candidate tables run before giving up
WEIGHT_WORDS = {"weight", "w", "gamma", "g", "scale", "kernel"}
BIAS_WORDS = {"bias", "b", "beta"}

# BERT's units, with the words from-scratch code names them by. A unit's official tensors are
# PREFIX.weight and PREFIX.bias (an embedding: PREFIX.weight alone).
LAYER_UNITS = {
    "query": ("encoder.layer.{layer}.attention.self.query", {"q", "query", "wq", "queries"}),
    "key": ("encoder.layer.{layer}.attention.self.key", {"k", "key", "wk", "keys"}),
    "value": ("encoder.layer.{layer}.attention.self.value", {"v", "value", "wv", "values"}),
    "attention output": (
        "encoder.layer.{layer}.attention.output.dense",
        {"o", "out", "output", "proj", "wo", "attention", "attn", "dense", "c_proj"},
    ),
    "attention norm": (
        "encoder.layer.{layer}.attention.output.LayerNorm",
        {"ln1", "norm1", "ln_1", "attention", "attn", "sa", "first"},
    ),
    "intermediate": (
        "encoder.layer.{layer}.intermediate.dense",
        {"intermediate", "interm", "fc1", "ff1", "w1", "up", "in", "c_fc", "lin1"},
    ),
    "output": (
        "encoder.layer.{layer}.output.dense",
        {"output", "out", "fc2", "ff2", "w2", "down", "lin2"},
    ),
    "output norm": (
        "encoder.layer.{layer}.output.LayerNorm",
        {"ln2", "norm2", "ln_2", "output", "out", "ffn", "ff", "mlp", "final", "second"},
    ),
}
GLOBAL_UNITS = {
    "word embeddings": ("embeddings.word_embeddings", {"word", "words", "tok", "token", "wte"}),
    "position embeddings": (
        "embeddings.position_embeddings",
        {"pos", "position", "positions", "wpe", "positional"},
    ),
    "token type embeddings": (
        "embeddings.token_type_embeddings",
        {"type", "types", "segment", "seg", "tk", "token_type", "tt"},
    ),
    "embeddings norm": ("embeddings.LayerNorm", {"emb", "embed", "embedding", "embeddings"}),
    "pooler": ("pooler.dense", {"pooler", "pool", "pooled"}),
}
NORMS = ("attention norm", "output norm", "embeddings norm")
EMBEDDINGS = ("word embeddings", "position embeddings", "token type embeddings")


@dataclass
class Unit:
    """A weight with its bias (or a LayerNorm's gamma with beta; or an embedding alone)."""

    key: str  # the name with the weight/bias word taken out (with {layer} in a layer)
    weight: tuple[str, tuple[int, ...]] | None = None
    bias: tuple[str, tuple[int, ...]] | None = None
    order: int = 0  # where the model registers it
    words: set[str] = field(default_factory=set)


@dataclass
class Choice:
    """Which user unit fills each of BERT's units, and how."""

    units: dict[str, Unit]  # BERT's unit -> the user's
    transposed: dict[str, bool]  # BERT's unit -> its weight stored (in, out)
    fused: tuple[str, ...] = ()  # the BERT units one fused user unit holds, in its order
    swapped: frozenset[str] = frozenset()  # norms whose two tensors are the other way round


@dataclass
class Inference:
    """What `bertconv infer` found: the table, and how well its best candidate did."""

    text: str | None  # the table, as a TOML file; None where nothing computes BERT
    checked: dict[str, float]  # hidden state -> max abs difference from transformers
    trials: int
    reason: str | None = None  # why no table was found


def words(name: str) -> set[str]:
    """The words of a name: `attn.W_qkv` -> {attn, w, qkv}; `tkTypeEmb` -> {tk, type, emb}."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w and not w.isdigit()}


# The model's tensors, as units -----------------------------------------------------------------


def layer_pattern(names: list[str], layers: int) -> dict[str, str]:
    """Each name with its layer index replaced by `{layer}` (names outside the layers as they
    are). The index is the number in a name that runs over 0..layers-1 where the rest of the
    name stays the same: `blocks.1.mlp.0.weight` -> `blocks.{layer}.mlp.0.weight`."""
    seen: dict[str, set[int]] = {}
    candidates: dict[str, list[tuple[str, int]]] = {}
    for name in names:
        parts = name.split(".")
        for i, part in enumerate(parts):
            match = re.fullmatch(r"(\D*)(\d+)", part)
            if match:
                pattern = ".".join([*parts[:i], match.group(1) + "{layer}", *parts[i + 1 :]])
                seen.setdefault(pattern, set()).add(int(match.group(2)))
                candidates.setdefault(name, []).append((pattern, int(match.group(2))))
    full = set(range(layers))
    out = {}
    for name in names:
        patterns = [p for p, _ in candidates.get(name, []) if seen[p] == full]
        out[name] = patterns[0] if patterns else name
    return out


def units_of(state_dict: dict[str, torch.Tensor], layers: int) -> tuple[list[Unit], list[Unit]]:
    """The model's units in a layer (named with {layer}) and outside the layers."""
    patterns = layer_pattern(list(state_dict), layers)
    by_key: dict[str, Unit] = {}
    for order, (name, tensor) in enumerate(state_dict.items()):
        pattern = patterns[name]
        if name != pattern.replace("{layer}", "0", 1) and "{layer}" in pattern:
            continue  # another layer's copy of layer 0's tensor
        key, role = _split_role(pattern)
        unit = by_key.setdefault(key, Unit(key, order=order, words=words(key)))
        slot = (pattern, tuple(tensor.shape))
        if role == "bias" or (role is None and unit.weight is not None and tensor.dim() == 1):
            unit.bias = slot
        elif unit.weight is None:
            unit.weight = slot
        else:
            unit.bias = slot
    found = list(by_key.values())
    return [u for u in found if "{layer}" in u.key], [u for u in found if "{layer}" not in u.key]


def _split_role(name: str) -> tuple[str, str | None]:
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


# Candidates -----------------------------------------------------------------------------------


def _shape_of(unit: Unit) -> tuple:
    return unit.weight[1] if unit.weight else ()


def _linear_fits(unit: Unit, out: int, inp: int) -> list[bool]:
    """How a unit can be a Linear(inp -> out): [False] stored (out, in), [True] (in, out)."""
    if not unit.weight or len(unit.weight[1]) != 2:
        return []
    if unit.bias is not None and unit.bias[1] != (out,):
        return []
    fits = []
    if unit.weight[1] == (out, inp):
        fits.append(False)
    if unit.weight[1] == (inp, out):
        fits.append(True)
    return fits


def _is_norm(unit: Unit, h: int) -> bool:
    return (
        unit.weight is not None
        and unit.weight[1] == (h,)
        and unit.bias is not None
        and unit.bias[1] == (h,)
    )


def _hint(unit: Unit, name: str, table: dict) -> int:
    return len(unit.words & table[name][1])


def layer_choices(units: list[Unit], config: BertConfig) -> Iterator[Choice]:
    """Every way the units of a layer can be BERT's, the likeliest first."""
    h, i = config.hidden_size, config.intermediate_size
    norms = [u for u in units if _is_norm(u, h)]
    square = [u for u in units if _linear_fits(u, h, h)]
    fused = [u for u in units if _linear_fits(u, 3 * h, h)]
    ffn_in = [u for u in units if _linear_fits(u, i, h)]
    ffn_out = [u for u in units if _linear_fits(u, h, i)]
    options = []
    for inter, out in itertools.product(ffn_in, ffn_out):
        if inter is out:
            continue
        for ln1, ln2 in itertools.permutations(norms, 2):
            base = {"intermediate": inter, "output": out, "attention norm": ln1, "output norm": ln2}
            options += _attention_choices(base, square, fused)
    convention = _convention(units, config)
    ranked = sorted(options, key=lambda c: -_score(c, LAYER_UNITS, convention))
    for choice in ranked:
        yield from _swaps(choice, ("attention norm", "output norm"))


def _attention_choices(base: dict, square: list[Unit], fused: list[Unit]) -> list[Choice]:
    """The query, key, value and attention output: four square units, or a fused one and one
    square unit (the output), in every order."""
    roles = ("query", "key", "value", "attention output")
    taken = set(map(id, base.values()))
    free = [u for u in square if id(u) not in taken]
    out = []
    for perm in itertools.permutations(free, 4):
        units = base | dict(zip(roles, perm, strict=True))
        for transposed in _transpositions(units, roles):
            out.append(Choice(units, transposed))
    for qkv in fused:
        for order in itertools.permutations(roles[:3]):
            for o in free:
                units = base | {"query": qkv, "key": qkv, "value": qkv, "attention output": o}
                for transposed in _transpositions(units, ("query", "attention output")):
                    transposed |= {"key": transposed["query"], "value": transposed["query"]}
                    out.append(Choice(units, transposed, fused=order))
    return out


def _transpositions(units: dict[str, Unit], square: tuple[str, ...]) -> Iterator[dict[str, bool]]:
    """The ways the units' weights can be stored: non-square ones as their shapes say, square
    ones either way."""
    fixed, free = {}, []
    for name, unit in units.items():
        if name in NORMS:
            continue
        shape = _shape_of(unit)
        if name in square and shape[0] == shape[1]:
            free.append(name)
        else:
            fixed[name] = _stored_transposed(name, unit)
    for flips in itertools.product((False, True), repeat=len(free)):
        yield fixed | dict(zip(free, flips, strict=True))


def _stored_transposed(name: str, unit: Unit) -> bool:
    shape = _shape_of(unit)
    if name in ("query", "key", "value"):  # a fused unit: (3h, h) as stored by Linear
        return shape[0] < shape[1]
    if name == "intermediate":
        return shape[0] < shape[1]
    return shape[0] > shape[1]  # the output, from the intermediate size back to hidden


def _convention(units: list[Unit], config: BertConfig) -> bool:
    """Does the model store its weights (in, out)? As its intermediate layer's shape says."""
    h, i = config.hidden_size, config.intermediate_size
    for unit in units:
        if unit.bias is not None and unit.bias[1] == (i,) and unit.weight:
            return unit.weight[1] == (h, i)
    return False


def _score(choice: Choice, hints: dict, convention: bool | None = None) -> float:
    """How well names, registration order and the storage convention agree with a choice."""
    score = sum(_hint(u, name, hints) for name, u in choice.units.items() if name in hints)
    if choice.fused:
        score += 1 if choice.fused == ("query", "key", "value") else 0
    order = [choice.units[n].order for n in hints if n in choice.units]
    if not choice.fused:
        score += 0.5 * sum(a < b for a, b in itertools.pairwise(order))
    if convention is not None:
        score += 0.25 * sum(t == convention for t in choice.transposed.values())
    return score


def _swaps(choice: Choice, norms: tuple[str, ...]) -> Iterator[Choice]:
    """The choice, then with the gamma and beta of norms named ambiguously swapped."""
    yield choice
    unclear = [n for n in norms if n in choice.units and not _roles_named(choice.units[n])]
    for n in range(1, len(unclear) + 1):
        for swapped in itertools.combinations(unclear, n):
            yield Choice(choice.units, choice.transposed, choice.fused, frozenset(swapped))


def _roles_named(unit: Unit) -> bool:
    return _split_role(unit.weight[0])[1] == "weight" and _split_role(unit.bias[0])[1] == "bias"


def global_choices(units: list[Unit], config: BertConfig) -> Iterator[Choice]:
    """Every way the units outside the layers can be BERT's embeddings (and pooler), the
    likeliest first; without a pooler where the model has none."""
    h = config.hidden_size
    sizes = {
        "word embeddings": config.vocab_size,
        "position embeddings": config.max_position_embeddings,
        "token type embeddings": config.type_vocab_size,
    }
    tables = {
        n: [u for u in units if u.bias is None and _shape_of(u) == (s, h)] for n, s in sizes.items()
    }
    norms = [u for u in units if _is_norm(u, h)]
    poolers = [u for u in units if _linear_fits(u, h, h)] or [None]
    options = []
    for embeddings in itertools.product(*tables.values()):
        if len(set(map(id, embeddings))) < 3:
            continue
        for norm, pooler in itertools.product(norms, poolers):
            chosen = dict(zip(EMBEDDINGS, embeddings, strict=True)) | {"embeddings norm": norm}
            if pooler is None:
                options.append(Choice(chosen, {}))
                continue
            for flip in _linear_fits(pooler, h, h):
                options.append(Choice(chosen | {"pooler": pooler}, {"pooler": flip}))
    for choice in sorted(options, key=lambda c: -_score(c, GLOBAL_UNITS)):
        yield from _swaps(choice, ("embeddings norm",))


# From a choice to a table --------------------------------------------------------------------


def rows(layer: Choice, outside: Choice) -> dict[str, dict[str, object]]:
    """The table's sections ([encoder], [groups.pooler]): the user's name -> its row's value."""
    encoder, pooler = {}, {}
    for choice, units in ((outside, GLOBAL_UNITS), (layer, LAYER_UNITS)):
        fused_done = False
        for name, (prefix, _) in units.items():
            if name not in choice.units:
                continue
            unit = choice.units[name]
            target = pooler if name == "pooler" else encoder
            if choice.fused and name in choice.fused:
                if not fused_done:
                    target.update(_fused_rows(unit, choice, units))
                    fused_done = True
                continue
            target.update(
                _unit_rows(unit, prefix, name in choice.swapped, choice.transposed.get(name))
            )
    return {ENCODER: encoder, "pooler": pooler}


def _unit_rows(unit: Unit, prefix: str, swapped: bool, transposed: bool | None) -> dict:
    out = {}
    if unit.bias is None:  # an embedding
        out[unit.weight[0]] = f"{prefix}.weight"
        return out
    weight, bias = (unit.bias, unit.weight) if swapped else (unit.weight, unit.bias)
    out[weight[0]] = {"transpose": f"{prefix}.weight"} if transposed else f"{prefix}.weight"
    out[bias[0]] = f"{prefix}.bias"
    return dict(sorted(out.items(), key=lambda kv: kv[0] != unit.weight[0]))


def _fused_rows(unit: Unit, choice: Choice, units: dict) -> dict:
    prefixes = [units[name][0] for name in choice.fused]
    kind = "concat_transposed" if choice.transposed[choice.fused[0]] else "concat"
    out = {unit.weight[0]: {kind: [f"{p}.weight" for p in prefixes]}}
    if unit.bias is not None:
        out[unit.bias[0]] = {"concat": [f"{p}.bias" for p in prefixes]}
    return out


def table_text(name: str, spec: str, sections: dict, generated: dict, pooler: bool) -> str:
    """The table as a file, in the shipped tables' style."""
    lines = [
        f"# The names of {spec}, as `bertconv infer` found them: every row settled by running",
        "# the model against transformers' BertModel, layer by layer.",
        "",
        f"name = {_toml(name)}",
        f"description = {_toml(f'{spec}, inferred by bertconv infer')}",
    ]
    if pooler:
        lines += [
            "",
            "# Its class builds the pooler: a file without one cannot load into it.",
            'requires = ["pooler"]',
        ]
    for title, section in (
        (f"[{ENCODER}]", sections[ENCODER]),
        ("[groups.pooler]", sections["pooler"]),
    ):
        if section:
            lines += ["", title] + [f"{_toml(k)} = {_toml(v)}" for k, v in section.items()]
    if generated:
        lines += ["", "[generated]"] + [f"{_toml(k)} = {_toml(v)}" for k, v in generated.items()]
    return "\n".join(lines) + "\n"


def _toml(value) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return str(value)


# Running candidates ----------------------------------------------------------------------------


class Probe:
    """The user's model and transformers' BertModel on the probe config, the same random weights
    (every LayerNorm and bias random too, so that none can be mistaken for another), and the
    batch both read."""

    def __init__(self, factory, spec: str, config: BertConfig):
        import transformers

        from .verify import random_batch

        self.spec, self.config = spec, config
        self.model = usermodel.build(factory, spec, usermodel.config_object({}, config))
        self.names = usermodel.arguments(self.model, spec)
        torch.manual_seed(0)
        reference = transformers.BertModel(transformers.BertConfig(**vars(config))).eval()
        with torch.no_grad():
            for name, p in reference.named_parameters():
                if name.endswith("bias") or "LayerNorm" in name:
                    p.copy_(torch.randn_like(p) * 0.5 + (1.0 if name.endswith("weight") else 0.0))
        self.official = {n: storage.from_torch(t) for n, t in reference.state_dict().items()}
        self.batch = random_batch(config)
        if "token_type_ids" not in self.names:
            self.batch["token_type_ids"] = torch.zeros_like(self.batch["token_type_ids"])
        self.expected = self._reference_outputs(reference)

    def _reference_outputs(self, reference) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            out = reference(**self.batch, output_hidden_states=True)
        real = self.batch["attention_mask"].bool()
        named = {"embeddings": out.hidden_states[0][real]}
        named |= {f"layer {i}": h[real] for i, h in enumerate(out.hidden_states[1:], 1)}
        named["pooler"] = out.pooler_output
        return named

    def run(self, table: Table, groups: frozenset[str]) -> dict[str, float] | None:
        """How far the user's model, holding the random weights through `table`, is from
        transformers' at each hidden state; None where the table's names do not fit it."""
        from .convert import write_layout

        tensors = write_layout(self.official, self.config, table, groups)
        try:
            self.model.load_state_dict({n: storage.to_torch(t) for n, t in tensors.items()})
        except (RuntimeError, KeyError):
            return None
        anchors = usermodel.anchors(table, self.model, self.config.num_hidden_layers)
        caught, hooks = {}, []
        for label, module in anchors.items():
            hooks.append(
                module.register_forward_hook(
                    lambda m, a, o, label=label: caught.setdefault(label, o)
                )
            )
        try:
            with torch.no_grad():
                usermodel.call(self.model, self.names, self.batch)
        except Exception:  # a wrong candidate may break the user's forward in any way
            return None
        finally:
            for hook in hooks:
                hook.remove()
        return self._distances(caught)

    def _distances(self, caught: dict) -> dict[str, float]:
        mask = self.batch["attention_mask"]
        out = {}
        for label, expected in self.expected.items():
            if label not in caught:
                continue
            try:
                got = (
                    torch.tanh(caught[label])
                    if label == "pooler"
                    else usermodel.hidden(caught[label], mask, label)
                )
                out[label] = (got.float() - expected).abs().max().item()
            except (UsageError, RuntimeError):
                out[label] = float("inf")
        return out


def _progress(distances: dict[str, float] | None) -> tuple[int, float]:
    """How far a candidate got: the hidden states within tolerance, in order, and the error at
    the first that is not (a larger first number, then a smaller second, is closer)."""
    if distances is None:
        return (-1, float("inf"))
    order = ["embeddings", *(f"layer {i}" for i in range(1, len(distances) + 1)), "pooler"]
    done = 0
    for label in order:
        if label not in distances:
            continue
        if not distances[label] <= TOLERANCE:
            return (done, distances[label])
        done += 1
    return (done, 0.0)


def infer(spec: str, config_dict: dict | None = None) -> Inference:
    """The table of `spec`'s names (PKG.MODULE:NAME or path.py:NAME), found and checked."""
    config = BertConfig.from_dict(config_dict, "--config") if config_dict else BertConfig(**PROBE)
    probe = Probe(usermodel.import_factory(spec), spec, config)
    state = probe.model.state_dict()
    generated = generated_buffers(probe.model, state, config, spec)
    tensors = {n: t for n, t in state.items() if n not in generated}
    in_layers, outside = units_of(tensors, config.num_hidden_layers)
    name = spec.rpartition(":")[2]
    best, trials = None, 0
    for around in global_choices(outside, config):
        for layer in layer_choices(in_layers, config):
            sections = rows(layer, around)
            if not _covers(sections, tensors, config.num_hidden_layers):
                continue
            raw = _raw_table(name, sections, generated)
            from .mapping import expand

            table = expand(raw, name, config)
            groups = frozenset({"pooler"} if sections["pooler"] else set())
            distances = probe.run(table, groups)
            trials += 1
            if best is None or _progress(distances) > _progress(best[1]):
                best = (raw, distances, sections)
            if _progress(distances)[1] == 0.0 and distances:
                text = table_text(name, spec, sections, generated, bool(sections["pooler"]))
                return Inference(text, distances, trials)
            if trials >= MAX_TRIALS or not (distances or {}).get("embeddings", 1) <= TOLERANCE:
                break  # the embeddings are wrong: no layer can mend them
        if trials >= MAX_TRIALS:
            break
    return Inference(
        None, best[1] or {} if best else {}, trials, _why(best, in_layers, outside, config)
    )


def _covers(sections: dict, tensors: dict, layers: int) -> bool:
    named = {
        n.replace("{layer}", str(i)) for s in sections.values() for n in s for i in range(layers)
    }
    return named == set(tensors)


def _raw_table(name: str, sections: dict, generated: dict) -> dict:
    raw = {
        "name": name,
        "description": "inferred",
        ENCODER: sections[ENCODER],
        "generated": generated,
    }
    if sections["pooler"]:
        raw["groups"] = {"pooler": sections["pooler"]}
    return raw


def _why(best, in_layers: list[Unit], outside: list[Unit], config: BertConfig) -> str:
    if best is None:
        return "no assignment of its tensors fits BERT's shapes: " + _inventory(
            in_layers, outside, config
        )
    done, error = _progress(best[1])
    labels = [
        "embeddings",
        *(f"layer {i}" for i in range(1, config.num_hidden_layers + 1)),
        "pooler",
    ]
    where = [label for label in labels if label in (best[1] or {})]
    at = where[done] if best[1] and done < len(where) else "the start"
    return (
        f"no assignment of its tensors makes it compute BERT: the closest matches "
        f"{', '.join(where[:done]) or 'nothing'} and diverges at {at} (max abs {error:.3g} "
        "against transformers' BertModel). Its tensors have BERT's shapes but it computes "
        "something else there: a LayerNorm before each sublayer (pre-LN), another activation, "
        "or another embedding?"
    )


def _inventory(in_layers: list[Unit], outside: list[Unit], config: BertConfig) -> str:
    """What BERT has that the model's tensors cannot be, part by part."""
    h, i = config.hidden_size, config.intermediate_size
    sizes = {
        "word embeddings": config.vocab_size,
        "position embeddings": config.max_position_embeddings,
        "token type embeddings": config.type_vocab_size,
    }
    missing = [
        f"the {name} (a ({size}, {h}) table)"
        for name, size in sizes.items()
        if not any(u.bias is None and _shape_of(u) == (size, h) for u in outside)
    ]
    if not any(_is_norm(u, h) for u in outside):
        missing.append(f"the embeddings' LayerNorm (two ({h},) tensors)")
    if sum(_is_norm(u, h) for u in in_layers) < 2:
        missing.append(f"a layer's two LayerNorms (two ({h},) tensors each)")
    if not any(_linear_fits(u, i, h) for u in in_layers):
        missing.append(f"a layer's intermediate projection ({i}, {h}) with its bias")
    square = sum(bool(_linear_fits(u, h, h)) for u in in_layers)
    fused = any(_linear_fits(u, 3 * h, h) for u in in_layers)
    if square < 4 and not (fused and square >= 1):
        missing.append(f"a layer's query, key, value and output projections ({h}, {h})")
    found = ", ".join(u.key for u in outside + in_layers)
    return f"it has no tensor for {'; '.join(missing) or 'some part'}. Its tensors: {found}"


def generated_buffers(model: nn.Module, state: dict, config: BertConfig, spec: str) -> dict:
    """The model's buffers that bertconv makes (position ids: 0..n-1); any other refuses."""
    params = {n for n, _ in model.named_parameters()}
    sizes = {
        getattr(config, f): f for f in ("max_position_embeddings", "vocab_size", "hidden_size")
    }
    out = {}
    for name, tensor in state.items():
        if name in params:
            continue
        flat = tensor.flatten()
        if (
            tensor.is_floating_point()
            or flat.numel() not in sizes
            or not torch.equal(flat, torch.arange(flat.numel(), dtype=flat.dtype))
        ):
            raise UsageError(
                f"{spec}: holds the buffer {name!r} {tuple(tensor.shape)}, which bertconv cannot "
                "make (it makes position ids, 0..n-1); no table can fill it"
            )
        dims = [sizes.get(d, d) if d != 1 else 1 for d in tensor.shape]
        out[name] = {"arange": sizes[flat.numel()], "shape": dims}
    return out
