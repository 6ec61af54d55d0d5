"""The batches verify runs both models on: the checkpoint's own tokenizer on a few real sentences
(where it ships one), random ids, and random ids of every position a sequence may have, each
padded. Each short shape is run twice, the second time with other right-padded lengths, so that
a model that keeps something of one batch for the next of its shape (its mask, cached by
shape) is caught; the batch of every position, the costliest, once (a cache kept by shape
shows on the short twins). Every batch has a row count other than its length, so that a
model's outputs read (tokens, batch, features) are told from (batch, tokens, features) by their
shape alone."""

import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from . import files
from .config import BertConfig
from .errors import CheckpointError

# Real text for the checkpoint's own tokenizer: single sentences and pairs (token types 0 and 1),
# of different lengths so that the batch is padded.
TEXTS = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("Where did you put the keys?", "They are on the kitchen table, next to the bread."),
    ("BERT reads a sentence in both directions at once.", None),
    ("I went to the bank", "to deposit my paycheck before the river flooded the town."),
]
RANDOM_BATCH, RANDOM_LENGTH, SEED = 4, 48, 0
# A batch of the checkpoint's full length: a row of it and one of at most RANDOM_LENGTH tokens (two
# rows: a (tokens, hidden) tensor is never (batch * tokens, hidden) too).
FULL_ROWS = 2
TEXT, RANDOM = "tokenized text", "random ids"
LEFT = "random ids padded on the left"  # the random ids, their padding moved before the tokens
CHOICES = 2  # multiple choice: a batch's rows are taken in twos, as the choices of one question
TOKENIZER_LIMIT = 256 << 20  # bytes; the largest real tokenizer.json files are ~20 MB


def tokenizer_batch(tok, config: BertConfig, path: Path) -> dict[str, torch.Tensor] | None:
    """TEXTS through the checkpoint's own tokenizer `tok` (read from `path`: tokenizer()),
    padded; None where it ships none."""
    if tok is None:
        return None
    tok.enable_padding(pad_id=config.pad_token_id)
    tok.enable_truncation(positions(config))
    try:
        encodings = tok.encode_batch([a if b is None else (a, b) for a, b in TEXTS])
    except Exception as e:  # tokenizers raises its own Exception for a vocabulary it cannot use
        reason = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise CheckpointError(
            f"{path}: its tokenizer cannot encode text ({reason}); a BERT vocabulary has [UNK], "
            "[CLS], [SEP] and [PAD]"
        ) from None
    # Truncation keeps the special tokens whatever max_length says: a model of very few
    # positions gets the first of them.
    keep = positions(config)
    ids = torch.tensor([e.ids for e in encodings])[:, :keep]
    if ids.numel() and int(ids.max()) >= config.vocab_size:
        raise CheckpointError(
            f"{path}: its tokenizer gives ids up to {int(ids.max())}, but config.json says "
            f"vocab_size={config.vocab_size}: the tokenizer is not this model's"
        )
    return apart(
        {
            "input_ids": ids,
            "attention_mask": torch.tensor([e.attention_mask for e in encodings])[:, :keep],
            # A model with one token type (type_vocab_size=1) reads a pair's second part as type 0.
            "token_type_ids": torch.tensor([e.type_ids for e in encodings])[:, :keep].clamp(
                max=config.type_vocab_size - 1
            ),
        }
    )


def tokenizer(path: Path):
    """The checkpoint's own tokenizer: tokenizer.json, else vocab.txt; None where neither is."""
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer

    for name in ("tokenizer.json", "vocab.txt"):
        file = path / name
        if not files.is_present(file):
            continue
        with files.open_regular(file) as f:  # a regular file, of a tokenizer's size, read once
            size = os.fstat(f.fileno()).st_size
            if size > TOKENIZER_LIMIT:
                raise CheckpointError(
                    f"{file}: {size >> 20} MB, larger than any tokenizer "
                    f"({TOKENIZER_LIMIT >> 20} MB)"
                )
            data = f.read(TOKENIZER_LIMIT + 1)
        try:
            text = data.decode("utf-8")
            if name == "tokenizer.json":
                return Tokenizer.from_str(text)
            return BertWordPieceTokenizer(_vocabulary(text), lowercase=_lowercase(path))
        except Exception as e:  # tokenizers raises its own Exception for any malformed file
            raise CheckpointError(f"{file}: not a tokenizer that can be read ({e})") from None
    return None


