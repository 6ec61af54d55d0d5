"""A mapping table inferred for a from-scratch BERT: which of its tensors is which official one.

    bertconv infer PKG.MODULE:NAME [--config CONFIG] [--out TABLE]

The model is built on a small config whose sizes all differ (so that a shape says much) and run
once, traced (trace.py). How its forward uses each parameter says what the parameter is (units.py:
a projection's weight and bias, a LayerNorm's gamma and beta, an embedding table, query, key and
value fused), in which order and on what (every token, or one per sequence). That settles pairs
and roles that names cannot (`g1`/`b1`, `a_2`/`b_2`, `proj_q`); name hints only break ties.

The first assignment is then checked by running the model with the weights of a random BERT
against bertconv's own (the class its heads make, which verify proves computes what
transformers' does, so that infer needs no transformers), part by part: the embeddings, the
layers, the pooler, the heads. Where a part differs, its alternatives (the query, key and value
in another order, the LayerNorms the other way round, ...) are tried until one agrees within the
float32 tolerance. A model no assignment makes compute BERT (a pre-LayerNorm block, a missing
part) is refused, naming where the closest assignment diverges.
"""

import itertools
from dataclasses import dataclass, replace
from functools import partial

import torch

from .. import catalog, storage
from ..catalog import ENCODER, TOKEN_TYPES
from ..config import BertConfig
from ..errors import BertconvError, NotBertError, UsageError, given_as, listed, said
from ..family import factory_dict, held_config, ways
from ..mapping import class_for, expand, layout
from ..outputs import POOLER, Output, compared, heads
from ..tables import BERT_HOLDING, Holding
from . import assign
from .fence import guarded, raised_by_model
from .harness import Harness, load
from .reading import anchors, outputs_of, read
from .trace import Trace, weights
from .units import UNUSED, Unit, layer_index, layer_pattern, units_from

# Sizes that all differ, so that a tensor's shape tells what it can be.
PROBE = dict(
    vocab_size=83,
    hidden_size=24,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=40,
    max_position_embeddings=29,
    type_vocab_size=2,
    num_labels=5,  # not 2: a head built with config.num_labels is never NSP's width
)
TOLERANCE = 1e-5
PROBE_LENGTH = 20  # tokens in the probe's longest sequence: few, but no other size
MAX_TRIALS = 400  # candidate tables run before giving up
# What people get wrong in each part, most often.
SUSPECTS = {
    "embeddings": "the embeddings summed otherwise, positions offset, or their LayerNorm's eps?",
    "layers": "a LayerNorm before each sublayer (pre-LN), another activation, or the attention "
    "scaled or masked otherwise?",
    "pooler": "the pooler's tanh missing or applied twice, or another token than the first?",
    "heads": "a head's activation or LayerNorm, or its decoder not tied to the word embeddings?",
}


@dataclass
class Inference:
    """What `bertconv infer` found: the table, and how well its assignment did."""

    text: str | None  # the table, as a TOML file; None where nothing computes BERT
    checked: dict[Output, float]  # compared output -> max abs difference from BERT's
    trials: int
    reason: str | None = None  # why no table was found
    diagnosis: object = None  # diagnose.Diagnosis: where and why the closest assignment differs
    notes: tuple[str, ...] = ()  # what the user should know of the table found


