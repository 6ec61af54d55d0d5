"""BERT's family held by a from-scratch model: a RoBERTa, ELECTRA or DistilBERT checkpoint as
the user's model takes it (`verify --model`, `infer`, `convert --to TABLE`). How it holds the
weights is a table's [holding] (tables.Holding): positions counted from 0 (a BERT's: RoBERTa's
reserved rows left out) or after the pad id (RoBERTa's own: every row); two token type rows
(a BERT's), the type's own count, or none; under BERT's official names, or (`names`) the type's
own. What differs between a type and BERT is declared in each architecture's catalog, in its
[bert] section, never decided here:

    [bert.tensors]  BERT's official tensor -> this architecture's it is made of: a name (or the
                    first there is of a list); { rows_after_pad = NAME }: its rows past the pad
                    id's (RoBERTa's first real token reads the first), or all of them where the
                    model counts after the pad id; { two_rows = NAME }: its one token type as
                    both of BERT's, or as the one the model has; { zeros = true }: none, zeros.
                    A tensor not named is BERT's under the same name.
    [bert.groups]   this architecture's group -> BERT's groups holding it (a head with no place
                    in BERT, ELECTRA's discriminator, is held under the type's own names).
"""

import re
from dataclasses import replace

from . import catalog, storage
from .catalog import AFTER_PAD, FROM_ZERO
from .checkpoint import Checkpoint
from .config import CARRIED, BertConfig
from .convert import Reading
from .errors import CheckpointError
from .mapping import class_for, layout
from .tables import BERT_HOLDING, OFFICIAL, Holding, holding_of, layout_names

TYPES = 2  # token types a BERT reads


def own(config: BertConfig) -> Holding:
    """The holding of a model written as the checkpoint's type defines it: its positions, its
    token type rows (DistilBERT's none)."""
    after = AFTER_PAD if config.positions_after_pad else FROM_ZERO
    return Holding(after, config.type_vocab_size if config.token_types else 0)


def holdings(config: BertConfig) -> list[Holding]:
    """The ways a from-scratch model may hold a checkpoint read as `config`, each telling
    another model apart: the type's own first, then BERT's (positions from 0, two token types).
    None for a type whose arithmetic BERT's model lacks (MPNet's relative attention bias, the
    modern encoders'): only a model under the type's own names holds it."""
    if beyond_bert(config):
        return []
    mine = own(config)
    if held_config(config, mine) == held_config(config, BERT_HOLDING):  # a BERT's (ELECTRA's)
        return [BERT_HOLDING]
    return [mine, BERT_HOLDING]


def ways(config: BertConfig) -> list[Holding]:
    """The ways a from-scratch model may hold a checkpoint read as `config`, in the order verify
    and infer alike try them: under BERT's names as `holdings` says, then, for a type of BERT's
    family, under the type's own names, its tensors as they are (a head BERT has no place for,
    ELECTRA's discriminator; MPNet's bias, which no BERT holds; a port keeping transformers'
    names)."""
    found = holdings(config)
    if catalog.of(config.model_type).bert is not None:
        found.append(replace(own(config), names=config.model_type))
    return found


def held_config(config: BertConfig, holding: Holding) -> BertConfig:
    """`config` (a checkpoint's, of any type) as a model holding it so computes: BERT's
    arithmetic, its positions counted as `holding` says (from 0: RoBERTa's reserved rows left
    out), its token type rows."""
    after = holding.positions == AFTER_PAD
    types = holding.token_types
    types = max(TYPES, config.type_vocab_size) if types is None else types
    return replace(
        config,
        model_type="bert",
        max_position_embeddings=config.max_position_embeddings
        - (0 if after else config.reserved_positions),
        positions_after_pad=after,
        type_vocab_size=max(types, 1),
        token_types=types > 0,
    )


def factory_dict(config_dict: dict, config: BertConfig, holding: Holding = BERT_HOLDING) -> dict:
    """What the user's factory is given: config.json's every field, and beside them BERT's
    field names holding what the model holds (`config`: config.json as its type reads it):
    RoBERTa's 514 positions and one token type as its own, 512 and two as a BERT's."""
    held = held_config(config, holding)
    fields = {k: v for k, v in vars(held).items() if k not in CARRIED}
    if not config.relative_bias:  # a field of MPNet's alone, not given to a BERT's factory
        fields.pop("relative_attention_num_buckets")
    kind = config_dict.get("model_type") if holding != BERT_HOLDING else "bert"
    return config_dict | fields | ({"model_type": kind} if kind else {})


