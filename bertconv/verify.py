"""Parity: bertconv's model against transformers' on the same weights and inputs, layer by layer.

Tolerances, stated once:
- float32: every compared value within FLOAT32_MAX_ABS of transformers' (TF32 off on GPU); the
  batches of every position compared so in float64, and in float32 within FULL_FLOAT32_MAX_ABS.
- bfloat16, float16: our error against transformers-in-float32 at most LOW_PRECISION_FACTOR times
  transformers' own error in that dtype, row by row.
Only real (non-padded) positions are compared: padding positions carry no meaning.
"""

import math
from dataclasses import asdict, dataclass, field

import torch

from . import files, sentence, storage
from .api import Source, build, official, resolve
from .batches import RANDOM, Batch, inputs, left_padded, pattern, positions, tokenizer
from .checkpoint import Checkpoint, read_checkpoint
from .convert import FITTING, Reading, convert_reading
from .errors import CheckpointError, UsageError
from .mapping import layout
from .outputs import (
    FLOAT32_MAX_ABS,
    POOLER,
    SENTENCE,
    Note,
    Output,
    Runner,
    cast_order,
    heads,
    key,
    layer,
    looked_up,
    no_tf32,
    truth,
)
from .reference import (
    implements,
    imported,
    reference_model,
    sentence_embeddings,
    sentence_transformers,
)
from .yours.adapter import diagnosis, yours
from .yours.diagnose import Diagnosis
from .yours.fence import unpatch
from .yours.harness import Harness, Plan
from .yours.sentence_steps import diagnosed

# The batches of every position compared in float64 are run in float32 too, and held to this:
# float32's own rounding over them stays far under it (1.2e-5 at most on all-MiniLM-L6-v2's 512
# positions), half precision inside does not (1e-3 to 1e-2).
FULL_FLOAT32_MAX_ABS = 1e-4
LOW_PRECISION_FACTOR = 2.0
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# config.json fields transformers acts on that leave BERT's arithmetic as it is (bertconv's model
# has no use for them), named where transformers fails on them
ACTED_ON = ("chunk_size_feed_forward",)


@dataclass
class Comparison:
    """One compared output: how far bertconv's is from transformers', and the limit."""

    name: str
    max_abs: float
    mean_abs: float
    limit: float
    reference_max_abs: float | None = None  # transformers' own error, in bfloat16/float16

    @property
    def passed(self) -> bool:
        return self.max_abs <= self.limit  # NaN never passes


@dataclass
class Report:
    source: str
    model_class: str
    device: str
    dtype: str
    inputs: list[str]  # the kinds of batch, each run twice (the second padded otherwise)
    longest_sequence: int  # tokens: the longest sequence compared
    # kinds of batch compared in float64 (float32's own rounding over every position nears
    # the tolerance), each named in `inputs` too
    in_float64: list[str] = field(default_factory=list)
    rows: list[Comparison] = field(default_factory=list)
    nonfinite: list[str] = field(default_factory=list)  # weights holding NaN or Inf, by name
    notes: list[str] = field(default_factory=list)  # what to know besides the rows
    diagnosis: Diagnosis | None = None  # where and why the first failing row differs
    # the batches of `in_float64` run in float32 too, every hidden state and the pooler whose
    # rows passed set against transformers' float32 (within FULL_FLOAT32_MAX_ABS)
    float32_full: Comparison | None = None
    # a sentence-transformers directory's: the texts embedded, each one's tokens before
    # truncation (the prompt's included), and the length the directory truncates them to
    sentence_tokens: list[int] = field(default_factory=list)
    sentence_truncation: int | None = None

    @property
    def passed(self) -> bool:
        compared = [*self.rows, *([self.float32_full] if self.float32_full else [])]
        return bool(self.rows) and not self.nonfinite and all(row.passed for row in compared)

    def to_dict(self) -> dict:
        rows = [asdict(r) | {"passed": r.passed} for r in self.rows]
        full = self.float32_full
        full = asdict(full) | {"passed": full.passed} if full else None
        return asdict(self) | {"rows": rows, "float32_full": full, "passed": self.passed}


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here; use --device cpu")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device {device!r}: one of auto, cpu, cuda")
    return torch.device(device)


def verify(
    source: str,
    device: str = "auto",
    dtype: str = "float32",
    revision: str | None = None,
    from_layout: str | None = None,
    model: str | None = None,
    model_layout: str | None = None,
):
    """Run bertconv's model (or the user's, `model`: PKG.MODULE:NAME, its names in the table
    `model_layout`) and transformers' on the same inputs, and compare every layer and every
    head. The checkpoint is read once; both models get that reading."""
    imported()
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")
    dev = pick_device(device)
    src = resolve(source, revision)
    # both models of one version of each file: compared again where one changed meanwhile
    return files.held_still(
        lambda: _verify(src, dev, dtype, from_layout, model, model_layout), "verified"
    )