class Probe:
    """The user's model and bertconv's BERT (the class its heads make) on the probe config,
    holding the same random weights (random_weights), and the batch both read. The weights are
    drawn into the user's tensors through the first table, `raw`; bertconv's BERT and later
    tables take views of them: no copy (440 MB at bert-base size)."""

    def __init__(self, harness: Harness, config: BertConfig, groups: frozenset[str], raw: dict):
        from ..batches import random_batch

        self.harness, self.config = harness, config
        arch = catalog.of(config.model_type)
        self.model_class = class_for(set(groups), arch)
        self.heads = heads(self.model_class, arch)
        official = arch.shapes(config, sorted(groups))  # leaves named by their data, for _torch
        self.names = {n: storage.InMemory("F32", tuple(s), n) for n, s in official.items()}
        own, places = harness.model.state_dict(), {}
        for name, t in self._laid_out(expand(raw, raw["name"], config), raw).items():
            if name in own and own[name].dtype == torch.float32 and own[name].shape == t.shape:
                _places(t, own[name], places)
        self.official = random_weights(official, places)
        ours = self._laid_out(layout("bertconv", config), {"groups": groups}, torch_=True)
        self.reference = _bertconv_model(self.model_class, config, groups, ours)
        self.batch = harness.prepare(random_batch(config, PROBE_LENGTH))
        self.expected = compared(self.reference, self.batch, self.heads)
        self.trials = 0
        self.errors: list[BaseException] = []  # what the user's forward raised, trial by trial

    def _laid_out(self, table, raw: dict, torch_=False) -> dict:
        """The official tensors laid out by `table` with `raw`'s groups: trees of their names,
        or (torch_) torch tensors made of the random weights, views where they can be."""
        from ..convert import write_layout

        laid = write_layout(self.names, self.config, table, frozenset(raw.get("groups", {})))
        return {n: _torch(t, self.official) for n, t in laid.items()} if torch_ else laid

    def traced(self, raw: dict):
        """The user's model holding the random weights through table `raw`, run traced: the
        run, the table and the anchors of each output through it."""
        table = expand(raw, raw["name"], self.config)
        own = self.harness.model.state_dict(keep_vars=True)
        for name, t in self._laid_out(table, raw, torch_=True).items():
            if name in own and own[name].shape != t.shape:  # as load_state_dict refuses it
                raise ValueError(f"{name}: {tuple(t.shape)} for {tuple(own[name].shape)}")
            if name in own:  # the weights themselves where they can be, not a copy
                own[name].data = t.to(own[name].dtype).contiguous()
        found = anchors(table, self.config, set(raw.get("groups", {})))
        return self.harness.run(self.batch, guard=False), table, found

    def run(self, raw: dict) -> dict[str, float] | None:
        """How far the user's model, holding the random weights through table `raw`, is from
        BERT at each compared output; None where the table does not fit it."""
        self.trials += 1
        try:  # a wrong candidate may break the user's forward, or its reading, in any way
            run, _, found = self.traced(raw)
            got = outputs_of(run, found, self.heads)[0]
        except KeyboardInterrupt:
            raise
        except SystemExit:  # the model's own code ends the process: said as verify says it
            with guarded(self.harness.spec, "running its forward"):
                raise
        except BaseException as e:
            if raised_by_model(e):  # not a candidate table that does not fit
                self.errors.append(e)
            return None
        return {
            label: (got[label].float() - expected).abs().max().item()
            if label in got and got[label].shape == expected.shape
            else float("inf")
            for label, expected in self.expected.items()
        }

    def diagnose(self, raw: dict, row: Output):
        """Where and why the model, through table `raw`, differs inside output `row`."""
        from .diagnose import diagnose

        run, table, found = self.traced(raw)
        if self.config.rotary:  # a modern encoder: its ports' mistakes, each recomputed
            from .variants import explain_run

            return explain_run(self.reference, run, found, row)
        pooled = read(run, found).get(POOLER) if row == POOLER else None
        return diagnose(run.trace, table, self.reference, row, pooled, self.harness.varies(run))


def random_weights(official: dict, places: dict) -> dict[str, torch.Tensor]:
    """Seeded random official tensors of these shapes, drawn into `places` where given:
    LayerNorms' gammas around 1 and every bias random (so no two are alike), matrices scaled by
    their fan-in. Each tensor has a generator of its own, seeded by its place in `official`, so
    that two are drawn at once (torch lets go of the GIL as it draws: bert-base's 110M numbers
    in ~0.4 s, not ~0.8 s)."""
    from concurrent.futures import ThreadPoolExecutor

    def draw(index: int, name: str) -> torch.Tensor:
        shape = official[name]
        t = torch.randn(shape, generator=torch.Generator().manual_seed(index))
        if name.endswith("LayerNorm.weight"):
            t.mul_(0.5).add_(1.0)
        elif len(shape) == 1:
            t.mul_(0.5)
        else:
            t.div_(shape[-1] ** 0.5)
        return places[name].view(shape).copy_(t) if name in places else t

    with ThreadPoolExecutor(2) as pool:
        drawn = pool.map(draw, range(len(official)), official)
        return dict(zip(official, drawn, strict=True))


