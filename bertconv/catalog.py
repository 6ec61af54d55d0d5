"""What an architecture is, keyed by config.json's `model_type`: one catalog per model type under
mappings/architectures/ (BERT's is bert.toml; the others extend it, stating what differs). A
catalog lists the architecture's tensors with their shapes, grouped as the encoder, its relative
position embeddings and each head (the pooler counts as one); transformers' classes with their
groups and outputs; where each compared output is read in a model; the units `bertconv infer`
matches a model's tensors to; how a from-scratch BERT holds it; and config.json as that type's
config class reads it.

`of(model_type)` gives the one frozen `Architecture`, read once; `read_config(config.json's
dict)` reads the type where config.json is read (BERT's where the file names none, as Google's
bert_config.json does) and returns the BertConfig that carries what the model computes. After
that the architecture is handed on (a Layout holds it), never asked for again by type. No torch.
"""

import tomllib
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import NamedTuple

from . import mappings
from .config import CARRIED, MODERN_FACTS, NOT_BERT, SIZES, BertConfig
from .errors import CheckpointError, TableError, listed

ARCHITECTURES = Path(mappings.__file__).parent / "architectures"  # one file per model_type
BASE = "bert"  # the catalog the others extend
ENCODER = "encoder"
RELATIVE = "relative"  # the encoder's relative position embeddings, where config.json has them
MAX_DIM = 1 << 24
DERIVED = ("attention_head_size", "relative_distances")  # sizes BertConfig computes
KEYS = {"model_type": str, "config_class": str, ENCODER: dict, RELATIVE: dict,
        "groups": dict, "classes": dict, "anchors": dict, "units": dict}  # fmt: skip
# Optional: the catalog it extends, and what of it is dropped ("groups.nsp"); other model types
# of the same architecture ([serves.TYPE]: the prefix of its transformers classes, its config
# class's own defaults); how positions are numbered where not BERT's way (from 0); the
# activation of a classification head of dense + activation + out_proj (tanh by default);
# whether it has token types; whether every layer adds a shared relative attention bias
# (MPNet's); config.json as its config class reads it ([config]); how a from-scratch BERT holds
# its weights ([bert], bertconv/family.py); the modern encoders' arithmetic (config.MODERN_FACTS),
# and the layer tensors the first layer has none of (ModernBERT's attention norm).
OPTIONAL = {"extends": str, "drop": list, "serves": dict, "positions": str,
            "classification_activation": str, "token_types": bool, "config": dict,
            "bert": dict, "relative_bias": bool,
            **{fact: bool for fact in MODERN_FACTS}, "first_layer_lacks": list}  # fmt: skip
# How a catalog that extends another is read: these sections are replaced whole where given;
# the others merged entry by entry (a unit field by field), the child's over the parent's.
REPLACED = (ENCODER, RELATIVE, "classes")
MERGED_TWICE = ("units", "config")
# [config]'s parts: BERT's field -> the type's field, either name setting it (transformers'
# attribute_map) / the type's name alone (its config class has no field of BERT's name);
# values no config.json changes; the type's config class's defaults, where not BERT's; the
# fields whose other values ask for what bertconv does not compute, with the value it does.
CONFIG_PARTS = ("aliases", "fields", "fixed", "defaults", "only")
AFTER_PAD = "after the pad id"  # RoBERTa's: real tokens counted from pad_token_id + 1
FROM_ZERO = "from 0"  # BERT's: every token counted from 0
TOKEN_TYPES = "token type embeddings"  # the unit a config without token types leaves out


class ClassSpec(NamedTuple):
    """One of transformers' classes of an architecture: the groups its files hold, what it
    computes beyond the hidden states and the pooler ((verify's row, transformers' output, per
    token)), bertconv's class computing it, and whether it has a pooler."""

    groups: tuple[str, ...]
    outputs: tuple[tuple[str, str, bool], ...]
    bertconv: str
    pooler: bool
    scores: frozenset[str] = frozenset()  # rows of one number per token ("score": ELECTRA's)


