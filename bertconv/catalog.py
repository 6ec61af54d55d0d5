"""What an architecture is, keyed by config.json's `model_type`: one catalog per model type under
mappings/architectures/ (BERT's is bert.toml). A catalog lists the architecture's tensors with
their shapes, grouped as the encoder, its relative position embeddings and each head (the pooler
counts as one); transformers' classes with their groups and outputs; where each compared output
is read in a model; and the units `bertconv infer` matches a model's tensors to.

The caller passes the model type (`BertConfig.model_type`: config.json's, BERT's where the file
names none, as Google's bert_config.json does) and one registry answers, as transformers'
`get_checkpoint_conversion_mapping(model_type)` does. A model type without a catalog is refused,
naming the ones there are. No torch here.
"""

import tomllib
from functools import cache
from pathlib import Path

from . import mappings
from .config import SIZES, BertConfig
from .errors import CheckpointError, TableError

ARCHITECTURES = Path(mappings.__file__).parent / "architectures"  # one file per model_type
ENCODER = "encoder"
RELATIVE = "relative"  # the encoder's relative position embeddings, where config.json has them
LISTED = 12  # problems named in one error
MAX_DIM = 1 << 24
DERIVED = ("attention_head_size", "relative_distances")  # sizes BertConfig computes
KEYS = {"model_type": str, "config_class": str, ENCODER: dict, RELATIVE: dict,
        "groups": dict, "classes": dict, "anchors": dict, "units": dict}  # fmt: skip
# Optional: other model types of the same architecture ({model_type: the prefix of its
# transformers classes}), how positions are numbered where not BERT's way (from 0), the
# activation of a classification head of dense + activation + out_proj (tanh by default),
# whether it has token types, BERT's config.json fields as its own name them ([config]), and
# how a from-scratch BERT holds its weights ([bert], bertconv/family.py).
OPTIONAL = {"serves": dict, "positions": str, "classification_activation": str,
            "token_types": bool, "config": dict, "bert": dict}  # fmt: skip
AFTER_PAD = "after the pad id"  # RoBERTa's: real tokens counted from pad_token_id + 1


def model_types() -> list[str]:
    """The model types there is a catalog of."""
    return sorted(_registry())


@cache
def _registry() -> dict[str, Path]:
    """model_type -> its catalog's file. Each file names its model type, as its file name does;
    a model type claimed twice is refused."""
    found: dict[str, Path] = {}
    for path in sorted(ARCHITECTURES.glob("*.toml")):
        for model_type in (path.stem, *_served(path)):
            if model_type in found:
                raise TableError(f"{path}: model_type {model_type!r} has a catalog already")
            found[model_type] = path
    return found


def _served(path: Path) -> dict:
    from .files import open_regular

    with open_regular(path) as f:
        served = tomllib.loads(f.read().decode("utf-8")).get("serves", {})
    return served if isinstance(served, dict) else {}


@cache
def architecture(model_type: str) -> dict:
    """The catalog of `model_type`, held to its schema as a table is."""
    if model_type not in _registry():
        known = ", ".join(map(repr, model_types()))
        raise CheckpointError(
            f"model_type={model_type!r} is not supported: bertconv has a catalog of {known} "
            "(mappings/architectures/)"
        )
    path = _registry()[model_type]
    from .files import open_regular

    with open_regular(path) as f:
        catalog = tomllib.loads(f.read().decode("utf-8"))
    problems = [(k, "missing, or not of its type") for k, kind in KEYS.items()
                if not isinstance(catalog.get(k), kind)]  # fmt: skip
    problems += [(k, "not of its type") for k, kind in OPTIONAL.items()
                 if k in catalog and not isinstance(catalog[k], kind)]  # fmt: skip
    if not problems and catalog["model_type"] != path.stem:
        problems = [("model_type", f"{catalog['model_type']!r}, but the file is {path.name}")]
    if not problems and model_type != path.stem:  # another type of the same architecture
        catalog = _renamed(catalog, model_type)
    if not problems:
        groups = set(catalog["groups"])
        problems = shape_problems(catalog, "an architecture's")
        problems += _class_problems(catalog["classes"], groups)
        problems += [(k, "not a group nor a hidden state") for k in catalog["anchors"]
                     if k not in groups | {"embeddings", "layer"}]  # fmt: skip
    if problems:
        lines = [f"  {key}: {problem}" for key, problem in problems[:LISTED]]
        raise TableError(f"{path}: not a valid architecture:\n" + "\n".join(lines))
    return catalog


def _renamed(catalog: dict, model_type: str) -> dict:
    """The catalog as `model_type`'s: its classes (and config class) under that type's prefix."""
    base = catalog["config_class"].removesuffix("Config")
    prefix = catalog["serves"][model_type]
    classes = {name.replace(base, prefix, 1): spec for name, spec in catalog["classes"].items()}
    config_class = prefix + "Config"
    return catalog | {"model_type": model_type, "config_class": config_class, "classes": classes}