def _places(t: storage.Tensor, tensor: torch.Tensor, out: dict) -> None:
    """Where in `tensor` each official tensor of its layout's `t` lies (views of it)."""
    if isinstance(t, storage.Joined):
        for part, rows in zip(t.parts, tensor.split([p.shape[0] for p in t.parts]), strict=True):
            _places(part, rows, out)
    elif isinstance(t, storage.Transposed):
        _places(t.source, tensor.T, out)
    elif isinstance(t.data, str):
        out[t.data] = tensor


def _torch(t: storage.Tensor, official: dict) -> torch.Tensor:
    """A layout's tensor made of the official ones by name: views of them, a join copied."""
    if isinstance(t, storage.Joined):
        return torch.cat([_torch(p, official) for p in t.parts])
    if isinstance(t, storage.Transposed):
        return _torch(t.source, official).T
    return official[t.data].view(t.shape) if isinstance(t.data, str) else storage.to_torch(t)


def _bertconv_model(model_class: str, config: BertConfig, groups, weights: dict) -> torch.nn.Module:
    """bertconv's model of `model_class` holding `weights` themselves (api.build copies them)."""
    from torch.overrides import TorchFunctionMode

    from ..heads import CLASSES

    class Unset(TorchFunctionMode):  # nn.init's calls undone: on meta, they import torch's compiler
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            unset = getattr(func, "__module__", None) == "torch.nn.init"
            return [*args, *kwargs.values()][0] if unset else func(*args, **kwargs)

    implementation = catalog.of(config.model_type).implementation(model_class)
    with torch.device("meta"), Unset():
        model = CLASSES[implementation](config, pooler="pooler" in groups)
    model.load_state_dict(weights, strict=True, assign=True)
    return model.eval()


def progress(distances: dict[str, float] | None) -> tuple[int, float]:
    """How far a candidate got: the outputs within tolerance, in order, and the error at the
    first that is not (more outputs, then a smaller error, is closer)."""
    if distances is None:
        return (-1, float("inf"))
    values = list(distances.values())
    done = next((i for i, value in enumerate(values) if not value <= TOLERANCE), len(values))
    return (done, values[done] if done < len(values) else 0.0)


def closeness(distances: dict[str, float] | None) -> tuple[int, float]:
    """A key that orders candidates, the closest greatest: more outputs that agree, then, at
    the first that does not, a smaller error (NaN counting as the largest)."""
    done, error = progress(distances)
    return done, -error if error == error else float("-inf")


def _listed(labels: list[Output]) -> str:
    """`embeddings, layers 1-12, pooler`: outputs named, the layers as a span."""
    layers = [label for label in labels if label.kind == "layer"]
    if len(layers) <= 2:
        return ", ".join(map(str, labels)) or "nothing"
    span = f"layers 1-{len(layers)}"
    return ", ".join(span if o == layers[0] else str(o) for o in labels if o not in layers[1:])


def _failing_part(distances: dict[Output, float] | None) -> str | None:
    if distances is None:
        return "embeddings"
    return next((label.part for label, d in distances.items() if not d <= TOLERANCE), None)


