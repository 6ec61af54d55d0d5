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
    # both models of one version of each file: compared again where one changed meanwhile
    return files.held_still(
        lambda: _verify(src, dev, dtype, from_layout, model, model_layout), "verified"
    )


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
        texts = sentence.texts(pipeline, positions(ckpt.config))
        sentence_embeddings(ckpt, reading, texts, {torch.float32, DTYPES[dtype]}, dev)
    arch = reading.table.architecture
    choices = arch.implementation(reading.model_class) == "BertForMultipleChoice"
    every = inputs(ckpt.config, words, src.path, choices)
    run_in = DTYPES[dtype]
    # the twin of the batch of every position is the float32 check (_in_float32_too)
    checked = [b.full and b.again and run_in == torch.float32 for b in every]
    batches = [b for b, c in zip(every, checked, strict=True) if not c]
    twins = [b for b, c in zip(every, checked, strict=True) if c]
    read = {}  # the weights bertconv's model and transformers' share (both only read them)
    ours, name = _ours(ckpt, reading, model, model_layout, read)
    reference = Reference(ckpt, reading, dev, read=read)
    ours.reference_seeded(reference)
    if pipeline is not None and not pipeline.refused:
        ours.sentence_width = sentence.width(pipeline, ckpt.config.hidden_size)
        ours.hold(pipeline)
    prepared = [ours.prepare(b.tensors) for b in batches]
    again = [ours.prepare(b.tensors) for b in twins]
    # RoBERTa's positions follow the padding: a from-scratch BERT's, left-padded, do not
    random = next(b for b in batches if b.kind == RANDOM)
    after_pad = ckpt.config.positions_after_pad and model is not None
    left = [ours.prepare(left_padded(random.tensors))] if after_pad else []
    reference.compute(
        [(b, t) for b in prepared for t in dict.fromkeys((torch.float32, run_in))]
        + [(b, torch.float32) for b in again + left]
    )
    kinds = list(dict.fromkeys(b.kind for b in every))
    longest = max(b.longest for b in every)
    report = Report(src.name, name, str(dev), dtype, kinds, longest, nonfinite=nonfinite)
    got, in_float32 = _runs(ours, reference, batches, prepared, run_in, dev)
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
        ours.notes += ours.what_head_reads(failing, prepared[0])
        expected_each = [reference.outputs(b, truth(t))[failing] for b, t in
                         zip(prepared, ours.dtypes, strict=True)]  # fmt: skip
        taken_apart = not nonfinite and ours.differs_inside(failing, expected_each, FLOAT32_MAX_ABS)
        order = _shortest_first(prepared, differs)
    # runs the model again: after what looks at the runs above
    with no_tf32():
        found = _in_float32_too(ours, reference, in_float32, again, both, report.rows, dev)
    report.float32_full, why = found
    if why is not None and failing is None:
        ours.notes.append(why)
    if left:
        ours.notes += ours.left_padded(reference, left[0], dev, FLOAT32_MAX_ABS, arch.model_type)
    report.notes = [str(note) for note in ours.notes]
    if taken_apart:
        report.diagnosis = ours.diagnose(failing, order, ckpt)
    if pipeline is not None:
        _sentence_row(report, pipeline, ckpt, reading, ours, dev, words)
    return report, ckpt.seen


def _sentence_row(report: Report, pipeline, ckpt, reading, ours: Runner, dev, words) -> None:
    """The `sentence embedding` row of a sentence-transformers directory: the model's last
    hidden state through the directory's pipeline (pooling, Dense, Normalize), on texts of
    several lengths and one past the truncation length, against
    `SentenceTransformer(DIR).encode` on the same texts."""
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


def _ours(ckpt: Checkpoint, reading: Reading, model: str | None, model_layout, read) -> tuple:
    """The model compared, and its name: bertconv's holding the checkpoint (its tensors, once
    read, in `read`), or the user's."""
    if model is not None:
        return yours(ckpt, reading, model, model_layout), model
    bertconv = layout("bertconv", ckpt.config)
    conversion = convert_reading(reading, ckpt.config, bertconv, FITTING)
    arch = reading.table.architecture
    model = build(conversion, ckpt.config, read=read)
    ours = Bertconv(model, heads(conversion.model_class, arch))
    return ours, conversion.model_class