def _verify(src: Source, dev, dtype: str, from_layout, model, model_layout) -> tuple:
    """verify, once: its report, and its weights files' identities as found before reading."""
    # a directory written in your table (convert --to TABLE) is in the one --layout names too
    ckpt = read_checkpoint(src.path, from_layout, src.weights, offered=(model_layout,))
    implements(imported(), ckpt.config)
    pipeline = sentence.read_pipeline(src.path, positions(ckpt.config))
    if pipeline is not None and not pipeline.refused:
        sentence_transformers()  # needed for its row: said before any work
    nonfinite = storage.nonfinite(ckpt.state_dict)
    reading = official(ckpt)  # handed on to every model below, and to the diagnosis
    arch = reading.table.architecture
    choices = arch.implementation(reading.model_class) == "BertForMultipleChoice"
    batches = inputs(src.path, ckpt.config, choices)
    runs = {id(b): _run_in(b, DTYPES[dtype]) for b in batches}
    # RoBERTa's positions follow the padding: a from-scratch BERT's, left-padded, do not
    after_pad = ckpt.config.positions_after_pad
    random = next(b for b in batches if b.kind == RANDOM)
    left = Batch(RANDOM, left_padded(random.tensors)) if after_pad and model is not None else None
    # float32 for every batch: a batch run in float64 is run in float32 too (_in_float32_too)
    wanted = [(b, {runs[id(b)], truth(runs[id(b)]), torch.float32}) for b in batches]
    computed = _reference(ckpt, reading, wanted + [(left, {torch.float32})] * bool(left), dev)
    ours, name = _ours(ckpt, reading, model, model_layout)
    if pipeline is not None and not pipeline.refused:
        ours.sentence_width = sentence.width(pipeline, ckpt.config.hidden_size)
        ours.hold(pipeline)
    prepared = [ours.prepare(b.tensors) for b in batches]
    kinds = list(dict.fromkeys(b.kind for b in batches))
    longest = max(b.longest for b in batches)
    report = Report(src.name, name, str(dev), dtype, kinds, longest, nonfinite=nonfinite)
    both = _compared(report, ours, computed, prepared, [runs[id(b)] for b in batches], dev)
    kinds64 = (b.kind for b, t in zip(batches, ours.dtypes, strict=True) if t == torch.float64)
    report.in_float64 = list(dict.fromkeys(kinds64))
    rows = zip(both, report.rows, strict=True)
    failing = next((output for output, row in rows if not row.passed), None)
    taken_apart = False  # the diagnosis, where what the model computes differs (not only returns)
    if failing and dtype == "float32":
        ours.notes += _batches_differing(failing, ours, computed, prepared, batches)
        ours.notes += ours.what_head_reads(failing, prepared[0])
        expected_each = _each(computed, ours, prepared, failing)
        taken_apart = not nonfinite and ours.differs_inside(failing, expected_each, FLOAT32_MAX_ABS)
    # runs the model again: after what looks at the runs above
    with no_tf32():
        again = _in_float32_too(ours, computed, prepared, both, report.rows, dev)
    report.float32_full = again
    if again is not None and not again.passed and failing is None:
        ours.notes.append(
            Note(
                "in float32: your model computes the batch of every position otherwise in float32 "
                "than in float64, where it agrees: half precision inside (autocast?) for long "
                "sequences"
            )
        )
    if left is not None:
        ours.notes += ours.left_padded(computed, left, dev, FLOAT32_MAX_ABS, arch.model_type)
    report.notes = [str(note) for note in ours.notes]
    if taken_apart:
        report.diagnosis = ours.diagnose(failing, prepared, ckpt)
    if pipeline is not None:
        _sentence_row(report, pipeline, ckpt, reading, ours, dev)
    return report, ckpt.seen


