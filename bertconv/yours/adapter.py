"""Your own BERT, as verify runs it: the model built and loaded with the checkpoint's tensors
under its table's names (heads the checkpoint lacks given seeded weights, the same as
transformers' head gets), run on verify's batches, and every output read from a trace of its
forward (reading.py); where a row fails, the diagnosis (diagnose.py) takes it apart.
"""

import math
from collections import Counter
from dataclasses import replace

import torch

from .. import storage
from ..api import build
from ..batches import RANDOM_LENGTH, SEED, positions, random_batch
from ..checkpoint import Checkpoint
from ..config import BertConfig
from ..convert import Reading, Selection, convert_reading
from ..errors import BertconvError, CheckpointError, UsageError, UserCodeError, listed, said
from ..family import (
    beyond_bert,
    factory_dict,
    held,
    left_out,
    left_out_types,
    own,
    same_family,
    ways,
)
from ..mapping import Layout, class_for, holding_copies, identify, layout, other_labels
from ..model import BertModel
from ..outputs import (
    EMBEDDINGS,
    FLOAT32_MAX_ABS,
    POOLER,
    Note,
    Output,
    Runner,
    at_token_starts,
    cast,
    exact,
    heads,
    layer,
    no_tf32,
)
from ..reference import Reference
from ..sentence import dense_placed
from ..tables import BERT_HOLDING, holding_of, is_table_file
from .diagnose import Diagnosis, diagnose
from .fence import APPLIED, shipped
from .harness import load, load_weights
from .reading import anchors, head_input, misread_pooler, outputs_of, read, returned
from .variants import explain_run


def yours(ckpt: Checkpoint, reading: Reading, spec: str, table_spec: str | None, read=None):
    """The user's model (`spec`) as verify runs it on the checkpoint, holding it as its table's
    [holding] says (family.py: a RoBERTa as RoBERTa counts positions, or as a BERT does); with
    no table, built each way its type allows and held the way that computes the checkpoint's
    embeddings. The checkpoint's heads with no place in the model, and what the model's module
    replaced in torch, said. `read`: tensors already read (storage.all_to_torch), copied from,
    not read again."""
    found = ways(ckpt.config)
    if table_spec is not None:
        holding = holding_of(table_spec)
        if not is_table_file(table_spec) and beyond_bert(ckpt.config):
            # a shipped layout of a type no BERT holds (MPNet, the modern encoders): its own
            holding = replace(own(ckpt.config), names=ckpt.config.model_type)
        if holding.names is not None:  # the rows give the type's own names
            same_family(ckpt, holding, table_spec)
        found = [holding]
    ours, holding = _each_way(ckpt, reading, spec, table_spec, found, read)
    ours.types_left_out = left_out_types(ckpt, reading, holding)
    kind = reading.table.model_type
    if ours.ckpt.architecture.bert is None:  # held under BERT's names: its heads may not fit
        no_place = "'s head has no place in BERT (not compared)"
        ours.notes += [Note(f"{g}: {kind}{no_place}") for g in left_out(ckpt, reading)]
    else:  # under the type's own names: the checkpoint's heads the model has none of
        none = sorted(reading.groups - ours.conversion.groups - {"pooler"})
        ours.notes += [Note(f"{g}: the {kind} checkpoint's head; your model has none (not "
                            "compared)") for g in none]  # fmt: skip
    patches = [f"the model's module replaces {'.'.join(k)}" for k in APPLIED]
    ours.notes[:0] = [Note(f"{p} (transformers' outputs computed without it)") for p in patches]
    return ours


def _each_way(ckpt: Checkpoint, reading: Reading, spec: str, table, found: list, read) -> tuple:
    """The model built each way of `found` (family.ways: under BERT's names, held as the type
    holds its weights, then as a BERT does; under the type's own names; or the one its table
    says), the first whose embeddings compute the checkpoint's on a right-padded batch; else
    the closest (its rows then fail, and the diagnosis says why): (Yours, its Holding)."""
    batch, expected = random_batch(ckpt.config), None
    built, errors = [], []
    for holding in found:
        try:
            as_held = _own_names(ckpt, reading) if holding.names else held(ckpt, reading, holding)
            ours = Yours(*as_held, spec, table, read)  # the one place the model is built
        except BertconvError as e:
            if len(found) > 1:
                errors.append(e)
                continue
            raise _no_bert(ckpt, reading, e) if holding.names and table is None else e from None
        if len(found) == 1:
            return ours, holding
        expected = _embeddings(ckpt, reading, batch) if expected is None else expected
        gap = _embeddings_gap(ours, batch, expected)
        if gap <= FLOAT32_MAX_ABS:
            return ours, holding
        built.append((gap, ours, holding))
    if not built:
        raise errors[-1]  # as a BERT holds it: what verify said before the family's ways
    _, ours, holding = min(built, key=lambda b: b[0])  # the first of equals
    return ours, holding