def family(model_type: str) -> str:
    """The model type whose catalog `model_type` is read with (roberta for xlm-roberta)."""
    architecture(model_type)  # refused, naming those there are, where there is none
    return _registry()[model_type].stem


def implementation(model_class: str, model_type: str) -> str:
    """bertconv's class that computes transformers' `model_class` (its own name, for BERT's)."""
    return architecture(model_type)["classes"][model_class].get("bertconv", model_class)


def base_class(model_type: str) -> str:
    """transformers' class of the encoder alone (BertModel, RobertaModel, ...)."""
    return next(c for c in classes(model_type) if implementation(c, model_type) == "BertModel")


def has_token_types(model_type: str) -> bool:
    return architecture(model_type).get("token_types", True)


def numbers_positions_after_pad(model_type: str) -> bool:
    return architecture(model_type).get("positions") == AFTER_PAD


def reserved_positions(config: BertConfig) -> int:
    """Rows of the position table no token reads as a position: RoBERTa's, up to the pad id."""
    return config.pad_token_id + 1 if numbers_positions_after_pad(config.model_type) else 0


def sections(table: dict) -> list[tuple[str, dict]]:
    """(group, rows) for the encoder, its relative positions and each group, in order: a
    catalog's and a layout's table's alike."""
    return [
        (ENCODER, table[ENCODER]),
        (RELATIVE, table.get(RELATIVE, {})),
        *table.get("groups", {}).items(),
    ]


@cache
def tensors(model_type: str) -> dict[str, dict[str, list]]:
    """Official tensor patterns with their shapes, by group (the encoder first)."""
    return dict(sections(architecture(model_type)))


@cache
def group_tensors(model_type: str) -> dict[str, frozenset[str]]:
    """Each group's official tensor patterns (groups may share them: classifier, choice)."""
    return {g: frozenset(s) for g, s in tensors(model_type).items() if g not in (ENCODER, RELATIVE)}


def group_names(model_type: str) -> list[str]:
    """Every group, in the architecture's order."""
    return list(group_tensors(model_type))


def classes(model_type: str) -> dict[str, list[str]]:
    """transformers' classes, each with the groups its files hold, in the order they are tried
    when a file is identified."""
    return {name: spec["groups"] for name, spec in architecture(model_type)["classes"].items()}


def outputs(model_class: str, model_type: str) -> list[tuple[str, str, bool]]:
    """What a class computes beyond the hidden states and the pooler: (verify's row, transformers'
    output name, per token)."""
    specs = architecture(model_type)["classes"][model_class]["outputs"]
    return [(row, output, kind == "token") for row, output, kind in specs]


def anchors(model_type: str) -> dict[str, list[str]]:
    """The official tensors whose last use in a forward gives each compared output."""
    return architecture(model_type)["anchors"]


def has_pooler(class_name: str, model_type: str) -> bool:
    """Does transformers' class build a pooler (its groups name one, or it says so)?"""
    spec = architecture(model_type)["classes"][class_name]
    return "pooler" in spec["groups"] or spec.get("pooler", False)


def shapes(config: BertConfig, groups: list[str] | tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """The official tensors of the encoder and `groups`, with the shapes config.json implies."""
    return _shapes(config_key(config), tuple(groups))


@cache
def _shapes(key: tuple, groups: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    config = BertConfig(**dict(key))
    found = tensors(config.model_type)
    out = {}
    for group in (ENCODER, *([RELATIVE] if config.relative else []), *groups):
        for pattern, dims in found[group].items():
            for name in expand(pattern, config.num_hidden_layers):
                out[name] = tuple(dim(d, config) for d in dims)
    return out


def relative_names(config: BertConfig) -> frozenset[str]:
    """The official names of relative position embeddings' tensors, for config's layers, whether
    or not config.json asks for them."""
    patterns = tensors(config.model_type)[RELATIVE]
    return frozenset(n for p in patterns for n in expand(p, config.num_hidden_layers))


def expand(pattern: str, num_layers: int) -> list[str]:
    """A name with `{layer}`, for each of `num_layers` layers; a name without it, as it is."""
    if "{layer}" not in pattern:
        return [pattern]
    return [pattern.replace("{layer}", str(i)) for i in range(num_layers)]


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
                (name, 'outputs: a list of ["GROUP ...", "output", "token"|"sequence"]')
            )
    return problems


def _is_output(output, groups: list[str]) -> bool:
    return (
        isinstance(output, list)
        and len(output) == 3
        and all(isinstance(x, str) for x in output)
        and output[0].split(" ")[0] in groups
        and output[2] in ("token", "sequence")
    )


def forget() -> None:
    """Forget every catalog read (a test that adds one needs this)."""
    for cached in (_registry, architecture, tensors, group_tensors, _shapes):
        cached.cache_clear()
