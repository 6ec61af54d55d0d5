"""BERT's family held as BERT: a RoBERTa, ELECTRA or DistilBERT checkpoint as a from-scratch
BERT takes it (`verify --model`, `infer`). Such a BERT numbers positions from 0 and reads two
token types, under BERT's config.json fields and official names; what differs is declared in
each architecture's catalog, in its [bert] section, never decided here:

    [bert.tensors]  BERT's official tensor -> this architecture's it is made of: a name (or the
                    first there is of a list); { rows_after_pad = NAME }: its rows past the pad
                    id's (RoBERTa's first real token reads the first); { two_rows = NAME }: its
                    one token type as both of BERT's; { zeros = true }: none, BERT's of zeros.
                    A tensor not named is BERT's under the same name.
    [bert.groups]   this architecture's group -> BERT's groups holding it (a head with no place
                    in BERT, ELECTRA's discriminator, is left out and not compared).
"""

import re
from dataclasses import replace

from . import catalog, storage
from .checkpoint import Checkpoint
from .config import CARRIED, BertConfig
from .convert import Reading
from .mapping import class_for, layout
from .tables import OFFICIAL

TYPES = 2  # token types a BERT reads


def bert_config_dict(config_dict: dict, config: BertConfig | None = None) -> dict:
    """config.json (read as `config`, where read already) as a BERT's: BERT's field names,
    positions from 0 (RoBERTa's reserved rows left out), two token types, the type's own eps;
    the same in infer and verify --model."""
    config = config or catalog.read_config(config_dict, "--config")
    if catalog.of(config.model_type).bert is None:  # BERT (or a variant) already
        return config_dict
    bert = replace(
        config,
        max_position_embeddings=config.max_position_embeddings - config.reserved_positions,
        type_vocab_size=max(TYPES, config.type_vocab_size),
    )
    fields = {k: v for k, v in vars(bert).items() if k not in CARRIED}
    return config_dict | fields | {"model_type": "bert"}


def as_bert(ckpt: Checkpoint, reading: Reading) -> tuple[Checkpoint, Reading]:
    """`ckpt` and its reading as BERT's (the same objects for a BERT checkpoint)."""
    spec = ckpt.architecture.bert
    if spec is None:
        return ckpt, reading
    config_dict = bert_config_dict(ckpt.config_dict, ckpt.config)
    config = BertConfig.from_dict(config_dict, str(ckpt.path))
    groups = frozenset(g for group in reading.groups for g in spec["groups"].get(group, []))
    table = layout(OFFICIAL, config)  # BERT's
    official = {}
    for name, shape in table.official_shapes(config, sorted(groups)).items():
        official[name] = _made(name, shape, spec["tensors"], reading.official, ckpt.config)
    model_class = class_for(groups, table.architecture)
    named = {n: n for n in official}
    held = Reading(official, model_class, groups, named, [], 0, table, reading.source)
    return replace(ckpt, config=config, config_dict=config_dict), held


def left_out(ckpt: Checkpoint, reading: Reading) -> list[str]:
    """The checkpoint's heads that have no place in BERT (ELECTRA's discriminator)."""
    spec = ckpt.architecture.bert
    return sorted(g for g in reading.groups if spec and not spec["groups"].get(g))


def _made(name: str, shape, rules: dict, theirs: dict, config: BertConfig) -> storage.Tensor:
    """BERT's tensor `name` (of `shape`), made of the architecture's as `rules` say."""
    rule = _rule(name, rules)
    if isinstance(rule, (str, list)):
        found = [n for n in ([rule] if isinstance(rule, str) else rule) if n in theirs]
        return theirs[found[0]]
    if "zeros" in rule:
        return storage.InMemory("F32", tuple(shape), bytes(4 * shape[0] * shape[1]))
    if "two_rows" in rule:
        one = theirs[rule["two_rows"]]
        return storage.join_rows([one] * (shape[0] // one.shape[0]))
    source, reserved = theirs[rule["rows_after_pad"]], config.reserved_positions
    return storage.split_rows(source, [reserved, source.shape[0] - reserved])[1]


def _rule(name: str, rules: dict):
    """The rule for `name` (a pattern's {layer} its index), or the same name."""
    for pattern, rule in rules.items():
        found = re.fullmatch(re.escape(pattern).replace(r"\{layer\}", r"(\d+)"), name)
        if found:
            index = found.group(1) if found.groups() else ""
            return rule.replace("{layer}", index) if isinstance(rule, str) else rule
    return name