@dataclass(frozen=True, eq=False)
class Architecture:
    """One model type's architecture, as its catalog says; compared and hashed by identity (one
    per model type, from `of`)."""

    model_type: str
    family: str  # the catalog it is read from (roberta for xlm-roberta): its tables' folder
    config_class: str  # transformers' config class
    tensors: dict[str, dict[str, tuple]]  # group -> official pattern -> shape (encoder first)
    classes: dict[str, ClassSpec]  # in the order they are tried when a file is identified
    anchors: dict[str, tuple[str, ...]]
    units: dict[str, dict]
    bert: dict | None  # how a from-scratch BERT holds it; None: it is BERT's already
    facts: dict = field(default_factory=dict)  # what BertConfig carries for the model
    config_spec: dict = field(default_factory=dict)  # [config]: CONFIG_PARTS
    first_layer_lacks: frozenset[str] = frozenset()  # layer patterns layer 0 has no tensor of

    @cached_property
    def group_tensors(self) -> dict[str, frozenset[str]]:
        """Each group's official tensor patterns (groups may share them: classifier, choice)."""
        return {g: frozenset(s) for g, s in self.tensors.items() if g not in (ENCODER, RELATIVE)}

    @property
    def group_names(self) -> list[str]:
        return list(self.group_tensors)

    @cached_property
    def base_class(self) -> str:
        """transformers' class of the encoder alone (BertModel, RobertaModel, ...)."""
        return next(c for c, spec in self.classes.items() if spec.bertconv == "BertModel")

    def groups_of(self, model_class: str) -> tuple[str, ...]:
        return self.classes[model_class].groups

    def implementation(self, model_class: str) -> str:
        """bertconv's class that computes transformers' `model_class`."""
        return self.classes[model_class].bertconv

    def has_pooler(self, model_class: str) -> bool:
        return self.classes[model_class].pooler

    def shapes(self, config: BertConfig, groups=()) -> dict[str, tuple[int, ...]]:
        """The official tensors of the encoder and `groups`, with the shapes config.json implies."""
        return _shapes(self, config_key(config), tuple(groups))

    @cached_property
    def token_type_tensors(self) -> frozenset[str]:
        """The encoder's tensors of the token type embeddings (none in DistilBERT's)."""
        unit = self.units.get(TOKEN_TYPES)
        return frozenset(n for n in self.tensors[ENCODER] if unit and n.startswith(unit["prefix"]))

    @property
    def residual_layers(self) -> bool:
        """Is a layer's state the residual sum its anchor's output is added into (norms before
        each sublayer: none after it)?"""
        return self.facts["norm_first"]

    def lacks(self, pattern: str) -> int:
        """The layers before which `pattern` has no tensor: 1 where the first layer has none of
        it (ModernBERT's attention norm: the embeddings' norm is it), else 0."""
        return int(pattern in self.first_layer_lacks)

    def relative_names(self, config: BertConfig) -> frozenset[str]:
        """The official names of relative position embeddings' tensors, for config's layers,
        whether or not config.json asks for them."""
        layers = config.num_hidden_layers
        return frozenset(n for p in self.tensors[RELATIVE] for n in expand(p, layers))

    def config(self, d: dict, source: str = "config") -> BertConfig:
        """config.json as this type's config class reads it: its own field names resolved into
        BERT's (two names for one size disagreeing is refused, naming both), its own defaults,
        its fixed values; then checked as BertConfig checks every config."""
        resolved, problems = _resolved(d, self.config_spec, self.facts)
        return BertConfig.from_dict(resolved, source, problems, **self.facts)


