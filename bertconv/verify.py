"""Parity: bertconv's model against transformers' on the same weights and inputs, layer by layer.

Tolerances, stated once:
- float32: every compared value within FLOAT32_MAX_ABS of transformers' (TF32 off on GPU).
- bfloat16, float16: our error against transformers-in-float32 at most LOW_PRECISION_FACTOR times
  transformers' own error in that dtype, row by row.
Only real (non-padded) positions are compared: padding positions carry no meaning.
"""

import math
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch

from . import catalog, storage
from .api import build, official, resolve
from .batches import inputs, left_padded, random_batch
from .checkpoint import Checkpoint, read_checkpoint
from .config import BertConfig
from .convert import FITTING, Reading, Selection, convert_reading
from .errors import CheckpointError, MissingDependencyError, UsageError
from .family import as_bert, left_out
from .mapping import Table, identify, layout, other_labels
from .model import BertModel
from .outputs import POOLER, Output, compared, heads
from .tables import OFFICIAL
from .yours.diagnose import Diagnosis
from .yours.harness import APPLIED, Harness, Plan, shipped, unpatch

FLOAT32_MAX_ABS = 1e-5
LOW_PRECISION_FACTOR = 2.0
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

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
    inputs: list[str]
    rows: list[Comparison] = field(default_factory=list)
    nonfinite: list[str] = field(default_factory=list)  # weights holding NaN or Inf, by name
    notes: list[str] = field(default_factory=list)  # what to know besides the rows
    diagnosis: Diagnosis | None = None  # where and why the first failing row differs

    @property
    def passed(self) -> bool:
        return bool(self.rows) and not self.nonfinite and all(row.passed for row in self.rows)

    def to_dict(self) -> dict:
        rows = [asdict(r) | {"passed": r.passed} for r in self.rows]
        return asdict(self) | {"rows": rows, "passed": self.passed}


def _transformers():
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError(
            "verify needs transformers: pip install 'bertconv[verify]'"
        ) from None
    transformers.logging.disable_progress_bar()  # the report is the output
    return transformers


def _implements(transformers, config: BertConfig) -> None:
    """transformers 5 dropped relative position embeddings (its BertModel computes absolute
    positions only): a relative checkpoint is compared against transformers 4, the last series
    that computes them."""
    major = int(transformers.__version__.split(".")[0])
    if config.relative and major >= 5:
        raise MissingDependencyError(
            f"verify compares against transformers, and transformers {transformers.__version__} "
            f"no longer implements position_embedding_type={config.position_embedding_type!r} "
            "(removed in 5.0). Verify in an environment with transformers 4: "
            "pip install 'transformers>=4.48,<5'"
        )


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here; use --device cpu")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device {device!r}: one of auto, cpu, cuda")
    return torch.device(device)


def reference_model(ckpt: Checkpoint, reading: Reading):
    """transformers' own class for the file, holding the tensors bertconv read from it. A file
    in the official layout is handed over under the names the file gives them, which
    transformers maps itself (legacy gamma/beta, the `bert.` prefix): independently of
    bertconv's tables. A file in another layout is first put into official names."""
    transformers, kind, name = _transformers(), ckpt.config.model_type, reading.model_class
    pooler = "pooler" in reading.groups
    # A pooler that transformers' class has no place for (an older task checkpoint's) stays out.
    groups = reading.groups - ({"pooler"} if not catalog.has_pooler(name, kind) else set())
    if ckpt.layout == OFFICIAL:
        tensors = _only(ckpt, groups)
    else:
        official_table, chosen = layout(OFFICIAL, ckpt.config), Selection("exactly", groups)
        tensors = convert_reading(reading, ckpt.config, official_table, chosen, "").state_dict
    state_dict = storage.all_to_torch(tensors)
    builds_pooler = catalog.implementation(name, kind) == "BertModel" and catalog.has_pooler(
        name, kind
    )
    extra = {"add_pooling_layer": pooler} if builds_pooler else {}
    try:
        config_class = getattr(transformers, catalog.architecture(kind)["config_class"])
        config = config_class.from_dict(ckpt.config_dict)
        model, info = getattr(transformers, name).from_pretrained(
            None,
            config=config,
            state_dict=state_dict,
            # transformers 4 computes relative positions in its eager attention only
            attn_implementation="eager" if ckpt.config.relative else "sdpa",
            dtype=torch.float32,
            output_loading_info=True,
            **extra,
        )
    except Exception as e:  # bertconv read the file; whatever transformers objects to
        reason = (str(e).splitlines() or [type(e).__name__])[0][:300]
        raise CheckpointError(f"{ckpt.path}: transformers cannot read it ({reason})") from None
    unread = {k: v for k, v in info.items() if k != "error_msgs" and v}
    if unread:
        raise CheckpointError(f"{ckpt.path}: transformers could not read all of it: {unread}")
    return model.eval()