def infer(spec: str, config_dict: dict | None = None, dense=None) -> Inference:
    """The table of `spec`'s names (PKG.MODULE:NAME or path.py:NAME), found and checked. Given
    a config.json of BERT's family, the model is built each way the type may be held
    (family.ways: a RoBERTa as RoBERTa counts positions, then as a BERT does, then under its
    own names): the first whose assignment computes it is the table, its [holding] recorded;
    else the closest says why. `dense`: a sentence-transformers directory's Dense layer, which
    a projection of the model's own of its shape is ([sentence])."""
    spec = given_as(spec, "MODEL")  # infer's argument, as messages name it
    # A config.json naming its classes is transformers': without id2label, num_labels is 2.
    probe = PROBE | ({"num_labels": 2} if "architectures" in (config_dict or {}) else {})
    given = catalog.read_config(config_dict or {}, "--config")
    if given.model_type == "bert" and catalog.of(given.model_type).bert is None:
        given = catalog.read_config({**probe, **(config_dict or {})}, "--config")
    if given.num_hidden_layers == 1:  # a layer's names need two to tell {layer} apart
        given = replace(given, num_hidden_layers=2)  # a table holds any number
    tried, errors = [], []
    for holding in ways(given):
        try:  # a model built for one way may not build, or run, another
            found = _inferred(spec, config_dict, given, holding, dense)
        except BertconvError as e:
            errors.append(e)
            continue
        if found.text is not None:
            return found
        tried.append(found)
    if not tried:
        raise errors[-1]  # as a BERT holds it: what infer said before the family's ways
    return max(tried, key=lambda f: closeness(f.checked or None))  # the first of equals


def _probe_config(given: BertConfig, holding: Holding) -> BertConfig:
    """The config the model is probed with, held as `holding` says, of the type whose names the
    table gives."""
    config = held_config(given, holding)
    return replace(config, model_type=holding.names) if holding.names else config


def _inferred(spec: str, config_dict: dict | None, given: BertConfig, holding, dense) -> Inference:
    """The table of `spec`'s names, the model built and held as `holding` says."""
    factory = factory_dict(config_dict, given, holding) if config_dict else {}
    # the type's own name of the layer count (DistilBERT's n_layers) as BERT's, raised to 2
    factory |= {a: given.num_hidden_layers for a in _aliases(given, "num_hidden_layers")
                if a in factory}  # fmt: skip
    config = _probe_config(given, holding)
    from ..batches import random_batch

    batch = random_batch(config, PROBE_LENGTH)
    harness = load(spec, factory, config, batch)
    run = harness.run(harness.prepare(batch))  # the model's own weights: how it uses them
    state = harness.model.state_dict()
    params = set(weights(harness.model))
    tensors = {n: t for n, t in state.items() if n in params}
    unnamable = [n for n in tensors if "{" in n or "}" in n or not n.isprintable()]
    if unnamable:  # a table reads braces as {layer}, and holds printable names only
        raise UsageError(
            f"{said(spec)}: names tensors no table can hold "
            f"({listed(map(repr, unnamable))}): braces are a table's {{layer}}, and a "
            "name must be printable; rename the module or parameter"
        )
    _refuse_stacked(tensors, config, spec)
    generated = generated_buffers(state, params, config)
    user = _model(run.trace, tensors, config, (config_dict or {}).get("architectures"))
    _refuse_biases(user, spec)
    if not _has_token_types(user):  # held without them: [holding] says so
        holding = replace(holding, token_types=0)
        config = _probe_config(given, holding)
        user.config = config
    given_labels = {"num_labels", "id2label"} & set(config_dict or {})  # not the default 2
    labels = config.num_labels if given_labels else None
    search = partial(Search, user, harness, config, spec, generated, labels, holding=holding,
                     dense=dense, types=given.type_vocab_size)  # fmt: skip
    found = search().run()
    if found.text is not None or not _square(dense, config):
        return found
    # LaBSE's Dense keeps the hidden width: shaped as BERT's pooler, and read first as it.
    # Taken as the directory's Dense instead, where the model computes that.
    dense_first = search(pooled=False).run()
    return dense_first if dense_first.text is not None else found


def _square(dense, config: BertConfig) -> bool:
    """Is the directory's Dense layer (None: none) the shape of BERT's pooler?"""
    h = config.hidden_size
    return dense is not None and (dense.in_features, dense.out_features) == (h, h)


def _aliases(config: BertConfig, field: str) -> list[str]:
    """config.json's own names of BERT's `field` in the config's type (DistilBERT's n_layers)."""
    spec = catalog.of(config.model_type).config_spec
    return [
        v for part in ("aliases", "fields") for k, v in spec.get(part, {}).items() if k == field
    ]