def _runs(ours: Runner, reference, batches: list[Batch], prepared: list, dtype, dev) -> tuple:
    """The model run on every batch in `dtype`: its outputs, all batches' together, and those of
    each batch it ran again in float64 as they were in float32 ({index: (batch, outputs)}). A
    batch of every position whose outputs differ beyond the tolerance in float32, where every
    other batch agrees, is run again in float64 by both models and compared there: float32's own
    rounding over hundreds of positions nears the tolerance (transformers' float32 against its
    float64: 8e-6 on all-MiniLM-L6-v2 at 512 tokens), while the arithmetic it proves is the
    same in either. Where float32 agrees, it is the proof: float64 could only excuse a
    difference."""
    with no_tf32():
        got = ours.run(prepared, dev, [dtype] * len(prepared))
        wide = _rounding_only(ours, reference, batches, prepared) if dtype == torch.float32 else []
        if not wide:
            return got, {}
        in_float32 = {i: (prepared[i], ours.per_batch[i]) for i in wide}
        reference.compute([(prepared[i], torch.float64) for i in wide])
        dtypes = [torch.float64 if i in wide else dtype for i in range(len(prepared))]
        return ours.run(prepared, dev, dtypes), in_float32


def _rounding_only(ours: Runner, reference, batches: list[Batch], prepared: list) -> list[int]:
    """The batches of every position on which an output differs beyond the tolerance that
    agrees on every other batch: float32's own rounding may be all it is."""
    gaps = []
    for tensors, got in zip(prepared, ours.per_batch, strict=True):
        expected = reference.outputs(tensors, torch.float32)
        gaps.append({k: _gap(got.get(k), v) for k, v in expected.items()})
    wide = []
    for i, batch in enumerate(batches):
        others = [g for j, g in enumerate(gaps) if j != i]
        alone = [
            k
            for k, gap in gaps[i].items()
            if not gap <= FLOAT32_MAX_ABS and all(o.get(k, 0) <= FLOAT32_MAX_ABS for o in others)
        ]
        if batch.full and alone:
            wide.append(i)
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


def _in_float32_too(ours: Runner, reference, in_float32: dict, again: list, outputs, rows, dev):
    """The float32 check of the batch of every position, within FULL_FLOAT32_MAX_ABS of
    transformers' float32: its twin run in float32 (what a model keeps of the batch of that
    shape before it fails there), and where it was compared in float64, its own float32 run
    (`in_float32`: what float64 sidesteps, bf16 autocast or a path taken in float32 alone,
    fails there). The hidden states and the pooler whose rows passed. (None, None) where there
    is no such batch; else the comparison, and where it fails, a note saying which did."""
    passed = [k for k, row in zip(outputs, rows, strict=True) if row.passed]
    keys = [k for k in passed if k.hidden or k == POOLER]
    if not again or not keys:
        return None, None
    ours.run(again, dev, [torch.float32] * len(again))
    runs = {"twin": list(zip(again, ours.per_batch, strict=True)), "wide": in_float32.values()}
    gaps = {
        what: [_gap(got.get(k), reference.outputs(b, torch.float32)[k]) for b, got in pairs
               for k in keys]
        for what, pairs in runs.items()
    }  # fmt: skip
    every = [g for found in gaps.values() for g in found]
    found = Comparison(
        "in float32",
        max(every, key=lambda g: math.inf if g != g else g),  # NaN first: it never passes
        sum(g for g in every if g == g) / len(every),
        FULL_FLOAT32_MAX_ABS,
    )
    if found.passed:
        return found, None
    if any(not g <= FULL_FLOAT32_MAX_ABS for g in gaps["wide"]):
        return found, Note(
            "in float32: your model computes the batch of every position otherwise in float32 "
            "than in float64, where it agrees: half precision inside (autocast?) for long "
            "sequences"
        )
    return found, Note(
        "in float32: your model computes the batch of every position right, and wrong when it "
        "comes again of that shape padded otherwise: it keeps something of an earlier batch of "
        "that shape (a mask cached by its shape?)"
    )


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