def held(ckpt: Checkpoint, reading: Reading, holding: Holding) -> tuple[Checkpoint, Reading]:
    """`ckpt` and its reading as a from-scratch model holding them as `holding` says, under
    BERT's official names (the same objects for a BERT checkpoint held as BERT)."""
    arch = ckpt.architecture
    if arch.bert is None and holding == BERT_HOLDING:
        return ckpt, reading
    beyond = beyond_bert(ckpt.config)
    if beyond:  # MPNet's bias, the modern encoders' arithmetic: no BERT computes them
        raise CheckpointError(
            f"{ckpt.path}: a {arch.model_type} checkpoint's {beyond} has no place in a BERT's "
            "model (minbert's, or one a table of BERT's names holds): left out, every layer "
            f"would differ. Convert it into one of {arch.model_type}'s layouts "
            f"({', '.join(layout_names(arch.model_type))})"
        )
    if holding.positions == AFTER_PAD and not ckpt.config.positions_after_pad:
        raise CheckpointError(
            f"{ckpt.path}: the table's model counts positions after the pad id (RoBERTa's way); "
            f"a {arch.model_type} checkpoint counts them from 0. Infer the table with this "
            "checkpoint's config.json (`bertconv infer --config`)"
        )
    spec = arch.bert or {"tensors": {}, "groups": {g: [g] for g in arch.group_names}}
    config = held_config(ckpt.config, holding)
    config_dict = factory_dict(ckpt.config_dict, ckpt.config, holding)
    groups = frozenset(g for group in reading.groups for g in spec["groups"].get(group, []))
    table = layout(OFFICIAL, config)  # BERT's
    official = {}
    for name, shape in table.official_shapes(config, sorted(groups)).items():
        made = _made(name, shape, spec["tensors"], reading.official, ckpt.config)
        if tuple(made.shape) != tuple(shape):
            raise CheckpointError(
                f"{ckpt.path}: {name} is {tuple(made.shape)} in the checkpoint; the table's "
                f"model holds it as {tuple(shape)} ([holding] token_types="
                f"{holding.token_types}): infer the table with this checkpoint's config.json"
            )
        official[name] = made
    model_class = class_for(groups, table.architecture)
    named = {n: n for n in official}
    held_reading = Reading(official, model_class, groups, named, [], 0, table, reading.source)
    return replace(ckpt, config=config, config_dict=config_dict), held_reading


def same_family(ckpt: Checkpoint, holding: Holding, table: str) -> None:
    """A table in a type's own names ([holding] names) fits checkpoints of that type's catalog."""
    if catalog.of(holding.names).family != ckpt.architecture.family:
        raise CheckpointError(
            f"{table}: its rows give {holding.names}'s names ([holding] names); "
            f"{ckpt.path} is a {ckpt.config.model_type} checkpoint. Infer a table with its "
            "config.json (`bertconv infer --config`)"
        )


def for_table(ckpt: Checkpoint, reading: Reading, table: str) -> tuple[Checkpoint, Reading]:
    """`ckpt` and its reading as the model of table file `table` holds them ([holding]), to be
    converted: token type embeddings its model has none of are refused where not zeros."""
    holding = holding_of(table)
    left_out = left_out_types(ckpt, reading, holding)
    if left_out > 0:
        raise CheckpointError(
            f"{ckpt.path}: the model of {table} has no token type embeddings ([holding] "
            f"token_types = 0), and the checkpoint's are not zero (max abs {left_out:.1e}): "
            "converted without them, its embeddings would differ. Give the model a token type "
            "table and infer its table again"
        )
    if holding.names is None:
        return held(ckpt, reading, holding)
    same_family(ckpt, holding, table)
    return ckpt, reading


def beyond_bert(config: BertConfig) -> str | None:
    """What of a checkpoint's arithmetic no BERT's model computes, in words; None where a BERT
    holds it all."""
    if config.relative_bias:
        return (
            "relative attention bias (encoder.relative_attention_bias.weight), which every "
            "layer adds to its attention scores,"
        )
    if config.rotary:
        norms = ", norms before each sublayer" if config.norm_first else ""
        window = ", local attention windows" if config.local_attention else ""
        return f"arithmetic (rotary positions{window}, a gated feed-forward{norms})"
    return None


def as_bert(ckpt: Checkpoint, reading: Reading) -> tuple[Checkpoint, Reading]:
    """`ckpt` and its reading as BERT's (the same objects for a BERT checkpoint)."""
    return held(ckpt, reading, BERT_HOLDING)


def left_out_types(ckpt: Checkpoint, reading: Reading, holding: Holding) -> float:
    """How far from zero the checkpoint's token type rows are where the model has no token type
    table (0.0 where it has one, or the checkpoint none)."""
    if holding.token_types != 0:
        return 0.0
    names = ckpt.architecture.token_type_tensors & set(reading.official)
    values = [storage.to_torch(reading.official[n]).abs().max().item() for n in names]
    return max(values, default=0.0)


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
    if "two_rows" in rule:  # the type's rows, repeated as many times as the model has room
        one = theirs[rule["two_rows"]]
        return storage.join_rows([one] * max(1, shape[0] // one.shape[0]))
    source, reserved = theirs[rule["rows_after_pad"]], config.reserved_positions
    if shape[0] == source.shape[0]:  # held after the pad id: every row, as RoBERTa's
        return source
    return storage.split_rows(source, [reserved, source.shape[0] - reserved])[1]


def _rule(name: str, rules: dict):
    """The rule for `name` (a pattern's {layer} its index), or the same name."""
    for pattern, rule in rules.items():
        found = re.fullmatch(re.escape(pattern).replace(r"\{layer\}", r"(\d+)"), name)
        if found:
            index = found.group(1) if found.groups() else ""
            return rule.replace("{layer}", index) if isinstance(rule, str) else rule
    return name