def _has_token_types(user: assign.Model) -> bool:
    """Has the model a table of the config's token type rows?"""
    return any(units for (role, _), units in user.tables().items() if role == TOKEN_TYPES)


def _refuse_biases(user: assign.Model, spec: str) -> None:
    """Refuse a model whose layers' projections add biases an architecture without any in them
    (ModernBERT's, NomicBERT's) has none of: no table places them, and added they move every
    output."""
    if user.config.linear_bias:
        return
    biases = [user.patterns[u.bias] for u in user.layer if u.kind == "linear" and u.bias]
    if biases:
        kind = user.config.model_type
        raise NotBertError(
            f"{spec}: {listed(biases)}: biases of projections that have none in {kind} "
            "(bias=False): no checkpoint has them, and added they move every output"
        )


def _refuse_stacked(tensors: dict, config: BertConfig, spec: str) -> None:
    """Refuse a model whose layers are not one tensor per layer (all layers stacked)."""
    stacked = [
        n
        for n, t in tensors.items()
        if t.dim() == 3 and t.shape[0] == config.num_hidden_layers and "{layer}" not in n
    ]
    if stacked:
        raise NotBertError(
            f"{spec}: holds every layer's weights in one tensor ({listed(stacked)}): a "
            "table maps one tensor per layer; register a tensor per layer (an nn.ParameterList)"
        )


def _model(trace: Trace, tensors: dict, config: BertConfig, classes) -> assign.Model:
    """The user's units, those of layer 0 standing for every layer's; `classes`: config.json's
    `architectures`, whose groups say which heads the model's are."""
    arch = catalog.of(config.model_type)
    shapes = {n: t.shape for n, t in tensors.items()}
    patterns = layer_pattern(shapes, config.num_hidden_layers, bool(arch.first_layer_lacks))
    # A parameter under two names (a tied decoder) is one unit: its second name a tied copy.
    keys = {
        n: (t.data_ptr(), t.shape, t.stride()) if t.data_ptr() else id(t)
        for n, t in tensors.items()
    }
    first = {key: name for name, key in reversed(keys.items())}
    tied = {name: first[key] for name, key in keys.items() if first[key] != name}
    distinct = {n: t for n, t in tensors.items() if n not in tied}
    units = units_from(trace, distinct, config)
    index = {n: layer_index(p, n) for n, p in patterns.items()}
    # the first layer's units stand for every layer's; the second's where the first lacks one
    first = min((i for i in index.values() if i is not None), default=-1)
    if arch.first_layer_lacks:
        first = max(sorted(set(index.values()) - {None}), default=-1,
                    key=lambda i: sum(index[u.weight] == i for u in units))  # fmt: skip
    layer = [u for u in units if index[u.weight] == first]
    outside = [u for u in units if index[u.weight] is None]
    names = [c for c in classes if isinstance(c, str)] if isinstance(classes, list) else []
    declared = frozenset(g for c in names if c in arch.classes for g in arch.groups_of(c))
    return assign.Model(layer, outside, patterns, tied, config, arch, declared)