def _vocabulary(text: str) -> dict[str, int]:
    """vocab.txt's word pieces by their ids, as tokenizers reads the file: a line each (its
    trailing whitespace left out), a piece repeated taking its last line's id."""
    lines = text.split("\n")
    lines = lines[:-1] if lines and not lines[-1] else lines
    return {line.rstrip(): i for i, line in enumerate(lines)}


def _lowercase(path: Path) -> bool:
    config = path / "tokenizer_config.json"
    if not files.is_present(config):
        return True
    lowercase = files.read_json_object(config).get("do_lower_case", True)
    if not isinstance(lowercase, bool):
        raise CheckpointError(f"{config}: do_lower_case={lowercase!r} is not true or false")
    return lowercase


def positions(config: BertConfig) -> int:
    """How many tokens a sequence may have: RoBERTa's reserved rows are no position."""
    return config.max_position_embeddings - config.reserved_positions


@dataclass(frozen=True)
class Batch:
    """One batch both models read: its kind (what `Report.inputs` lists), its tensors, whether it
    is the twin of the batch before it (its shape, other padding), whether it reaches every
    position a sequence may have, and whether it is padded on the left."""

    kind: str
    tensors: dict[str, torch.Tensor]
    again: bool = False
    full: bool = False
    left: bool = False

    @property
    def longest(self) -> int:
        """The most real tokens a sequence of it has."""
        return int(self.tensors["attention_mask"].sum(-1).max())


def random_batch(
    config: BertConfig, length: int = RANDOM_LENGTH, rows: int = RANDOM_BATCH, others: int = 0
) -> dict[str, torch.Tensor]:
    """Random ids and token types, every row but the first padded to a random length (of at
    most `others` tokens, where given): the pad id at every padded place, and never among the
    real tokens (RoBERTa tells them apart by it)."""
    g = torch.Generator().manual_seed(SEED)
    shape = (rows, max(1, min(length, positions(config))))
    longest = min(others or shape[1], shape[1])
    lengths = torch.randint(min(2, longest), longest + 1, (shape[0],), generator=g)
    lengths[0] = shape[1]
    mask = (torch.arange(shape[1]) < lengths[:, None]).long()
    ids = torch.randint(0, max(1, config.vocab_size - 1), shape, generator=g)
    ids += (ids >= config.pad_token_id).long() if config.vocab_size > 1 else 0
    return apart(
        {
            "input_ids": torch.where(mask.bool(), ids, config.pad_token_id),
            "attention_mask": mask,
            "token_type_ids": torch.randint(0, config.type_vocab_size, shape, generator=g),
        }
    )