def _only(ckpt: Checkpoint, groups: frozenset[str]) -> dict:
    """The file's tensors, under its own names, of the encoder and `groups` (and its buffers).
    Tied copies stay out: transformers ties them itself."""
    table = layout(OFFICIAL, ckpt.config)
    wanted = set(catalog.shapes(ckpt.config, sorted(groups)))  # the encoder's too
    return {
        name: t
        for name, t in ckpt.state_dict.items()
        if (place := table.place(name)) == "ignored"
        or (place in ("row", "alias") and set(table.row_of(name).official) <= wanted)
    }


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
    _transformers()
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")
    dev = pick_device(device)
    src = resolve(source, revision)
    ckpt = read_checkpoint(src.path, from_layout, src.weights)
    _implements(_transformers(), ckpt.config)
    nonfinite = storage.nonfinite(ckpt.state_dict)
    reading = official(ckpt)  # handed on to every model below, and to the diagnosis
    batches = inputs(src.path, ckpt.config, reading.model_class)
    # RoBERTa's positions follow the padding: a from-scratch BERT's, left-padded, do not
    after_pad = catalog.numbers_positions_after_pad(ckpt.config.model_type)
    left = left_padded(batches["random ids"]) if after_pad and model is not None else None
    every = [*batches.values(), *([left] if left else [])]
    computed = _reference(ckpt, reading, every, dev, {torch.float32, DTYPES[dtype]})
    if model is None:
        bertconv = layout("bertconv", ckpt.config)
        conversion = convert_reading(reading, ckpt.config, bertconv, FITTING, str(ckpt.path))
        ours = Ours(
            build(conversion, ckpt.config), heads(conversion.model_class, ckpt.config.model_type)
        )
        name = conversion.model_class
    else:
        # a from-scratch BERT holds a RoBERTa (ELECTRA, DistilBERT) as BERT: family.py
        ours, name = Yours(*as_bert(ckpt, reading), model, model_layout), model
        kind = ckpt.config.model_type
        placeless = left_out(ckpt, reading)
        ours.notes += [f"{g}: {kind}'s head has no place in BERT (not compared)" for g in placeless]
        patches = [f"the model's module replaces {'.'.join(k)}" for k in APPLIED]
        ours.notes[:0] = [f"{p} (transformers' outputs computed without it)" for p in patches]
    batches = {k: ours.prepare(b) for k, b in batches.items()}
    report = Report(src.name, name, str(dev), dtype, list(batches), nonfinite=nonfinite)
    with _no_tf32():
        expected = _looked_up(computed, torch.float32, batches.values())
        low = None if dtype == "float32" else _looked_up(computed, DTYPES[dtype], batches.values())
        got = ours.run(batches.values(), dev, DTYPES[dtype])
        # Every output both models have: a user's model may have no pooler. A hidden state it
        # never computes (its anchors unused in every batch) is a row that fails.
        got |= {k: torch.tensor(math.nan) for k in expected if k.hidden and k not in got}
        both = [k for k in expected if k in got]
        for k in both:
            if low is None:
                report.rows.append(_row(k, got[k], expected[k], FLOAT32_MAX_ABS))
            else:
                own = (low[k] - expected[k]).abs().max().item()
                report.rows.append(_row(k, got[k], expected[k], LOW_PRECISION_FACTOR * own, own))
    if left is not None:
        ours.notes += _left_padded(ours, computed, ours.prepare(left), dev, ckpt.config.model_type)
    report.notes = ours.notes
    rows = zip(both, report.rows, strict=True)
    failing = next((output for output, row in rows if not row.passed), None)
    returned = any(n.startswith(f"{failing} as computed inside") for n in report.notes)
    if failing and dtype == "float32" and not report.nonfinite and not returned:
        report.diagnosis = ours.diagnose(failing, batches.values(), ckpt)
    return report