def _no_bert(ckpt: Checkpoint, reading: Reading, error: BertconvError) -> BertconvError:
    """A model no layout of a type that no BERT holds (MPNet) names: why a BERT's names cannot
    hold it either, beside why its own do not."""
    if not isinstance(error, UsageError):
        return error
    try:
        held(ckpt, reading, BERT_HOLDING)
    except CheckpointError as refusal:
        return CheckpointError(f"{error}; under BERT's names, {refusal}")
    return error


def _own_names(ckpt: Checkpoint, reading: Reading) -> tuple[Checkpoint, Reading]:
    """`ckpt` as a model under its type's own names holds it: its tensors as they are, the
    factory given config.json's fields and BERT's names beside them."""
    mine = replace(own(ckpt.config), names=ckpt.config.model_type)
    return replace(ckpt, config_dict=factory_dict(ckpt.config_dict, ckpt.config, mine)), reading


def _embeddings(ckpt: Checkpoint, reading: Reading, batch: dict) -> torch.Tensor:
    """The checkpoint's embeddings at the real tokens of `batch`, by bertconv's model of its
    own type (verify proves it computes transformers')."""
    chosen = Selection("exactly", frozenset())
    bertconv = convert_reading(reading, ckpt.config, layout("bertconv", ckpt.config), chosen)
    with no_tf32():
        out, _ = Runner(build(bertconv, ckpt.config), []).run_one(batch, torch.device("cpu"),
                                                                  torch.float32)  # fmt: skip
    return out[EMBEDDINGS]


def _embeddings_gap(ours: "Yours", batch: dict, expected: torch.Tensor) -> float:
    """How far the model's embeddings are from `expected` (inf where it raises, or computes
    another shape)."""
    said = list(ours.notes)  # what this run says, the real one says again
    try:
        with no_tf32():
            got = ours.run([ours.prepare(batch)], torch.device("cpu"), [torch.float32])
    except BertconvError:
        return math.inf
    finally:
        ours.notes = said
    if EMBEDDINGS not in got or got[EMBEDDINGS].shape != expected.shape:
        return math.inf
    return float((got[EMBEDDINGS] - expected).abs().max())