def _resolved(d: dict, spec: dict, facts: dict) -> tuple[dict, list[str]]:
    """`d` in BERT's field names, with the type's defaults where it gives none."""
    out, problems = dict(d), []
    for ours, theirs in spec.get("aliases", {}).items():
        if ours in d and theirs in d and d[ours] != d[theirs]:
            problems.append(
                f"{theirs}={d[theirs]!r} and {ours}={d[ours]!r} disagree: both name the "
                f"{ours} of a {facts['model_type']} model; give one, or both the same"
            )
        if theirs in d:
            out[ours] = d[theirs]
    for ours, theirs in spec.get("fields", {}).items():
        out.pop(ours, None)  # BERT's name is no field of this type's: not read, as transformers
        if theirs in d:
            out[ours] = d[theirs]
    for ours, value in spec.get("defaults", {}).items():
        out.setdefault(ours, value)
    problems += [
        f"{name}={d[name]!r} is not supported (only {want!r})"
        for name, want in spec.get("only", {}).items()
        if name in d and d[name] != want
    ]
    return out | spec.get("fixed", {}), problems


@cache
def _shapes(arch: Architecture, key: tuple, groups: tuple[str, ...]) -> dict:
    config = BertConfig(**dict(key))
    out = {}
    left_out = frozenset() if config.token_types else arch.token_type_tensors
    for group in (ENCODER, *([RELATIVE] if config.relative else []), *groups):
        for pattern, dims in arch.tensors[group].items():
            if pattern in left_out:
                continue
            for name in expand(pattern, config.num_hidden_layers, arch.lacks(pattern)):
                out[name] = tuple(dim(d, config) for d in dims)
    return out


def read_config(d, source: str = "config") -> BertConfig:
    """config.json's dict as its model type reads it (BERT's where it names none)."""
    if not isinstance(d, dict):
        raise CheckpointError(f"{source}: holds a {type(d).__name__}, not a JSON object")
    kind = d.get("model_type", BASE)
    if not isinstance(kind, str) or kind not in _registry():
        known = " or ".join(map(repr, model_types()))
        why = NOT_BERT.get(kind) if isinstance(kind, str) else None
        raise CheckpointError(
            f"{source}: this model is not one bertconv's BERT can compute: "
            f"model_type={kind!r} is not supported (only {known})" + (f": {why}" if why else "")
        )
    return of(kind).config(d, source)


def model_types() -> list[str]:
    """The model types there is a catalog of."""
    return sorted(_registry())


@cache
def _registry() -> dict[str, Path]:
    """model_type -> its catalog's file. Each file names its model type, as its file name does;
    a model type claimed twice is refused."""
    found: dict[str, Path] = {}
    for path in sorted(ARCHITECTURES.glob("*.toml")):
        for model_type in (path.stem, *_raw(path).get("serves", {})):
            if model_type in found:
                raise TableError(f"{path}: model_type {model_type!r} has a catalog already")
            found[model_type] = path
    return found


@cache
def _raw(path: Path) -> dict:
    from .files import open_regular

    with open_regular(path) as f:
        raw = tomllib.loads(f.read().decode("utf-8"))
    return raw if isinstance(raw.get("serves", {}), dict) else raw | {"serves": {}}


@cache
def of(model_type: str) -> Architecture:
    """The architecture of `model_type`, its catalog held to its schema as a table is."""
    if model_type not in _registry():
        known = ", ".join(map(repr, model_types()))
        raise CheckpointError(
            f"model_type={model_type!r} is not supported: bertconv has a catalog of {known} "
            "(mappings/architectures/)"
        )
    path = _registry()[model_type]
    catalog = _extended(path)
    problems = _problems(catalog, path)
    if problems:
        lines = [f"{key}: {problem}" for key, problem in problems]
        raise TableError(f"{path}: not a valid architecture:\n  " + listed(lines, "\n  "))
    if model_type != path.stem:  # another type of the same architecture
        catalog = _renamed(catalog, model_type)
    return _architecture(catalog, model_type, path.stem)