def _left_padded(ours, computed: dict, batch: dict, device, model_type: str) -> list[str]:
    """A note (never a failure) where the user's model differs on a left-padded batch."""
    with _no_tf32():
        got = ours.run([batch], device, torch.float32)
    expected = _looked_up(computed, torch.float32, [batch])
    worst = max(
        ((float((got[k] - expected[k]).abs().max()), k) for k in expected if k.hidden and k in got),
        default=(0.0, None),
    )
    if not worst[0] > FLOAT32_MAX_ABS:
        return []
    return [
        f"a left-padded batch: your model differs (max abs {worst[0]:.1e} at {worst[1]}). It "
        f"numbers positions from 0 where {model_type} counts them from the first real token; "
        "the verdict comes from right-padded batches, where the two agree"
    ]


def _reference(ckpt, reading: Reading, batches, device, dtypes) -> dict[tuple, dict]:
    """transformers' outputs, with torch as shipped: before the user's module is imported (no
    patch of its reaches them), in each dtype, on each batch in every form a model may read it
    (Harness.prepare: its token types or zeros; its mask, or the pad id at the padding)."""
    unpatch()  # a model's module imported before, in this process
    pad, vocab, kind = ckpt.config.pad_token_id, ckpt.config.vocab_size, ckpt.config.model_type
    theirs = Ours(reference_model(ckpt, reading), heads(reading.model_class, kind))
    given = [("input_ids", t, m) for t in ("", "token_type_ids") for m in ("", "attention_mask")]
    forms = [Harness(None, "", Plan({n: n for n in g if n}), pad, vocab) for g in given]
    unique = {_key(f): f for f in (form.prepare(b) for b in batches for form in forms)}
    with _no_tf32():  # float32 first: the weights as read, before they are cast
        order = sorted(dtypes, key=lambda t: t != torch.float32)
        try:
            return {(t, k): theirs.run([b], device, t) for t in order for k, b in unique.items()}
        except Exception as e:  # transformers' own forward, on what config.json asks of it
            reason = (str(e).splitlines() or [type(e).__name__])[0][:300]
            asked = [f"{k}={v!r}" for k, v in ckpt.config_dict.items() if k in ACTED_ON and v]
            fields = f" (config.json's {', '.join(asked)})" if asked else ""
            raise CheckpointError(
                f"{ckpt.path}: transformers cannot compute it on verify's batches{fields}: {reason}"
            ) from None


def _looked_up(computed: dict, dtype: torch.dtype, batches) -> dict[Output, torch.Tensor]:
    """transformers' outputs on `batches`, as computed before the user's code ran."""
    keys = [(dtype, _key(b)) for b in batches]
    if not all(k in computed for k in keys):
        raise RuntimeError("verify: a batch differs from every form transformers computed")
    return {o: torch.cat([computed[k][o] for k in keys]) for o in computed[keys[0]]}


def _key(batch: dict[str, torch.Tensor]) -> tuple:
    return tuple((n, tuple(t.shape), t.numpy().tobytes()) for n, t in sorted(batch.items()))