def apart(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`batch`, with its last row repeated where it has as many rows as tokens: a model that
    works time-first returns (tokens, batch, features), and only sizes that differ tell that
    from (batch, tokens, features). Repeated CHOICES times, so that multiple choice still takes
    the rows in twos."""
    rows, length = batch["input_ids"].shape
    if rows != length:
        return batch
    return {k: torch.cat([v, *[v[-1:]] * CHOICES]) for k, v in batch.items()}


def repadded(batch: dict[str, torch.Tensor], pad_token_id: int) -> dict[str, torch.Tensor]:
    """A batch of `batch`'s shape whose rows have other right-padded lengths: its rows taken one
    further on; where that changes no length (every row as long), its last row cut to half."""
    rolled = {k: v.roll(1, 0) for k, v in batch.items()}
    mask = rolled["attention_mask"]
    if not torch.equal(mask, batch["attention_mask"]) or mask.shape[1] < 2:
        return rolled
    cut = torch.ones_like(mask)
    cut[-1, mask.shape[1] // 2 :] = 0
    return {
        "input_ids": torch.where(cut.bool(), rolled["input_ids"], pad_token_id),
        "attention_mask": mask * cut,
        "token_type_ids": rolled["token_type_ids"] * cut,
    }


def pattern(batches: list[Batch], differs: list[bool]) -> str | None:
    """What the batches an output differs on have in common, where it tells a cause: every batch
    right the first time its shape is run and a twin wrong (something kept from an earlier batch
    of that shape); or every batch of at most N tokens right and a longer one wrong."""
    if not any(differs) or all(differs):
        return None
    wrong = [b for b, d in zip(batches, differs, strict=True) if d]
    if all(b.left for b in wrong):
        return (
            "right on every batch padded on the right, wrong on the one padded on the left: "
            "your model computes a sequence otherwise where padding comes before its tokens"
        )
    if all(b.again for b in wrong):
        return (
            f"right on each batch the first time its shape is run, wrong on the {wrong[0].kind} "
            "run again with other padding: your model keeps something of an earlier batch of "
            "that shape (a mask cached by its shape?)"
        )
    right = max(b.longest for b, d in zip(batches, differs, strict=True) if not d)
    if right < min(b.longest for b in wrong):
        return (
            f"right on every batch of sequences of up to {right} tokens, wrong on a batch "
            f"reaching {min(b.longest for b in wrong)}: your model computes longer sequences "
            "otherwise"
        )
    return None


def left_padded(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same rows with their padding moved to the left."""
    n = batch["attention_mask"].shape[1]
    pads = (batch["attention_mask"] == 0).sum(1)
    index = (torch.arange(n)[None, :] - pads[:, None]) % n
    return {k: v.gather(1, index) for k, v in batch.items()}


def inputs(
    config: BertConfig, tok=None, path: Path | None = None, choices: bool = False
) -> list[Batch]:
    """The batches both models read: the checkpoint's own tokenizer `tok` (read from `path`) on
    TEXTS where it ships one, random ids, the same padded on the left (as users' batches may
    be: the checkpoint's own class on them is the reference), and random ids of the full length
    (a model right on short sequences alone is caught), each short one followed by its twin of
    the same shape, padded otherwise (`repadded`); for multiple choice, rows taken in twos as
    the choices of one item."""
    text = tokenizer_batch(tok, config, path)
    kinds = [Batch(TEXT, text)] if text is not None else []
    random = random_batch(config)
    kinds += [Batch(RANDOM, random), Batch(LEFT, left_padded(random), again=True, left=True)]
    full = positions(config)
    within = config.local_attention - 1  # a sequence just inside a local window's width
    if config.local_attention and config.reach + 1 < within < full and within != RANDOM_LENGTH:
        # its tokens farther apart than the window reaches: a model that takes a sequence no
        # longer than the window for one that needs none (global attention) is caught
        tensors = random_batch(config, within)
        kinds.append(Batch(f"random ids of {within} positions (within a local window)", tensors))
    if full > RANDOM_LENGTH:  # else the random ids are of the full length already
        tensors = random_batch(config, full, FULL_ROWS, others=RANDOM_LENGTH)
        kinds.append(Batch(f"random ids of all {full} positions", tensors, full=True))
    batches = []
    for b in kinds:  # the batch of every position has none: a shorter twin catches a cache
        twin = Batch(b.kind, repadded(b.tensors, config.pad_token_id), again=True, full=b.full)
        batches += [b] if b.full or b.left else [b, twin]
    if choices:
        return [replace(b, tensors=_in_twos(b.tensors)) for b in batches]
    return batches


def _in_twos(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {n: t.view(-1, CHOICES, t.shape[-1]) for n, t in tensors.items()}
