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
from .batches import Batch, inputs, pattern, positions, tokenizer
from .checkpoint import Checkpoint, read_checkpoint
from .convert import FITTING, Reading, convert_reading
from .errors import UsageError
from .mapping import layout
from .outputs import (
    FLOAT32_MAX_ABS,
    POOLER,
    SENTENCE,
    Note,
    Output,
    Runner,
    heads,
    layer,
    no_tf32,
    truth,
)
from .reference import (
    Reference,
    implements,
    imported,
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

    def once():
        with storage.reading():  # each file opened once
            return _verify(src, dev, dtype, from_layout, model, model_layout)

    # both models of one version of each file: compared again where one changed meanwhile
    return files.held_still(once, "verified")


def _verify(src: Source, dev, dtype: str, from_layout, model, model_layout) -> tuple:
    """verify, once: its report, and its weights files' identities as found before reading."""
    unpatch()  # torch as shipped: a model's module imported by an earlier command of the process
    # a directory written in your table (convert --to TABLE) is in the one --layout names too
    ckpt = read_checkpoint(src.path, from_layout, src.weights, offered=(model_layout,))
    implements(imported(), ckpt.config)
    pipeline = sentence.read_pipeline(src.path, positions(ckpt.config))
    if pipeline is not None and not pipeline.refused:
        sentence_transformers()  # needed for its row: said before any work
    nonfinite = storage.nonfinite(ckpt.state_dict)
    reading = official(ckpt)  # handed on to every model below, and to the diagnosis
    words = tokenizer(src.path)  # verify's text batch and the sentence row read it
    if pipeline is not None and not pipeline.refused and words is not None:
        # sentence-transformers' embeddings for its row first: its model let go before
        # verify's models are built (sentence_embeddings keeps them for the row)
        groups = _sentence_groups(pipeline, ckpt.config)
        sentence_embeddings(ckpt, reading, groups, {torch.float32, DTYPES[dtype]}, dev)
    arch = reading.table.architecture
    choices = "choice" in arch.groups_of(reading.model_class)  # (B, choices, T) batches
    batches = inputs(ckpt.config, words, src.path, choices)
    run_in = DTYPES[dtype]
    dtypes = list(dict.fromkeys((torch.float32, run_in)))
    read = {}  # the weights transformers' model read, lent to the compared one (storage.py)
    reference = Reference(ckpt, reading, dev, read=read)
    # transformers' runs first, on the batches as given (as bertconv's model reads them, and
    # most of yours): its model let go before the compared one is built
    reference.compute([(b.tensors, t) for b in batches for t in dtypes])
    ours, name = _ours(ckpt, reading, model, model_layout, read)
    if model is not None:
        read.clear()  # your model holds copies: transformers' would read them again if need be
    ours.reference_seeded(reference)
    if pipeline is not None and not pipeline.refused:
        ours.sentence_width = sentence.width(pipeline, ckpt.config.hidden_size)
        ours.hold(pipeline)
    batches = [b for b in batches if not b.left or ours.reads_left_padding()]
    prepared = [ours.prepare(b.tensors) for b in batches]
    # what the model reads otherwise (its token types zeros, the pad id for a mask it takes
    # none of), and the heads it has that the checkpoint lacks (seeded)
    reference.compute([(b, t) for b in prepared for t in dtypes])
    kinds = list(dict.fromkeys(b.kind for b in batches))
    longest = max(b.longest for b in batches)
    report = Report(src.name, name, str(dev), dtype, kinds, longest, nonfinite=nonfinite)
    got, in_float32 = _runs(ours, reference, batches, prepared, run_in, dev)
    # a sentence vector the model returns (no row of its own but the sentence row's)
    returned = [(b, p, got[SENTENCE]) for b, p, got in
                zip(batches, prepared, ours.per_batch, strict=True) if SENTENCE in got]  # fmt: skip
    both = _compared(report, got, reference, prepared, ours.dtypes)
    kinds64 = (b.kind for b, t in zip(batches, ours.dtypes, strict=True) if t == torch.float64)
    report.in_float64 = list(dict.fromkeys(kinds64))
    rows = zip(both, report.rows, strict=True)
    failing = next((output for output, row in rows if not row.passed), None)
    taken_apart = False  # the diagnosis, where what the model computes differs (not only returns)
    order = prepared  # the batches the diagnosis takes apart, the first that shows it first
    if failing and dtype == "float32":
        differs = _differing(failing, ours, reference, prepared)
        ours.notes += _said(failing, batches, differs)
        confirmed = _on_the_left(ours, batches, prepared, differs, arch.model_type)
        ours.notes += ours.what_head_reads(failing, prepared[0])
        expected_each = [reference.outputs(b, truth(t))[failing] for b, t in
                         zip(prepared, ours.dtypes, strict=True)]  # fmt: skip
        inside = ours.differs_inside(failing, expected_each, FLOAT32_MAX_ABS)
        taken_apart = not nonfinite and not confirmed and inside
        order = _shortest_first(prepared, differs)
    report.float32_full = _in_float32_too(reference, in_float32, both, report.rows)
    if report.float32_full is not None and not report.float32_full.passed and failing is None:
        ours.notes.append(
            Note(
                "in float32: your model computes the batch of every position otherwise in "
                "float32 than in float64, where it agrees: half precision inside (autocast?) for "
                "long sequences"
            )
        )
    report.notes = [str(note) for note in ours.notes]
    if taken_apart:
        report.diagnosis = ours.diagnose(failing, order, ckpt)
    if pipeline is not None:
        _sentence_row(report, pipeline, ckpt, reading, ours, dev, words, returned, reference)
    return report, ckpt.seen


def _sentence_row(report: Report, pipeline, ckpt, reading, ours: Runner, dev, words, returned,
                  reference) -> None:  # fmt: skip
    """The `sentence embedding` row of a sentence-transformers directory: the model's sentence
    vector (the one it returns, else its last hidden state through the directory's pipeline:
    pooling, Dense, Normalize), against `SentenceTransformer(DIR).encode` on the same texts in
    the same batches: short texts together, then the same in reverse (one shape twice, each row
    padded otherwise: a model keeping what it computed for a shape gives the first batch's
    again), a text past the truncation length alone, and more than 32 together; and the vector
    it returns on verify's own batches (`returned`: [(batch, vector)]), against the pipeline on
    transformers' last hidden state there."""
    if pipeline.refused:
        report.notes.append(f"sentence embedding not compared: {pipeline.refused}")
        return
    if words is None:
        report.notes.append(
            "sentence embedding not compared: the directory has no tokenizer (tokenizer.json "
            "or vocab.txt), which sentence-transformers needs too"
        )
        return
    texts, prompt = sentence.texts(pipeline, positions(ckpt.config)), pipeline.prompt()
    report.sentence_tokens = sentence.token_counts(words, texts, prompt)
    report.sentence_truncation = pipeline.max_seq_length
    groups = _sentence_groups(pipeline, ckpt.config)
    short, *_ = groups
    pad = ckpt.config.pad_token_id
    given = [sentence.tokenized(pipeline, words, t, prompt, pad) for t in (short[::-1], *groups)]
    batches, length = [b for b, _ in given], given[0][1]
    run_in = DTYPES[report.dtype]
    found = sentence_embeddings(ckpt, reading, groups, {torch.float32, run_in}, dev)
    expected = {t: torch.cat([e[0].flip(0), *e]) for t, e in found.items()}
    got, tokens = _embedded(ours, pipeline, batches, length, run_in, dev, ckpt.config)
    truth = expected[torch.float32]
    if any(b.left for b, _, _ in returned) and pipeline.padding_side != "left":
        # sentence-transformers pads as the directory's tokenizer does: never on the left here
        returned = [r for r in returned if not r[0].left]
        report.notes.append(
            "sentence embedding: not compared on the batch padded on the left, as the "
            "directory's tokenizer pads on the right (its CLS is then the first place)"
        )
    if run_in == torch.float32:  # with the vector it returns on verify's batches
        every = _with_returned(got, truth, returned, pipeline, reference, ckpt.config)
        report.rows.append(_row(SENTENCE, *every, FLOAT32_MAX_ABS))
        if not report.rows[-1].passed and report.diagnosis is None:
            report.diagnosis = _differs_on_batches(got, truth, every, returned)
    else:
        own = (expected[run_in] - truth).abs().max().item()
        report.rows.append(_row(SENTENCE, got, truth, LOW_PRECISION_FACTOR * own, own))
    if report.diagnosis is None and tokens is not None and not report.passed:
        last = next(r for r in report.rows if r.name == str(layer(ckpt.config.num_hidden_layers)))
        if last.passed and run_in == torch.float32:
            states, mask = tokens
            report.diagnosis = diagnosed(pipeline, got, states, mask, length, last.max_abs)


def _sentence_groups(pipeline, config) -> tuple[list[str], list[str], list[str]]:
    """The texts the sentence row embeds, in the batches it embeds them: the short ones
    together (a batch of none past the truncation length), the one past it alone (one text a
    call), and more than encode's 32 a call (a port slicing its batch shows there)."""
    texts = sentence.texts(pipeline, positions(config))
    return texts[:-1], texts[-1:], sentence.many(texts[:-1])


def _with_returned(got, truth, returned: list, pipeline, reference, config) -> tuple:
    """`got` and `truth` with the sentence vectors a model returned on verify's own batches
    beside them, each against the directory's pipeline on transformers' last hidden state
    there (NaN where a vector is of another width)."""
    last = layer(config.num_hidden_layers)
    for _, batch, vector in returned:
        mask = batch["attention_mask"]
        states = sentence.unflattened(reference.outputs(batch, torch.float32)[last], mask)
        expected = sentence.embed(pipeline, states, mask)
        same = vector.shape == expected.shape and got.shape[1:] == expected.shape[1:]
        got = torch.cat([got, vector]) if same else torch.tensor(math.nan)
        truth = torch.cat([truth, expected]) if same else truth
    return got, truth


def _differs_on_batches(got, truth, every: tuple, returned: list) -> Diagnosis | None:
    """Where the model's sentence embedding agrees on the directory's texts (`got`, `truth`)
    and differs on verify's own batches (`every`: both with the vectors `returned` there):
    which (None where the texts differ: the steps of the pipeline say why)."""
    if got.shape != truth.shape or float((got - truth).abs().max()) > FLOAT32_MAX_ABS:
        return None
    if not every[0].dim():  # a vector of another width: the row says so
        return None
    start, differing = len(got), []
    for batch, _, vector in returned:
        rows = slice(start, start + len(vector))
        start += len(vector)
        off = float((every[0][rows] - every[1][rows]).abs().max())
        differing += [(batch, off)] if not off <= FLOAT32_MAX_ABS else []
    if not differing:
        return None
    kinds = ", ".join(dict.fromkeys(b.kind for b, _ in differing))
    cause = (
        f"your sentence embedding agrees on the directory's texts, and differs on {kinds} "
        f"(max abs {max(off for _, off in differing):.1e}): no step after the encoder is "
        "recomputed there"
    )
    return Diagnosis(str(SENTENCE), None, math.nan, [], cause=cause)


def _embedded(ours: Runner, pipeline, batches: list, prompt_length: int, dtype, dev, config):
    """The model's sentence embeddings of `batches`, one after the other: the one it returns (a
    user's model without a pooler may), else its last hidden state, computed in `dtype`,
    through the pipeline in float32 (NaN where it computes no such state); and, where the
    model returned its own embedding, that state (B, T, H) with its mask (B, T), every batch
    padded to the longest on the side the directory pads (for the diagnosis)."""
    with no_tf32():
        ours.run([ours.prepare(b) for b in batches], dev, [dtype] * len(batches))
    vectors, states = [], []
    for batch, got in zip(batches, ours.per_batch, strict=True):
        mask, found = batch["attention_mask"], got.get(layer(config.num_hidden_layers))
        if found is None or found.dim() != 2 or len(found) != int(mask.sum()):
            vectors.append(got.get(SENTENCE, torch.full((len(mask), 1), math.nan)))
            continue
        tokens = sentence.unflattened(found.float(), mask)
        if SENTENCE in got:
            vectors.append(got[SENTENCE])
            states.append((tokens, mask))
        else:
            vectors.append(sentence.embed(pipeline, tokens, mask, prompt_length))
    if len({v.shape[1:] for v in vectors}) > 1:  # another width in another batch
        return torch.tensor(math.nan), None
    together = sentence.padded_together(states, pipeline.padding_side)
    return torch.cat(vectors), together if len(states) == len(batches) else None


def _ours(ckpt: Checkpoint, reading: Reading, model: str | None, model_layout, read) -> tuple:
    """The model compared, and its name: bertconv's holding the checkpoint, or the user's
    loaded with it (`read`: the tensors transformers' model read, shared, not read again)."""
    if model is not None:
        return yours(ckpt, reading, model, model_layout, read), model
    bertconv = layout("bertconv", ckpt.config)
    conversion = convert_reading(reading, ckpt.config, bertconv, FITTING)
    arch = reading.table.architecture
    model = build(conversion, ckpt.config, read=read)
    ours = Bertconv(model, heads(conversion.model_class, arch))
    return ours, conversion.model_class


def _runs(ours: Runner, reference, batches: list[Batch], prepared: list, dtype, dev) -> tuple:
    """The model run on every batch in `dtype`: its outputs, all batches' together, and those in
    float32 of the batch of every position and of each batch run again in float64 ({index:
    (batch, outputs)}: the float32 check). A batch whose outputs differ beyond the tolerance in
    float32, where every other batch agrees, is run again in float64 by both models and
    compared there: float32's own rounding over hundreds of positions nears the tolerance
    (transformers' float32 against its float64: 8e-6 on all-MiniLM-L6-v2 at 512 tokens), while
    the arithmetic it proves is the same in either. Where float32 agrees, it is the proof:
    float64 could only excuse a difference."""
    with no_tf32():
        got = ours.run(prepared, dev, [dtype] * len(prepared))
        if dtype != torch.float32:
            return got, {}
        wide = _rounding_only(ours, reference, batches, prepared)
        checked = [i for i, b in enumerate(batches) if b.full or i in wide]
        in_float32 = {i: (prepared[i], ours.per_batch[i]) for i in checked}
        if not wide:
            return got, in_float32
        reference.compute([(prepared[i], torch.float64) for i in wide])
        return ours.rerun(wide, prepared, dev, torch.float64), in_float32


def _rounding_only(ours: Runner, reference, batches: list[Batch], prepared: list) -> list[int]:
    """The batches on which an output differs beyond the tolerance by no more than float32's own
    rounding could (FULL_FLOAT32_MAX_ABS), where it does not differ by more on any batch: the
    batch of every position, mostly, or one padded on the left, where a model adds in another
    order (on all-MiniLM-L6-v2's layer 5, 1.1e-5 in float32, 1e-15 in float64)."""
    gaps = []
    for tensors, got in zip(prepared, ours.per_batch, strict=True):
        expected = reference.outputs(tensors, torch.float32)
        gaps.append({k: _gap(got.get(k), v) for k, v in expected.items()})
    near = {
        k
        for k in set().union(*gaps)
        if all(g.get(k, 0.0) <= FULL_FLOAT32_MAX_ABS for g in gaps)  # NaN: never near
        and any(not g.get(k, 0.0) <= FLOAT32_MAX_ABS for g in gaps)
    }
    wide = [i for i, g in enumerate(gaps) if any(not g.get(k) <= FLOAT32_MAX_ABS for k in near)]
    return wide


def _gap(got, expected) -> float:
    """The largest difference of two outputs; NaN where one is missing or of another shape."""
    if got is None or got.shape != expected.shape:
        return math.nan
    return float((got - expected).abs().max()) if got.numel() else 0.0


def _compared(report: Report, got: dict, reference, prepared: list, dtypes: list) -> list:
    """A row for every output both models have (a user's model may have no pooler; a hidden
    state it never computes, its anchors unused in every batch, is a row that fails), `got`
    set against transformers' on the batches as each ran (`dtypes`): the outputs, in the
    rows' order."""
    expected = reference.looked_up(prepared, [truth(t) for t in dtypes])
    low = None if report.dtype == "float32" else reference.looked_up(prepared, dtypes)
    got |= {k: torch.tensor(math.nan) for k in expected if k.hidden and k not in got}
    both = [k for k in expected if k in got]
    for k in both:
        if low is None:
            report.rows.append(_row(k, got[k], expected[k], FLOAT32_MAX_ABS))
        else:
            own = (low[k] - expected[k]).abs().max().item()
            report.rows.append(_row(k, got[k], expected[k], LOW_PRECISION_FACTOR * own, own))
    return both


def _in_float32_too(reference, in_float32: dict, outputs, rows) -> Comparison | None:
    """The float32 check of the batch of every position: its float32 run against transformers'
    float32 within FULL_FLOAT32_MAX_ABS, on every hidden state and the pooler whose rows passed.
    Where that batch was compared in float64, what float64 sidesteps (bf16 autocast, a path
    taken in float32 alone) fails here. None where there is no such batch, or no such row."""
    passed = [k for k, row in zip(outputs, rows, strict=True) if row.passed]
    keys = [k for k in passed if k.hidden or k == POOLER]
    if not in_float32 or not keys:
        return None
    gaps = [
        _gap(got.get(k), reference.outputs(batch, torch.float32)[k])
        for batch, got in in_float32.values()
        for k in keys
    ]
    worst = max(gaps, key=lambda g: math.inf if g != g else g)  # NaN first: it never passes
    mean = sum(g for g in gaps if g == g) / len(gaps)
    return Comparison("in float32", worst, mean, FULL_FLOAT32_MAX_ABS)


def _differing(output: Output, ours: Runner, reference, prepared: list) -> list[bool]:
    """Whether `output` differs on each batch, as the model ran it."""
    differs = []
    for tensors, got, t in zip(prepared, ours.per_batch, ours.dtypes, strict=True):
        expected = reference.outputs(tensors, truth(t)).get(output)
        value = got.get(output)
        close = (
            value is not None
            and expected is not None
            and value.shape == expected.shape
            and (value - expected).abs().max() <= FLOAT32_MAX_ABS
        )
        differs.append(not close)
    return differs


def _said(output: Output, batches: list[Batch], differs: list[bool]) -> list[Note]:
    """A note where what the batches `output` fails on have in common says more than the row: a
    shape right the first time and wrong when it comes again padded otherwise, or a length."""
    said = pattern(batches, differs)
    return [Note(f"{output}: {said}")] if said else []


def _on_the_left(ours: Runner, batches: list[Batch], prepared: list, differs, kind) -> bool:
    """Where an output differs on the batch padded on the left alone, why, where recomputed (a
    note): has it been said?"""
    left = [i for i, b in enumerate(batches) if b.left]
    if not left or [i for i, d in enumerate(differs) if d] != left:
        return False
    why = ours.on_the_left(prepared[left[0]], ours.per_batch[left[0]], kind)
    ours.notes += why
    return bool(why)


def _shortest_first(prepared: list, differs: list[bool]) -> list:
    """The batches in the order the diagnosis takes them: those the output differs on, the
    shortest first (the cheapest to take apart), then the others."""
    size = [b["input_ids"].numel() for b in prepared]
    order = sorted(range(len(prepared)), key=lambda i: (not differs[i], size[i]))
    return [prepared[i] for i in order]


class Bertconv(Runner):
    """bertconv's own model, as verify runs it."""

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