class Ours:
    """A model of bertconv's or transformers' (they take the same arguments), and the heads'
    outputs to compare."""

    def __init__(self, model, heads):
        self.model, self.heads, self.notes = model, heads, []

    def prepare(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return batch

    def run(self, batches, device: torch.device, dtype: torch.dtype) -> dict[Output, torch.Tensor]:
        """The compared outputs over all batches, in float32 on the CPU."""
        self.model.to(device=device, dtype=dtype)
        per_batch = [self.outputs({k: v.to(device) for k, v in b.items()}) for b in batches]
        keys = dict.fromkeys(k for p in per_batch for k in p)  # missing from a batch: fails
        every = {k: all(k in p for p in per_batch) for k in keys}
        nan = torch.tensor(math.nan)
        return {k: torch.cat([p[k] for p in per_batch]) if every[k] else nan for k in keys}

    def outputs(self, batch: dict[str, torch.Tensor]) -> dict[Output, torch.Tensor]:
        return compared(self.model, batch, self.heads)

    def diagnose(self, row: Output, batches, ckpt: Checkpoint) -> Diagnosis | None:
        """bertconv's own model, taken apart like a user's: traced, read through its table."""
        plan = Plan({n: n for n in ("input_ids", "attention_mask", "token_type_ids")})
        harness = Harness(self.model, "bertconv", plan)
        return _diagnosis(harness, layout("bertconv", ckpt.config), row, batches, self.model)


class Yours(Ours):
    """The user's own model (yours/harness.py), holding the checkpoint's tensors under the names its
    table gives them (the table whose names are the model's, unless one is given), every
    hidden state and head read from a trace of its forward."""

    def __init__(self, ckpt: Checkpoint, reading: Reading, spec: str, table_name: str | None):
        from .yours.harness import load, load_weights
        from .yours.reading import anchors

        self.ckpt = ckpt  # as the model takes it (family.as_bert)
        self.harness = load(spec, ckpt.config_dict, ckpt.config, random_batch(ckpt.config))
        model = self.harness.model
        shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
        buffers = frozenset(n for n, _ in model.named_buffers())
        found = identify(shapes, ckpt.config, table_name, buffers=buffers, source=spec)
        table, groups = layout(found.layout, ckpt.config), found.groups
        self.table = table
        kept, self.reading = groups & reading.groups, reading
        self.conversion = convert_reading(
            reading, ckpt.config, table, Selection("exactly", kept), str(ckpt.path)
        )
        _misplaced(table, ckpt.config, (reading.groups - kept, groups - kept), shapes, spec)
        other_labels(table, ckpt.config, kept, shapes, spec)
        absent = _head_names(table, ckpt.config, groups - kept)
        absent -= _head_names(table, ckpt.config, kept)
        model.float()  # built in half precision, say: the weights as read, not rounded on load
        load_weights(model, spec, self._tensors(), absent | table.own)
        self.notes = _not_compared(table, ckpt.config, groups - kept, kept)
        self.anchors = anchors(table, ckpt.config, set(self.conversion.groups))
        self.heads = heads(self.conversion.model_class, ckpt.config.model_type)
        self.model = model

    def diagnose(self, row: Output, batches, ckpt: Checkpoint) -> Diagnosis | None:
        """Each step recomputed by bertconv's model, holding the checkpoint's weights as read."""
        ckpt = self.ckpt
        table = layout("bertconv", ckpt.config)
        chosen = Selection("exactly", self.reading.groups)
        bertconv = convert_reading(self.reading, ckpt.config, table, chosen, str(ckpt.path))
        return _diagnosis(self.harness, self.table, row, batches, build(bertconv, ckpt.config))

    def _tensors(self) -> dict[str, torch.Tensor]:
        return storage.all_to_torch(self.conversion.state_dict)

    def prepare(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.harness.prepare(batch)

    def outputs(self, batch: dict[str, torch.Tensor]) -> dict[Output, torch.Tensor]:
        from .yours.reading import outputs_of, returned

        run = self.harness.run(batch)
        named, unused = outputs_of(run, self.anchors, self.heads)
        for label in unused:
            self._never_used(label)
        wrong, notes = returned(run, named, any("checkpoint has none" in n for n in self.notes))
        self.notes += [n for n in notes if n not in self.notes]
        return {k: v.float().cpu() for k, v in (named | wrong).items()}

    def _never_used(self, label: Output) -> None:
        if label.hidden:  # compared with the state the model carries there; the diagnosis says
            return
        names = ", ".join(sorted(self.anchors[label]))
        note = f"{label}: your model's forward never uses {names} (not compared)"
        if note not in self.notes:
            self.notes.append(note)


def _diagnosis(harness, table, row: Output, batches, bert: BertModel) -> Diagnosis | None:
    """Where and why `row` differs, on the batch that shows a step differing (random ids, padded
    and of both token types, first), each step recomputed by `bert` (bertconv's model holding
    the checkpoint's weights); in float32 on the CPU."""
    from .yours.diagnose import diagnose
    from .yours.reading import anchors, read

    harness.model.to("cpu", torch.float32)
    bert.to("cpu", torch.float32)
    found_anchors = anchors(table, bert.config, {"pooler"})
    found = None
    for batch in reversed(list(batches)):
        if batch["input_ids"].dim() != 2:  # multiple choice: not taken apart
            return None
        run = harness.run(batch)
        pooled = read(run, found_anchors).get(POOLER) if row == POOLER else None
        varies = harness.varies(run)  # as it ran: with its patches of torch
        with shipped():  # the model ran with its patches of torch; BERT is recomputed without
            found = diagnose(run.trace, table, bert, row, pooled, varies)
        if found is None or found.step is not None:
            return found
    return found


def _misplaced(table: Table, config: BertConfig, left: tuple, shapes: dict, spec: str) -> None:
    """Refuse to leave a head of the checkpoint's (in `left[0]`) out where the table places one
    of the model's of its shapes as another (`left[1]`: a 2-class classifier as NSP) or its own."""
    encoder = catalog.shapes(config, [])
    of = {g: Counter(s for n, s in catalog.shapes(config, [g]).items() if n not in encoder)
          for g in (*left[0], *left[1])}  # fmt: skip
    own = Counter(shapes[n] for n in table.own if n in shapes)
    for group in sorted(left[0]):
        found = [(g, _head_names(table, config, {g})) for g in left[1] if of[g] == of[group]]
        if found or not of[group] - own:
            how, names = (found or [("its own", table.own)])[0]
            raise CheckpointError(
                f"--model {spec!r}: the checkpoint's {group} head would be left out, but the table "
                f"places {', '.join(sorted(names)[:4])}, of its shapes, as {how}: a head is never "
                f"guessed. Place it as {group} (`bertconv infer --config` reads config.json's "
                f"architectures), or verify on a checkpoint without a {group} head"
            )


def _not_compared(table, config: BertConfig, absent, kept) -> list[str]:
    """A note for each head of the user's model that the checkpoint has none of (groups that
    share their tensors, a classifier read three ways, named together), and its own tensors."""
    by_names: dict[frozenset, list[str]] = {}
    for group in sorted(absent - {"pooler"}):
        names = frozenset(_head_names(table, config, {group}))
        if not names <= _head_names(table, config, kept):
            by_names.setdefault(names, []).append(group)
    own = [f"{', '.join(sorted(table.own)[:8])}: your model's own (never loaded or compared)"]
    return [
        f"{' / '.join(groups)}: the checkpoint has none (not compared; your model keeps its own "
        "weights)"
        for groups in by_names.values()
    ] + own * bool(table.own)


def _head_names(table: Table, config: BertConfig, groups) -> set[str]:
    """The names a table writes for the heads `groups` (the encoder's tensors left out)."""
    encoder = set(catalog.shapes(config, []))
    return set(table.written(set(catalog.shapes(config, sorted(groups))) - encoder, frozenset()))


def _row(output: Output, got, expected, limit, reference_max_abs=None) -> Comparison:
    diff = (got - expected).abs()
    return Comparison(str(output), diff.max().item(), diff.mean().item(), limit, reference_max_abs)


@contextmanager
def _no_tf32():
    """float32 means float32: TF32 matmuls would add ~1e-3 of error on Ampere and later GPUs."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