@dataclass
class Search:
    """The likeliest assignment, checked part by part; a part that differs mended by another."""

    user: assign.Model
    harness: Harness
    config: BertConfig
    spec: str
    generated: dict
    labels_given: int | None = None  # --config's num_labels, where it states one
    best: tuple[dict | None, dict | None] = (None, None)
    detached: tuple = ()  # heads of the pooled output in a model with no pooler: its own
    foreign: tuple = ()  # (its tensors no part of BERT fits, why): held as its own meanwhile
    told: tuple[str, ...] = ()  # notes for the user: a label count other than --config's
    holding: Holding = BERT_HOLDING  # how the model holds the checkpoint ([holding])
    dense: object = None  # sentence.Dense of --config's directory: placed in the model's own
    pooled: bool = True  # False: a square projection of the pooled state is the Dense, no pooler
    types: int = 0  # the checkpoint's token types (type_vocab_size), held or not

    def run(self) -> Inference:
        modern = self.config.rotary  # ModernBERT's and NomicBERT's units: their own choices
        embeddings = list((assign.modern_global_choices if modern else assign.global_choices)(
            self.user))  # fmt: skip
        layer_choices = assign.modern_layer_choices if modern else assign.layer_choices
        layers = list(itertools.islice(layer_choices(self.user), MAX_TRIALS))
        if not embeddings or not layers:
            return Inference(None, {}, 0, self._inventory())
        taken = {id(u) for a in (embeddings[0], layers[0]) for u in a.units.values()}
        word = embeddings[0].units["word embeddings"]
        shared = assign.SHARED_HEAD in self.user.architecture.group_tensors  # ModernBERT's
        head_choices = assign.modern_head_choices if shared else assign.head_choices
        heads = head_choices(self.user, taken, word) or [assign.Assignment({})]
        self._count_labels(assign.labelled(heads[0]))
        taken |= {id(u) for u in heads[0].units.values()}
        poolers = assign.pooler_choices(self.user, taken) or [assign.Assignment({})]
        if not self.pooled:  # the pooler's unit is the directory's Dense ([sentence])
            self.detached = tuple(poolers[0].units.values())
            poolers = [assign.Assignment({})]
        if not poolers[0].units and not shared:  # a head read off a hidden state is not
            self.detached += tuple(  # transformers' (ModernBERT's reads it through its own)
                heads[0].units.pop(r) for r in assign.SEQUENCE if r in heads[0].units
            )
        parts = {"embeddings": embeddings, "layers": layers, "pooler": poolers, "heads": heads}
        # A refusal names the closest deviation: tensors no part fits (a pre-LN model's final
        # LayerNorm) are held as the model's own while the closest candidate is taken apart.
        self.foreign = self._uncovered({p: options[0] for p, options in parts.items()})
        roles = self.user.roles.units
        groups = frozenset(roles[r][1] for p in (poolers, heads) for r in p[0].units)
        first = self._raw({p: options[0] for p, options in parts.items()})
        try:
            self.probe = Probe(self.harness, self.config, groups, first)
        except ValueError:  # as the catalog's classes say
            held = ", ".join(sorted(groups - {"pooler"}))
            return Inference(None, {}, 0, f"its heads ({held}) together make no class of BERT's")
        return self._search(parts)

    def _count_labels(self, head: Unit | None) -> None:
        """BERT's classifier as wide as the model's (`head`), whose shape, not the config, says
        how many labels it has; a note where --config states another count."""
        labels = assign.width(head, self.config.hidden_size) if head else None
        if labels is None or labels == self.config.num_labels:
            return
        if self.labels_given is not None:
            self.told = (
                f"{head.weight} has {labels} labels (its shape) where --config's num_labels is "
                f"{self.labels_given}: the table is the model's, but a checkpoint of "
                f"{self.labels_given} labels will not load into it",
            )
        self.config = replace(self.config, num_labels=labels)
        self.user.config = self.config

    def _search(self, parts: dict) -> Inference:
        """The likeliest choice of each part, then, at the first part whose outputs differ, its
        alternatives until one agrees; on to the next part that differs."""
        current = {p: options[0] for p, options in parts.items()}
        distances = self._try(current)
        mended = set()
        while (part := _failing_part(distances)) is not None and part not in mended:
            mended.add(part)
            for option in parts[part][1:]:
                if self.probe.trials >= MAX_TRIALS:
                    break
                trial = current | {part: option}
                found = self._try(trial)
                if _failing_part(found) != part and closeness(found) > closeness(distances):
                    current, distances = trial, found
                    break
        if _failing_part(distances) is None and self.foreign:
            return Inference(None, {}, self.probe.trials, self.foreign[1])
        if _failing_part(distances) is None:
            raw = self._raw(current)
            text = assign.table_text(raw, self.spec, self._notes(current))
            return Inference(text, distances, self.probe.trials, notes=self.told)
        # Said of the likeliest assignment (its earlier parts mended), as close as any in the
        # outputs it matches: another, of a smaller error by chance, would mislead a diagnosis.
        if distances is not None and progress(distances)[0] >= progress(self.best[1])[0]:
            self.best = (current, distances)
        chosen, distances = self.best
        found = None  # where and why the closest assignment differs, taken apart step by step
        if distances is not None:
            row = next(label for label, d in distances.items() if not d <= TOLERANCE)
            found = self.probe.diagnose(self._raw(chosen), row)
        return Inference(None, distances or {}, self.probe.trials, self._why(found), found)

    def _try(self, chosen: dict) -> dict | None:
        distances = self.probe.run(self._raw(chosen))
        if closeness(distances) > closeness(self.best[1]):
            self.best = (chosen, distances)
        return distances

    def _raw(self, chosen: dict) -> dict:
        parts = chosen.values()
        units = {r: u for a in parts for r, u in a.units.items()}
        transposed = {r: t for a in parts for r, t in a.transposed.items()}
        swapped = frozenset().union(*(a.swapped for a in parts))
        layers = chosen["layers"]
        merged = assign.Assignment(units, transposed, swapped, layers.fused, layers.gated)
        name = self.spec.rpartition(":")[2]
        rows = assign.sections(merged, self.user)
        own = self._own(units)
        sentence = assign.dense_rows(self.dense, own, self.user.patterns)
        names = [self.user.patterns[n] for u in own for n in u.names]
        own = [n for n in dict.fromkeys(names) if n not in sentence]
        holding = self.holding.recorded()
        return assign.raw_table(name, rows, self.user, self.generated, own, holding, sentence)

    def _own(self, placed: dict) -> list:
        """The model's own units: those no part of BERT takes that its forward never reads,
        and the heads of a model with no pooler."""
        units = [u for u in self.user.layer + self.user.outside if u not in placed.values()]
        return [u for u in units if u.order == UNUSED or u in self.detached]

    def _uncovered(self, chosen: dict) -> tuple:
        """The tensors no part of BERT fits, and why no table can hold the model; () if none."""
        raw = self._raw(chosen)
        parts = (raw[ENCODER], raw.get("tied", {}), raw.get("own", []), raw.get("sentence", {}))
        parts += tuple(raw.get("groups", {}).values())
        layers = range(self.config.num_hidden_layers)
        named = {n.replace("{layer}", str(i)) for part in parts for n in part for i in layers}
        left = [n for n in self.user.patterns if n not in named]
        if not left:
            return ()
        return tuple(left), (
            "no part of BERT fits its tensors "
            f"{listed(left)}: BERT's encoder, pooler and "
            "heads have no such tensor (another architecture, a part BERT lacks, or a head of the "
            "pooled output that neither config.json's architectures nor its name places)"
            + "".join(self._other_types(left))
        )

    def _other_types(self, left: list[str]) -> list[str]:
        """A table the model looks its token types up in whose rows are not the checkpoint's
        token types (BERT-pytorch's 3: one for the padding), said."""
        units = {u.weight: u for u in self.user.outside}
        rows = self.types or self.config.type_vocab_size
        return [
            f". {n} is a table of {units[n].shape[0]} token types the model looks its token "
            f"types up in, where the checkpoint has {rows} (type_vocab_size): a row of its own "
            "(for the padding?) that no checkpoint has"
            for n in left
            if n in units and "token_type_ids" in units[n].lookup and units[n].shape[0] != rows
        ]

    def _notes(self, chosen: dict) -> list[str]:
        units = [u for a in chosen.values() for u in a.units.values()]
        unused = [u.weight for u in units if u.order == UNUSED and u.kind != "embedding"]
        never = "Never used by its forward (placed by name and shape only)"
        dense = assign.dense_rows(self.dense, list(self.detached), self.user.patterns)
        own = [f"{u.weight}: the directory's Dense layer (by its shape)" if self.user.patterns[
            u.weight] in dense else f"{u.weight}: the model's own (no pooler before it)"
            for u in self.detached]  # fmt: skip
        return ([f"{never}: {', '.join(unused)}"] if unused else []) + own + list(self.told)

    def _why(self, found) -> str:
        distances = self.best[1]
        none = f"no assignment of its tensors makes it compute {_kind(self.config)}"
        if distances is None and len(self.probe.errors) == self.probe.trials:
            with guarded(self.harness.spec, "running its forward with every candidate table"):
                raise self.probe.errors[0]  # the model's error, not a verdict on it (exit 2)
        if distances is None:
            return (
                f"{none}: with each, its forward fails or its outputs have other shapes than BERT's"
            )
        done, error = progress(distances)
        labels = list(distances)
        at = labels[done] if done < len(labels) else None
        why = (
            f"{none}: the closest matches {_listed(labels[:done])} and diverges at "
            f"{at or 'the end'} (max abs {error:.3g} against bertconv's {self.probe.model_class})"
        )
        if self.foreign:  # said first: what the closest candidate held as the model's own
            why = f"{self.foreign[1]}; held as its own, {why[len(none) + 2 :]}"
        if found is not None and (found.step or found.cause) is not None:
            return f"{why}.\n{found.message()}"
        why += ". Its tensors have BERT's shapes but it computes something else there: "
        tail = f"\n{found.message()}" if found else ""
        return why + SUSPECTS[at.part if at else "heads"] + tail

    def _inventory(self) -> str:
        """What BERT has that the model's tensors cannot be, part by part."""
        h, i, c = self.config.hidden_size, self.config.intermediate_size, self.config
        outside, layer = self.user.outside, self.user.layer
        tables = self.user.tables().items()
        missing = [f"the {name} (a {shape} table)" for (name, shape), u in tables if not u]
        norm = f"two ({h},) tensors" if c.norm_bias else f"one ({h},) tensor, no bias"
        norms = [u for u in outside if assign.is_norm(u, h, c.norm_bias)]
        wanted = 2 if c.norm_first else 1  # ModernBERT's final norm besides the embeddings'
        if len(norms) < wanted:
            missing.append(
                f"the embeddings' LayerNorm and the final one after the last layer ({norm} each)"
                if c.norm_first else f"the embeddings' LayerNorm ({norm})"
            )  # fmt: skip
        if sum(assign.is_norm(u, h, c.norm_bias) for u in layer) < 2:
            missing.append(f"a layer's two LayerNorms ({norm} each)")
        halves = c.gated and any(assign.fits(u, 2 * i, h) for u in layer)
        if not any(assign.fits(u, i, h) for u in layer) and not halves:
            bias = " with its bias" if c.linear_bias else ""
            missing.append(f"a layer's intermediate projection ({i}, {h}){bias}")
        square = sum(bool(assign.fits(u, h, h)) for u in layer)
        fused = any(assign.fits(u, 3 * h, h) for u in layer)
        if square < 4 and not (fused and square >= 1):
            missing.append(f"a layer's query, key, value and output projections ({h}, {h})")
        found = ", ".join(u.weight for u in outside + layer)
        return (
            f"no assignment of its tensors fits {_kind(self.config)}'s shapes: it has no tensor "
            f"for {'; '.join(missing) or 'some part'}"
            + "".join(self._other_types([u.weight for u in outside]))
            + f". Its tensors: {found}"
        )


def _kind(config: BertConfig) -> str:
    """What the model is probed as: BERT (a family's type held as BERT), or the type (MPNet)."""
    arch = catalog.of(config.model_type)
    return "BERT" if arch.bert is None else arch.config_class.removesuffix("Config")


def generated_buffers(state: dict, params: set[str], config: BertConfig) -> dict:
    """The model's buffers that bertconv makes (position ids: 0..n-1), for the table's
    [generated]; any other buffer (a sinusoidal table, a mask) is the model's to make."""
    sizes = {
        getattr(config, f): f for f in ("max_position_embeddings", "vocab_size", "hidden_size")
    }
    out = {}
    for name, tensor in state.items():
        n = tensor.numel()
        if name in params or tensor.is_floating_point() or n not in sizes:
            continue
        if torch.equal(tensor.flatten(), torch.arange(n, dtype=tensor.dtype)):
            dims = [sizes.get(d, d) if d != 1 else 1 for d in tensor.shape]
            out[name] = {"arange": sizes[n], "shape": dims}
    return out