def _extended(path: Path, seen=()) -> dict:
    """The catalog in `path`, laid over the one it extends."""
    child = _raw(path)
    parent_name = child.get("extends")
    if parent_name is None:
        return child
    parent_path = ARCHITECTURES / f"{parent_name}.toml"
    if not isinstance(parent_name, str) or parent_name in seen or not parent_path.is_file():
        raise TableError(f"{path}: extends {parent_name!r}, which is no other catalog here")
    merged = _merge(_extended(parent_path, (*seen, path.stem)), child)
    for dotted in child.get("drop", []):
        section, _, key = str(dotted).partition(".")
        if not isinstance(merged.get(section), dict) or key not in merged[section]:
            raise TableError(f"{path}: drop {dotted!r}: {parent_name}.toml has no such entry")
        merged[section] = {k: v for k, v in merged[section].items() if k != key}
    return merged


def _merge(parent: dict, child: dict) -> dict:
    out = {k: v for k, v in parent.items() if k not in ("serves", "extends", "drop")}
    for key, value in child.items():
        if key in REPLACED or not isinstance(value, dict) or key not in parent:
            out[key] = value
        elif key in MERGED_TWICE:
            out[key] = parent[key] | {k: parent[key].get(k, {}) | v for k, v in value.items()}
        else:
            out[key] = parent[key] | value
    return out


def _problems(catalog: dict, path: Path) -> list[tuple[str, str]]:
    problems = [(k, "missing, or not of its type") for k, kind in KEYS.items()
                if not isinstance(catalog.get(k), kind)]  # fmt: skip
    problems += [(k, "not of its type") for k, kind in OPTIONAL.items()
                 if k in catalog and not isinstance(catalog[k], kind)]  # fmt: skip
    if problems:
        return problems
    if catalog["model_type"] != path.stem:
        return [("model_type", f"{catalog['model_type']!r}, but the file is {path.name}")]
    groups = set(catalog["groups"])
    problems = shape_problems(catalog, "an architecture's")
    problems += _class_problems(catalog["classes"], groups)
    problems += [(k, "not a group nor a hidden state") for k in catalog["anchors"]
                 if k not in groups | {"embeddings", "layer", "last_layer"}]  # fmt: skip
    problems += [(f"config.{k}", f"one of {', '.join(CONFIG_PARTS)}, each a table")
                 for k, v in catalog.get("config", {}).items()
                 if k not in CONFIG_PARTS or not isinstance(v, dict)]  # fmt: skip
    problems += [(f"serves.{k}", "a table: prefix (of its classes' names), defaults (a table)")
                 for k, v in catalog.get("serves", {}).items()
                 if not isinstance(v, dict) or not isinstance(v.get("prefix"), str)
                 or not isinstance(v.get("defaults", {}), dict)]  # fmt: skip
    return problems


def _renamed(catalog: dict, model_type: str) -> dict:
    """The catalog as `model_type`'s: its classes (and config class) under that type's prefix,
    and its config class's own defaults."""
    base = catalog["config_class"].removesuffix("Config")
    served = catalog["serves"][model_type]
    classes = {n.replace(base, served["prefix"], 1): s for n, s in catalog["classes"].items()}
    config = catalog.get("config", {})
    config = config | {"defaults": config.get("defaults", {}) | served.get("defaults", {})}
    return catalog | {
        "model_type": model_type,
        "config_class": served["prefix"] + "Config",
        "classes": classes,
        "config": config,
    }