def _sentence_row(report: Report, pipeline, ckpt: Checkpoint, reading, ours: Runner, dev) -> None:
    """The `sentence embedding` row of a sentence-transformers directory: the model's last
    hidden state through the directory's pipeline (pooling, Dense, Normalize), on texts of
    several lengths and one past the truncation length, against
    `SentenceTransformer(DIR).encode` on the same texts."""
    if pipeline.refused:
        report.notes.append(f"sentence embedding not compared: {pipeline.refused}")
        return
    words = tokenizer(ckpt.path)
    if words is None:
        report.notes.append(
            "sentence embedding not compared: the directory has no tokenizer (tokenizer.json "
            "or vocab.txt), which sentence-transformers needs too"
        )
        return
    texts, prompt = sentence.texts(pipeline, positions(ckpt.config)), pipeline.prompt()
    report.sentence_tokens = sentence.token_counts(words, texts, prompt)
    report.sentence_truncation = pipeline.max_seq_length
    # the texts, then the same in reverse: one shape twice, each row padded otherwise (a model
    # keeping what it computed for a shape gives the first batch's again)
    pad = ckpt.config.pad_token_id
    both = [sentence.tokenized(pipeline, words, t, prompt, pad) for t in (texts, texts[::-1])]
    batches, length = [b for b, _ in both], both[0][1]
    run_in = DTYPES[report.dtype]
    found = sentence_embeddings(ckpt, reading, texts, {torch.float32, run_in}, dev)
    expected = {t: torch.cat([e, e.flip(0)]) for t, e in found.items()}
    got, tokens = _embedded(ours, pipeline, batches, length, run_in, dev, ckpt.config)
    truth = expected[torch.float32]
    if run_in == torch.float32:
        report.rows.append(_row(SENTENCE, got, truth, FLOAT32_MAX_ABS))
    else:
        own = (expected[run_in] - truth).abs().max().item()
        report.rows.append(_row(SENTENCE, got, truth, LOW_PRECISION_FACTOR * own, own))
    if report.diagnosis is None and tokens is not None and not report.passed:
        last = next(r for r in report.rows if r.name == str(layer(ckpt.config.num_hidden_layers)))
        if last.passed and run_in == torch.float32:
            mask = torch.cat([b["attention_mask"] for b in batches])
            report.diagnosis = diagnosed(pipeline, got, tokens, mask, length, last.max_abs)


def _embedded(ours: Runner, pipeline, batches: list, prompt_length: int, dtype, dev, config):
    """The model's sentence embeddings of `batches` (one shape each): the one it returns (a
    user's model without a pooler may), else its last hidden state, computed in `dtype`,
    through the pipeline in float32 (NaN where it computes no such state); and that state
    (B, T, H), where the model returned its own embedding (for the diagnosis)."""
    with no_tf32():
        got = ours.run([ours.prepare(b) for b in batches], dev, [dtype] * len(batches))
    mask = torch.cat([b["attention_mask"] for b in batches])
    states = got.get(layer(config.num_hidden_layers))
    if states is None or states.dim() != 2 or len(states) != int(mask.sum()):
        return got.get(SENTENCE, torch.tensor(math.nan)), None
    tokens = sentence.unflattened(states.float(), mask)
    if SENTENCE in got:
        return got[SENTENCE], tokens
    return sentence.embed(pipeline, tokens, mask, prompt_length), None


def _ours(ckpt: Checkpoint, reading: Reading, model: str | None, model_layout) -> tuple:
    """The model compared, and its name: bertconv's holding the checkpoint, or the user's."""
    if model is not None:
        return yours(ckpt, reading, model, model_layout), model
    bertconv = layout("bertconv", ckpt.config)
    conversion = convert_reading(reading, ckpt.config, bertconv, FITTING)
    arch = reading.table.architecture
    ours = Ours(build(conversion, ckpt.config), heads(conversion.model_class, arch))
    return ours, conversion.model_class


def _compared(report: Report, ours: Runner, computed, prepared: list, dtypes: list, dev) -> list:
    """The model run on every batch, each in its dtype, and a row for every output both models
    have (a user's model may have no pooler; a hidden state it never computes, its anchors
    unused in every batch, is a row that fails): the outputs, in the rows' order."""
    with no_tf32():
        got = ours.run(prepared, dev, dtypes)
        ours.reference_seeded(computed, prepared, dev)
    expected = looked_up(computed, [truth(t) for t in ours.dtypes], prepared)
    low = None if report.dtype == "float32" else looked_up(computed, ours.dtypes, prepared)
    got |= {k: torch.tensor(math.nan) for k in expected if k.hidden and k not in got}
    both = [k for k in expected if k in got]
    for k in both:
        if low is None:
            report.rows.append(_row(k, got[k], expected[k], FLOAT32_MAX_ABS))
        else:
            own = (low[k] - expected[k]).abs().max().item()
            report.rows.append(_row(k, got[k], expected[k], LOW_PRECISION_FACTOR * own, own))
    return both


def _in_float32_too(ours: Runner, computed: dict, prepared: list, outputs, rows, device):
    """The batches run in float64, run again in float32 and set against transformers' float32,
    within FULL_FLOAT32_MAX_ABS: what float64 sidesteps (bf16 autocast, a path taken in float32
    alone) fails here. The hidden states and the pooler whose rows passed; None where none
    ran in float64."""
    at = [b for b, t in zip(prepared, ours.dtypes, strict=True) if t == torch.float64]
    passed = [k for k, row in zip(outputs, rows, strict=True) if row.passed]
    keys = [k for k in passed if k.hidden or k == POOLER]
    if not at or not keys:
        return None
    got = ours.run(at, device, [torch.float32] * len(at))
    expected = looked_up(computed, [torch.float32] * len(at), at)
    diffs = [(got[k] - expected[k]).abs().flatten() for k in keys if k in got]
    diff = torch.cat(diffs) if diffs else torch.tensor([math.nan])
    name = "in float32"  # the batches of every position
    return Comparison(name, diff.max().item(), diff.mean().item(), FULL_FLOAT32_MAX_ABS)