class Yours(Runner):
    """The user's own model (yours/harness.py), holding the checkpoint's tensors under the names its
    table gives them (the table whose names are the model's, unless one is given), every
    hidden state and head read from a trace of its forward."""

    def __init__(self, ckpt: Checkpoint, reading: Reading, spec: str, table_name, read=None):
        self.ckpt = ckpt  # as the model takes it (family.held)
        self.types_left_out = 0.0  # the checkpoint's token types, where the model has none
        self.harness = load(spec, ckpt.config_dict, ckpt.config, random_batch(ckpt.config))
        model = self.harness.model
        shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
        buffers = frozenset(n for n, _ in model.named_buffers())
        found = identify(shapes, ckpt.config, table_name, buffers=buffers, source=spec)
        table = holding_copies(layout(found.layout, ckpt.config), shapes)
        groups = found.groups
        # A checkpoint without a pooler (ELECTRA's, DistilBERT's, a masked LM's): the model's
        # encoder is compared, its pooler said to be absent, not the model refused.
        poolerless = "pooler" in table.requires and "pooler" not in reading.groups
        table = replace(table, requires=table.requires - {"pooler"}) if poolerless else table
        self.table = table
        kept, self.reading = groups & reading.groups, reading
        _misplaced(table, ckpt.config, (reading.groups - kept, groups - kept), shapes, spec)
        other_labels(table, ckpt.config, kept, shapes, spec)
        lacking = groups - kept - {"pooler"}  # heads of the model the checkpoint has none of
        self.seeded_reading, self.seeded, self.conversion = _seeded(
            reading, ckpt, table, kept, lacking, shapes
        )
        compared_groups = kept | self.seeded
        absent = _head_names(table, ckpt.config, groups - compared_groups)
        absent -= _head_names(table, ckpt.config, compared_groups)
        tensors = storage.all_to_torch(self.conversion.state_dict, read=read)
        load_weights(model, spec, tensors, absent | table.own | dict(table.sentence).keys())
        self.notes = _not_compared(table, ckpt.config, groups - compared_groups, compared_groups)
        if poolerless:
            kept_own = "not compared; your model keeps its own weights"
            self.notes.insert(0, Note(f"pooler: the checkpoint has none ({kept_own})"))
        self.notes += [
            Note(
                f"{g}: the checkpoint has none: compared with seeded weights, the same given to "
                "your model's head and to transformers' (not the checkpoint's)"
            )
            for g in sorted(self.seeded)
        ]
        self.lenient = bool(groups - compared_groups - {"pooler"})
        self.anchors = anchors(table, ckpt.config, set(self.conversion.groups))
        self.heads = heads(self.conversion.model_class, self.conversion.table.architecture)
        self.model = model

    def hold(self, pipeline) -> None:
        """The sentence-transformers modules' tensors the table places in the model ([sentence]:
        Dense's weights), from the directory's module folders; where the directory has no such
        module, the model's own are kept, said."""
        rows = dict(self.table.sentence)
        if not rows:
            return
        dense = pipeline.dense
        if dense is None:
            said = "the directory has no Dense layer: your model's own weights kept"
            self.notes.append(Note(f"{listed(sorted(rows))}: {said}"))
            return
        held = self.model.state_dict(keep_vars=True)
        given = storage.all_to_torch(dense_placed(dense, rows))
        for name, which in rows.items():
            tensor = given[name]
            if name not in held or held[name].shape != tensor.shape:
                found = tuple(held[name].shape) if name in held else "no such tensor"
                raise CheckpointError(
                    f"{dense.folder}: {which.partition('.')[2]} {tuple(tensor.shape)} does not "
                    f"fit your model's {name} ({found}), where the table's [sentence] places it"
                )
            held[name].data = tensor.to(held[name].dtype).contiguous()

    def reference_seeded(self, reference) -> None:
        """transformers' outputs of the heads given seeded weights (the checkpoint has none of
        them), beside `reference`'s: its class for the groups the model has, holding the
        checkpoint's tensors and the seeded ones (which heads the model has is known only once
        it is built)."""
        if not self.seeded:
            return
        rows = frozenset(h.output for h in self.heads if h.output.kind in self.seeded)
        seeded = Reference(self.ckpt, self.seeded_reading, reference.device, from_file=False)
        reference.seeded = (seeded, rows)

    def what_head_reads(self, row: Output, batch: dict) -> list[Note]:
        """Where a head's row fails: what the head reads, by the trace, where that is not what
        BERT's reads (the last layer's output per token; the pooler's per sequence)."""
        head = next((h for h in self.heads if h.output == row), None)
        if head is None:
            return []
        names = _head_names(self.table, self.ckpt.config, {row.kind})
        cast(self.model, "cpu", torch.float32)
        read = head_input(self.harness.run(batch), self.anchors, names)
        bert = layer(self.ckpt.config.num_hidden_layers) if head.per_token else POOLER
        if read == bert or (read is not None and read.kind in self.conversion.groups):
            return []  # BERT's, or a part of the head's own class (DistilBERT's pre_classifier)
        what = f"the {read} output" if read else "no output BERT computes"
        said = f"{row}: your model's {row.kind} head reads {what}; BERT's, the {bert} output"
        return [Note(said)]

    def diagnose(self, row: Output, batches, ckpt: Checkpoint) -> Diagnosis | None:
        """Each step recomputed by bertconv's model, holding the checkpoint's weights as read.
        A model with no token type table, on a checkpoint whose rows are not zeros, is told so
        where every step agrees with bertconv's model holding it so (none added): those rows
        are then what it lacks; a step that differs is named first."""
        found = diagnosis(self.harness, self.table, row, batches, self._bert())
        lacking = self.types_left_out > 0 and row.kind in ("embeddings", "layer", "pooler")
        if not lacking or (found is not None and found.step is not None):
            return found
        return Diagnosis(str(row), None, math.nan, cause=(
            "your model has no token type embeddings, and the checkpoint's are not zero "
            f"(max abs {self.types_left_out:.1e}): left out, every token's embedding lacks "
            "them. Add the token type table (exact where a checkpoint's rows are zeros, "
            "as converted RoBERTa checkpoints' are)"))  # fmt: skip

    def _bert(self):
        """bertconv's BERT holding the model's weights as read (its positions as held)."""
        config = self.ckpt.config
        chosen = Selection("exactly", self.reading.groups)
        held = convert_reading(self.reading, config, layout("bertconv", config), chosen)
        return build(held, config)

    def prepare(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.harness.prepare(batch)

    def outputs(self, batch: dict[str, torch.Tensor]) -> dict[Output, torch.Tensor]:
        found = self.anchors  # a pre-LN layer's state: the sum after its anchor's call
        sums = set().union(*(found[o] for o in found.sums if o in found), *found.fallback.values())
        run = self.harness.run(batch, keep=set().union(*found.values(), sums), sums=sums)
        named, unused = outputs_of(run, self.anchors, self.heads)
        if note := misread_pooler(run, self.anchors, named):
            named[POOLER] = torch.full((len(batch["input_ids"]), named[POOLER].shape[-1]), math.nan)
            self._say(note)
            self.misread.add(POOLER)  # its shape says why: nothing for the diagnosis
        for label in unused:
            self._never_used(label)
        for label in [k for k in self.anchors if not k.hidden and k not in unused]:
            self._partly_used(run, label)
        wrong, notes = returned(run, named, self.lenient, self.sentence_width)
        for note in notes:
            self._say(note)
        self.inside.append({k: exact(v) for k, v in named.items() if k in wrong})
        return {k: exact(v) for k, v in (named | wrong).items()}

    def run(self, batches, device: torch.device, dtypes: list) -> dict[Output, torch.Tensor]:
        self.inside = []  # what the forward computes where it returns something else
        self.misread: set[Output] = set()
        self.raised = False  # on a batch of every position: its rows NaN
        return super().run(batches, device, dtypes)

    def rerun(self, which: list[int], batches, device: torch.device, dtype) -> dict:
        for i in which:
            self.per_batch[i], self.dtypes[i] = self.run_one(batches[i], device, dtype)
            self.inside[i] = self.inside.pop()  # run_one adds one, for the batch it ran
        return self.together()

    def run_one(self, batch: dict, device: torch.device, dtype: torch.dtype) -> tuple[dict, object]:
        """In `dtype`; where that is float64 and the model's code is not written for it (it
        raises there, or computes NaN, as a float32 mask times finfo(float64).min does), in
        float32, said. A model that raises on a sequence of every position the checkpoint has,
        and on no shorter one, is compared on the rest: that batch's rows are NaN, said why."""
        tries = [dtype, torch.float32] if dtype == torch.float64 else [dtype]
        error, in_float64 = None, ""
        for t in tries:
            said, inside, misread = list(self.notes), len(self.inside), set(self.misread)
            try:
                outputs, ran_in = super().run_one(batch, device, t)
                self.inside[-1] = at_token_starts(self.inside[-1], batch, self.heads)
            except UserCodeError as e:
                error, why = e, e.did
            else:
                if t != torch.float64 or all(v.isfinite().all() for v in outputs.values()):
                    if t != dtype:
                        self._say(
                            Note(
                                f"your model does not compute in float64 ({in_float64}): the "
                                "batch of every position is compared in float32, where rounding "
                                "alone may near the tolerance"
                            )
                        )
                    return outputs, ran_in
                error, why = None, "it computes NaN or infinities there"
            self.notes, self.misread = said, misread  # what was said of that run goes with it
            del self.inside[inside:]
            in_float64 = why
        every = positions(self.ckpt.config)
        if error is None or batch["input_ids"].shape[-1] < every or every <= RANDOM_LENGTH:
            raise error
        self._say(Note(f"your model cannot take a sequence of all {every} positions: it {why}"))
        self.raised = True
        self.inside.append({})
        return {}, tries[-1]

    def _say(self, note: Note) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def differs_inside(self, output: Output, expected: list, limit: float) -> bool:
        """Does what the forward computes differ, on the batches it ran (a pre-LN block: the
        diagnosis takes it apart), or only what it returns (a liar, or a dtype), or only on a
        batch it raised on (nothing to take apart)? `expected`: the reference's, batch by
        batch."""
        if output in self.misread:
            return False
        parts = zip(self.inside, self.per_batch, expected, strict=True)
        return any(
            output not in got or not ((inside.get(output, got[output]) - e).abs().max() <= limit)
            for inside, got, e in parts
            if got  # a batch it ran, not one it raised on
        )

    def reads_left_padding(self) -> bool:
        """Not where its forward takes lengths for a mask: they say how many tokens each row
        has, not where (its own code pads on the right)."""
        if "lengths" not in self.harness.plan.given:
            return True
        said = "your model takes lengths, which say nothing of where the padding is"
        self.notes.append(Note(f"the batch padded on the left not given: {said}"))
        return False

    def on_the_left(self, batch: dict, got: dict, kind: str) -> list[Note]:
        """Where the model differs on a batch padded on the left alone: it agrees on right
        padding, and (where recomputed: bertconv's model holding the same weights, given the
        padding's places as tokens for their positions, computes what it computes) it numbers
        positions over the padding, where the checkpoint's class counts them from the first
        real token."""
        said = "the batch padded on the left: your model differs there and agrees on right padding"
        if not self._over_the_padding(batch, got):
            return [Note(f"{said} (no cause bertconv recomputed explains it)")]
        return [
            Note(
                f"{said}: it numbers positions from the start of each row, over the padding, "
                f"where {kind} counts them from its first real token (recomputed so, bertconv's "
                "model computes what yours does)"
            )
        ]

    def _over_the_padding(self, batch: dict, got: dict) -> bool:
        """Does bertconv's model holding the model's weights as read compute its hidden states
        on `batch` when every padded place counts as a token for the positions (an id other
        than the pad id there; the mask still hides it)?"""
        config, counted = self.ckpt.config, batch  # a BERT's positions count every place
        if config.positions_after_pad:  # RoBERTa's count the places whose id is not the pad id
            other = (config.pad_token_id + 1) % config.vocab_size
            real = batch["attention_mask"].bool()
            counted = {**batch, "input_ids": torch.where(real, batch["input_ids"], other)}
        with no_tf32():
            ours, _ = Runner(self._bert(), []).run_one(counted, torch.device("cpu"), torch.float32)
        hidden = [k for k in ours if k.hidden and k in got]
        limit = FLOAT32_MAX_ABS
        return bool(hidden) and all(float((got[k] - ours[k]).abs().max()) <= limit for k in hidden)

    def _partly_used(self, run, label: Output) -> None:
        """A head computed without some of its tensors (a decoder's bias never added): named,
        where their values matter (where the checkpoint's are zeros, the output is the same)."""
        held = dict(self.model.named_parameters(remove_duplicate=False))
        first = {n: run.trace.names.get(id(held[n]), n) for n in self.anchors[label] if n in held}
        idle = sorted(n for n, f in first.items() if not run.trace.uses({f}))
        if idle:
            said = f"{label}: your model's forward never uses {', '.join(idle)}"
            self._say(Note(f"{said}, which holds the checkpoint's"))

    def _never_used(self, label: Output) -> None:
        if label.hidden:  # compared with the state the model carries there; the diagnosis says
            return
        names = ", ".join(sorted(self.anchors[label]))
        self._say(Note(f"{label}: your model's forward never uses {names} (not compared)"))


def diagnosis(harness, table, row: Output, batches, bert: BertModel) -> Diagnosis | None:
    """Where and why `row` differs, on the first of `batches` that shows a step differing (verify
    gives the shortest it differs on first), each step recomputed by `bert` (bertconv's model
    holding the checkpoint's weights); in float32 on the CPU. A batch of every position the
    model raises on is passed over (the others say)."""
    cast(harness.model, "cpu", torch.float32)
    bert.to("cpu", torch.float32)
    found_anchors = anchors(table, bert.config, {"pooler"})
    found = None
    for batch in batches:
        if batch["input_ids"].dim() != 2:  # multiple choice: not taken apart
            return None
        try:
            run = harness.run(batch)
        except UserCodeError:  # a batch of every position it cannot take: the others say
            continue
        if bert.config.rotary:  # a modern encoder: its ports' mistakes, each recomputed
            with shipped():
                return explain_run(bert, run, found_anchors, row)
        pooled = read(run, found_anchors).get(POOLER) if row == POOLER else None
        varies = harness.varies(run)  # as it ran: with its patches of torch
        with shipped():  # the model ran with its patches of torch; BERT is recomputed without
            found = diagnose(run.trace, table, bert, row, pooled, varies)
        if found is None or found.step is not None:
            return found
    return found


def _seeded(reading: Reading, ckpt: Checkpoint, table: Layout, kept: set, lacking: set, shapes):
    """The conversion the model loads: `reading`'s groups `kept`, and seeded weights for the
    heads `lacking` (the model has them, the checkpoint not) where the model's shapes take
    them; the reading it was made of, and the groups seeded. Seeded, the same weights go to the
    model and to transformers' head, so that its arithmetic is compared all the same."""
    config, g = ckpt.config, torch.Generator().manual_seed(SEED)
    encoder, official = table.official_shapes(config), dict(reading.official)
    for name, shape in table.official_shapes(config, sorted(lacking | {"pooler"})).items():
        if name not in encoder and name not in official:
            official[name] = _seed(shape, g)  # the pooler too, where a seeded head reads it
    for seeded in _seedable(kept, lacking, table.architecture):
        while seeded:
            groups = frozenset(kept | seeded)
            try:
                model_class = class_for(groups, table.architecture)
            except ValueError:  # the seeded heads and the checkpoint's make no class
                break
            if table.architecture.has_pooler(model_class):
                groups |= {"pooler"}
            held = replace(reading, official=official, groups=groups, model_class=model_class)
            conversion = convert_reading(held, config, table, Selection("exactly", groups))
            misfit = {
                table.row_of(table.tied.get(n, n)).group
                for n, t in conversion.state_dict.items()
                if n in shapes and tuple(t.shape) != shapes[n]
            } & seeded  # a classifier of another label count than config.json's
            if not misfit:
                return held, frozenset(seeded), conversion
            seeded = seeded - misfit
    chosen = Selection("exactly", frozenset(kept))
    return reading, frozenset(), convert_reading(reading, config, table, chosen)


def _seedable(kept: set, lacking: set, arch) -> list[frozenset]:
    """The heads to seed, tried in turn: every one lacking, then each class's heads the model
    has beside the checkpoint's, the class holding more of them first (a classifier's names
    are a sequence's and a token's at once: DistilBERT's pre_classifier says which)."""
    options = [frozenset(lacking)]
    for name in arch.classes:
        heads = set(arch.groups_of(name)) - {"pooler"}
        if kept - {"pooler"} <= heads <= kept | lacking and heads - kept:
            options.append(frozenset(heads - kept))
    return sorted(dict.fromkeys(options), key=len, reverse=True)


def _seed(shape: tuple[int, ...], g: torch.Generator) -> storage.Tensor:
    """Random weights of a projection's scale (a vector's: of a bias's or a LayerNorm's)."""
    values = torch.randn(shape, generator=g) / (shape[-1] ** 0.5 if len(shape) > 1 else 2)
    return storage.InMemory("F32", tuple(shape), values.numpy().tobytes())


def _misplaced(table: Layout, config: BertConfig, left: tuple, shapes: dict, spec: str) -> None:
    """Refuse to leave a head of the checkpoint's (in `left[0]`) out where the table places one
    of the model's of its shapes as another (`left[1]`: a 2-class classifier as NSP) or its own."""
    encoder = table.official_shapes(config)
    of = {g: Counter(s for n, s in table.official_shapes(config, [g]).items() if n not in encoder)
          for g in (*left[0], *left[1])}  # fmt: skip
    own = Counter(shapes[n] for n in table.own if n in shapes)
    for group in sorted(left[0]):
        found = [(g, _head_names(table, config, {g})) for g in left[1] if of[g] == of[group]]
        if found or not of[group] - own:
            how, names = (found or [("its own", table.own)])[0]
            raise CheckpointError(
                f"{said(spec)}: the checkpoint's {group} head would be left out, but the table "
                f"places {listed(sorted(names))}, of its shapes, as {how}: a head is never "
                f"guessed. Place it as {group} (`bertconv infer --config` reads config.json's "
                f"architectures), or verify on a checkpoint without a {group} head"
            )


def _not_compared(table, config: BertConfig, absent, kept) -> list[Note]:
    """A note for each head of the user's model that the checkpoint has none of (groups that
    share their tensors, a classifier read three ways, named together), and its own tensors."""
    by_names: dict[frozenset, list[str]] = {}
    for group in sorted(absent - {"pooler"}):
        names = frozenset(_head_names(table, config, {group}))
        if not names <= _head_names(table, config, kept):
            by_names.setdefault(names, []).append(group)
    own = [Note(f"{listed(sorted(table.own))}: your model's own (never loaded or compared)")]
    return [
        Note(
            f"{' / '.join(groups)}: the checkpoint has none (not compared; your model keeps its "
            "own weights)"
        )
        for groups in by_names.values()
    ] + own * bool(table.own)


def _head_names(table: Layout, config: BertConfig, groups) -> set[str]:
    """The names a table writes for the heads `groups` (the encoder's tensors left out)."""
    encoder = set(table.official_shapes(config))
    official = set(table.official_shapes(config, sorted(groups))) - encoder
    return set(table.written(official, frozenset()))