def _architecture(catalog: dict, model_type: str, family: str) -> Architecture:
    classes = {
        name: ClassSpec(
            tuple(spec["groups"]),
            tuple((row, output, kind != "sequence") for row, output, kind in spec["outputs"]),
            spec.get("bertconv", name),
            "pooler" in spec["groups"] or spec.get("pooler", False),
            frozenset(row for row, _, kind in spec["outputs"] if kind == "score"),
        )
        for name, spec in catalog["classes"].items()
    }
    facts = {
        "model_type": model_type,
        "token_types": catalog.get("token_types", True),
        "positions_after_pad": catalog.get("positions") == AFTER_PAD,
        "classification_activation": catalog.get("classification_activation", "tanh"),
        "relative_bias": catalog.get("relative_bias", False),
    }
    # The modern encoders' facts: BERT's family computes none of them (BertConfig's defaults).
    facts |= {k: catalog.get(k, getattr(BertConfig, k)) for k in MODERN_FACTS}
    assert set(facts) == set(CARRIED)
    return Architecture(
        model_type,
        family,
        catalog["config_class"],
        {g: {p: tuple(d) for p, d in rows.items()} for g, rows in sections(catalog)},
        classes,
        {k: tuple(v) for k, v in catalog["anchors"].items()},
        catalog["units"],
        catalog.get("bert"),
        facts,
        catalog.get("config", {}),
        frozenset(catalog.get("first_layer_lacks", [])),
    )


def sections(table: dict) -> list[tuple[str, dict]]:
    """(group, rows) for the encoder, its relative positions and each group, in order: a
    catalog's and a layout's table's alike."""
    return [
        (ENCODER, table[ENCODER]),
        (RELATIVE, table.get(RELATIVE, {})),
        *table.get("groups", {}).items(),
    ]


def expand(pattern: str, num_layers: int, first: int = 0) -> list[str]:
    """A name with `{layer}`, for each of `num_layers` layers from `first`; a name without it,
    as it is."""
    if "{layer}" not in pattern:
        return [pattern]
    return [pattern.replace("{layer}", str(i)) for i in range(first, num_layers)]


def dim(value: int | str, config: BertConfig) -> int:
    return value if isinstance(value, int) else getattr(config, value)


def is_dim(value) -> bool:
    if isinstance(value, bool):
        return False
    return (isinstance(value, int) and 0 <= value <= MAX_DIM) or (
        isinstance(value, str) and (value in SIZES or value in DERIVED)
    )


def config_key(config: BertConfig) -> tuple:
    """`config` as a key for caches (a dataclass is not hashable)."""
    return tuple(sorted(vars(config).items()))


def shape_problems(table: dict, kind: str) -> list[tuple[str, str]]:
    """Rows whose value should be a shape (a catalog's; a recognised-only layout's) and is not."""
    return [
        (name, f"{kind} row's value is its shape: a list of sizes or config.json fields")
        for _, rows in sections(table)
        for name, dims in rows.items()
        if not isinstance(dims, list) or not all(is_dim(d) for d in dims)
    ]


def _class_problems(classes: dict, groups: set[str]) -> list[tuple[str, str]]:
    """A class names the groups its files hold, and its outputs: [row, output, token or
    sequence], each row named after one of those groups."""
    problems = []
    for name, spec in classes.items():
        wanted = spec.get("groups") if isinstance(spec, dict) else None
        outputs = spec.get("outputs") if isinstance(spec, dict) else None
        if isinstance(spec, dict) and not isinstance(spec.get("pooler", False), bool):
            problems.append((name, "pooler: true or false"))
        elif not isinstance(wanted, list) or not all(g in groups for g in wanted):
            problems.append((name, f"groups: a list of groups ({', '.join(sorted(groups))})"))
        elif not isinstance(outputs, list) or not all(_is_output(o, wanted) for o in outputs):
            problems.append(
                (name, 'outputs: a list of ["GROUP ...", "output", "token"|"score"|"sequence"]')
            )
    return problems


def _is_output(output, groups: list[str]) -> bool:
    return (
        isinstance(output, list)
        and len(output) == 3
        and all(isinstance(x, str) for x in output)
        and output[0].split(" ")[0] in groups
        and output[2] in ("token", "score", "sequence")
    )


def forget() -> None:
    """Forget every catalog read (a test that adds one needs this)."""
    for cached in (_registry, _raw, of, _shapes):
        cached.cache_clear()