def _run_in(batch: Batch, dtype: torch.dtype) -> torch.dtype:
    """The dtype `batch` is compared in: `dtype`, but float64 for a batch of the full length
    where float32 is compared: float32's own rounding over every position of a real checkpoint
    reaches the tolerance (transformers' float32 against its float64: 8e-6 on all-MiniLM-L6-v2
    at 512 tokens), while the arithmetic it proves is the same in either."""
    return torch.float64 if batch.full and dtype == torch.float32 else dtype


def _each(computed: dict, ours: Runner, prepared: list, output: Output) -> list:
    """transformers' `output` on each batch, against what the model ran in there."""
    dtypes = [truth(t) for t in ours.dtypes]
    return [looked_up(computed, [t], [b])[output] for t, b in zip(dtypes, prepared, strict=True)]


def _batches_differing(output: Output, ours: "Ours", computed: dict, prepared, batches):
    """A note where what the batches `output` fails on have in common says more than the row: a
    shape right the first time and wrong when it comes again padded otherwise, or a length."""
    differs = []
    for tensors, got, t in zip(prepared, ours.per_batch, ours.dtypes, strict=True):
        expected = looked_up(computed, [t], [tensors]).get(output)
        value = got.get(output)
        close = (
            value is not None
            and expected is not None
            and value.shape == expected.shape
            and (value - expected).abs().max() <= FLOAT32_MAX_ABS
        )
        differs.append(not close)
    said = pattern(batches, differs)
    return [Note(f"{output}: {said}")] if said else []


def _reference(ckpt, reading: Reading, wanted: list, device) -> dict[tuple, dict]:
    """transformers' outputs, with torch as shipped: before the user's module is imported (no
    patch of its reaches them), on each batch of `wanted` ([(Batch, its dtypes)]), in every form
    a model may read it (Harness.prepare: its token types or zeros; its mask, or the pad id at
    the padding)."""
    unpatch()  # a model's module imported before, in this process
    pad, vocab, arch = ckpt.config.pad_token_id, ckpt.config.vocab_size, reading.table.architecture
    theirs = Ours(reference_model(ckpt, reading), heads(reading.model_class, arch))
    given = [("input_ids", t, m) for t in ("", "token_type_ids") for m in ("", "attention_mask")]
    forms = [Harness(None, "", Plan({n: n for n in g if n}), pad, vocab) for g in given]
    runs = {}
    for batch, dtypes in wanted:
        for prepared in (form.prepare(batch.tensors) for form in forms):
            runs.setdefault(key(prepared), (prepared, set()))[1].update(dtypes)
    order = sorted({t for _, ts in runs.values() for t in ts}, key=cast_order)
    with no_tf32():
        try:
            return {
                (t, k): theirs.run([b], device, [t])
                for t in order
                for k, (b, ts) in runs.items()
                if t in ts
            }
        except Exception as e:  # transformers' own forward, on what config.json asks of it
            reason = (str(e).splitlines() or [type(e).__name__])[0][:300]
            asked = [f"{k}={v!r}" for k, v in ckpt.config_dict.items() if k in ACTED_ON and v]
            fields = f" (config.json's {', '.join(asked)})" if asked else ""
            raise CheckpointError(
                f"{ckpt.path}: transformers cannot compute it on verify's batches{fields}: {reason}"
            ) from None


class Ours(Runner):
    """bertconv's model (or transformers', for the reference)."""

    def diagnose(self, row: Output, batches, ckpt: Checkpoint) -> Diagnosis | None:
        """bertconv's own model, taken apart like a user's: traced, read through its table."""
        plan = Plan({n: n for n in ("input_ids", "attention_mask", "token_type_ids")})
        harness = Harness(self.model, "bertconv", plan)
        return diagnosis(harness, layout("bertconv", ckpt.config), row, batches, self.model)


def _row(output: Output, got, expected, limit, reference_max_abs=None) -> Comparison:
    if got.dim() and got.shape != expected.shape:  # a sentence embedding of another width
        return Comparison(str(output), math.nan, math.nan, limit, reference_max_abs)
    diff = (got - expected).abs()
    return Comparison(str(output), diff.max().item(), diff.mean().item(), limit, reference_max_abs)
