"""transformers' side of verify: its own class for a checkpoint, holding what bertconv read, and
the check that transformers is there and computes what the checkpoint asks. The one module that
builds transformers' models; verify and your own BERT's adapter ask it.
"""

import gc
from collections import OrderedDict
from pathlib import Path

import torch

from . import files, storage
from .checkpoint import Checkpoint
from .config import BertConfig
from .convert import Reading, Selection, convert_reading
from .errors import CheckpointError, MissingDependencyError
from .mapping import layout
from .outputs import Output, Runner, cast_order, heads, key, no_tf32
from .tables import OFFICIAL
from .yours.fence import shipped

# config.json fields transformers acts on that leave BERT's arithmetic as it is (bertconv's model
# has no use for them), named where transformers fails on them
ACTED_ON = ("chunk_size_feed_forward",)
# transformers' outputs, by what they were computed of (Reference.key: the checkpoint's files as
# found on disk, the class and heads), the batch and the dtype: a checkpoint verified again in
# one process (a notebook, a script, the tests) is not run again. The oldest go first beyond
# RUNS_LIMIT bytes.
RUNS: OrderedDict[tuple, dict[Output, torch.Tensor]] = OrderedDict()
RUNS_LIMIT = 1 << 30


def imported():
    """transformers, or the error that says how to install it."""
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError(
            "verify needs transformers: pip install 'bertconv[verify]'"
        ) from None
    transformers.logging.disable_progress_bar()  # the report is the output
    return transformers


def implements(transformers, config: BertConfig) -> None:
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


class Reference:
    """transformers' own class for a checkpoint's reading, run on each (batch, dtype) verify
    asks for once per process (RUNS), with torch as shipped (no patch of a user's module
    reaches it). The model is built for the runs `compute` is given together, and let go once
    they are done: it is never held beside a model verify runs after it. `seeded`: the same
    for heads given seeded weights, whose rows it adds."""

    def __init__(
        self, ckpt: Checkpoint, reading: Reading, device, from_file: bool = True, read=None
    ):
        self.ckpt, self.reading, self.device, self.from_file = ckpt, reading, device, from_file
        self.read = read  # tensors shared with bertconv's model (storage.all_to_torch)
        self.heads = heads(reading.model_class, reading.table.architecture)
        made = () if from_file else _in_memory(reading)  # seeded heads: which weights
        self.key = (_state(ckpt), reading.model_class, tuple(sorted(reading.groups)), made,
                    str(device))  # fmt: skip
        self.seeded: tuple[Reference, frozenset[Output]] | None = None

    def outputs(self, batch: dict[str, torch.Tensor], dtype) -> dict[Output, torch.Tensor]:
        """transformers' compared outputs on a batch (as the model reads it), in `dtype`."""
        self.compute([(batch, dtype)])
        at = (self.key, key(batch), dtype)
        RUNS.move_to_end(at)
        found = RUNS[at]
        if self.seeded is not None:
            other, rows = self.seeded
            found = found | {k: v for k, v in other.outputs(batch, dtype).items() if k in rows}
        return found

    def looked_up(self, batches: list, dtypes: list) -> dict[Output, torch.Tensor]:
        """transformers' outputs on `batches`, each in its dtype, one after the other."""
        each = [self.outputs(b, t) for b, t in zip(batches, dtypes, strict=True)]
        return {o: torch.cat([e[o] for e in each]) for o in each[0]}

    def compute(self, wanted: list[tuple[dict, torch.dtype]]) -> None:
        """Run the model on each (batch, dtype) of `wanted` not run before, in the order a model
        is cast in, the largest batches first (what later ones need of memory, they freed): one
        model built for them all, let go after."""
        if self.seeded is not None:
            self.seeded[0].compute(wanted)
        missing = {(self.key, key(b), t): (b, t) for b, t in wanted}
        missing = {k: v for k, v in missing.items() if k not in RUNS}
        if not missing:
            return
        with shipped(), no_tf32():
            model = reference_model(self.ckpt, self.reading, self.from_file, self.read)
            runner = Runner(model, self.heads)
            for at, (batch, dtype) in sorted(missing.items(), key=_order):
                RUNS[at] = self._run(runner, batch, dtype)
        _keep_within(RUNS_LIMIT, missing.keys())

    def _run(self, runner: Runner, batch: dict, dtype) -> dict[Output, torch.Tensor]:
        try:
            return runner.run_one(batch, self.device, dtype)[0]
        except Exception as e:  # transformers' own forward, on what config.json asks of it
            reason = (str(e).splitlines() or [type(e).__name__])[0][:300]
            config = self.ckpt.config_dict
            asked = [f"{k}={v!r}" for k, v in config.items() if k in ACTED_ON and v]
            fields = f" (config.json's {', '.join(asked)})" if asked else ""
            raise CheckpointError(
                f"{self.ckpt.path}: transformers cannot compute it on verify's batches{fields}: "
                f"{reason}"
            ) from None


def _order(run: tuple) -> tuple:
    batch, dtype = run[1]
    return cast_order(dtype), -batch["input_ids"].numel()


def _state(ckpt: Checkpoint) -> tuple:
    """The checkpoint's files as found on disk (which, their sizes, when written), and the
    layout it was read in (a table file's too)."""
    read = [*ckpt.files, *([Path(ckpt.layout)] if ckpt.layout.endswith(".toml") else [])]
    found = {**{p: files.identity(p) for p in read}, **ckpt.seen}
    identities = tuple(sorted((str(p), i) for p, i in found.items()))
    return str(ckpt.path.resolve()), ckpt.layout, identities


def _in_memory(reading: Reading) -> tuple:
    """What identifies the tensors of a reading made in memory (seeded heads beside the file's):
    their names, shapes and bytes."""
    made = {n: t for n, t in reading.official.items() if isinstance(t, storage.InMemory)}
    return tuple(sorted((n, t.shape, hash(t.data)) for n, t in made.items()))


def _keep_within(limit: int, new) -> None:
    """The oldest runs but the `new` ones let go, until those kept hold at most `limit` bytes."""
    sizes = {k: sum(t.nbytes for t in v.values()) for k, v in RUNS.items()}
    for old in [k for k in RUNS if k not in new]:
        if sum(sizes.values()) <= limit:
            return
        del RUNS[old]
        sizes.pop(old)


def reference_model(ckpt: Checkpoint, reading: Reading, from_file: bool = True, read=None):
    """transformers' own class for the file, holding the tensors bertconv read from it. A file
    in the official layout is handed over under the names the file gives them, which
    transformers maps itself (legacy gamma/beta, the `bert.` prefix): independently of
    bertconv's tables. A file in another layout, or a reading not all of the file's
    (`from_file` false: seeded heads beside it), is first put into official names."""
    transformers, arch, name = imported(), reading.table.architecture, reading.model_class
    pooler = "pooler" in reading.groups
    # A pooler that transformers' class has no place for (an older task checkpoint's) stays out.
    groups = reading.groups - ({"pooler"} if not arch.has_pooler(name) else set())
    if ckpt.layout == OFFICIAL and from_file:
        tensors = _only(ckpt, groups)
    else:
        official_table, chosen = layout(OFFICIAL, ckpt.config), Selection("exactly", groups)
        tensors = convert_reading(reading, ckpt.config, official_table, chosen).state_dict
    state_dict = storage.all_to_torch(tensors, read=read)
    builds_pooler = arch.implementation(name) == "BertModel" and arch.has_pooler(name)
    extra = {"add_pooling_layer": pooler} if builds_pooler else {}
    try:
        config_class = getattr(transformers, arch.config_class)
        config = config_class.from_dict(ckpt.config_dict)
        model_class = getattr(transformers, name)
        # transformers 4 computes relative positions in its eager attention only; MPNet's
        # classes have no other
        eager = ckpt.config.relative or not getattr(model_class, "_supports_sdpa", False)
        model, info = model_class.from_pretrained(
            None,
            config=config,
            state_dict=state_dict,
            attn_implementation="eager" if eager else "sdpa",
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
    wanted = set(table.official_shapes(ckpt.config, sorted(groups)))  # the encoder's too
    return {
        name: t
        for name, t in ckpt.state_dict.items()
        if (place := table.place(name)) == "ignored"
        or (place in ("row", "alias") and set(table.row_of(name).official) <= wanted)
    }


def sentence_transformers():
    """sentence-transformers, or the error that says how to install it."""
    try:
        import sentence_transformers
    except ImportError:
        raise MissingDependencyError(
            "verify of a sentence-transformers directory (one with modules.json) compares its "
            "sentence embeddings against sentence-transformers': pip install 'bertconv[sentence]'"
        ) from None
    return sentence_transformers


# sentence-transformers' embeddings, by what they were computed of (every file of the directory
# as found: which, its size, when written) and how: a directory verified again in one process
# (the tests, a notebook) is not loaded and run again.
EMBEDDED: OrderedDict[tuple, dict] = OrderedDict()
EMBEDDED_KEPT = 16  # directories: their embeddings are a few vectors each


def sentence_embeddings(ckpt: Checkpoint, reading: Reading, groups: list, dtypes, device):
    """`SentenceTransformer(DIR).encode(texts)` of each group of texts in `groups`, a call each
    (a batch as encode makes it: its padding, on the left, changes a BERT's positions), in each
    of `dtypes` ({dtype: [(N, D) on the CPU, in float32, of each group]}). DIR is the
    checkpoint's directory where it is in transformers' names; in any other layout,
    transformers' model of the same reading saved under those names, with the directory's
    tokenizer and sentence-transformers' files beside it, as verify builds transformers' model
    for the layers."""
    from . import files

    found = sorted((str(p), files.identity(p)) for p in ckpt.path.rglob("*") if p.is_file())
    groups = tuple(tuple(texts) for texts in groups)
    key = (str(ckpt.path.resolve()), ckpt.layout, tuple(found), groups, str(device))
    done = EMBEDDED.get(key, {})
    if not set(dtypes) <= set(done):
        with shipped():  # no patch of a user's module reaches sentence-transformers
            new = _sentence_embeddings(ckpt, reading, groups, set(dtypes) - set(done), device)
        gc.collect()  # its model is let go of now, not at the next collection (it holds cycles)
        done = done | new
        EMBEDDED[key] = done
    EMBEDDED.move_to_end(key)
    while len(EMBEDDED) > EMBEDDED_KEPT:
        EMBEDDED.popitem(last=False)
    return {t: done[t] for t in dtypes}


def _sentence_embeddings(ckpt: Checkpoint, reading: Reading, groups: tuple, dtypes, device):
    import shutil
    import tempfile

    from . import sentence
    from .checkpoint import tokenizer_files

    st = sentence_transformers()
    with tempfile.TemporaryDirectory(prefix="bertconv-sentence-") as tmp:
        where = ckpt.path
        if ckpt.layout != OFFICIAL:
            where = Path(tmp)
            reference_model(ckpt, reading).save_pretrained(where)
            beside = [p.name for p in tokenizer_files(ckpt.path)]
            for name in [*beside, *sentence.carried(ckpt.path)]:
                (where / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ckpt.path / name, where / name)
        try:
            model = st.SentenceTransformer(str(where), device=str(device), local_files_only=True)
        except Exception as e:  # whatever sentence-transformers objects to
            reason = (str(e).splitlines() or [type(e).__name__])[0][:300]
            raise CheckpointError(
                f"{ckpt.path}: sentence-transformers cannot load it ({reason})"
            ) from None
        return {
            t: [_encoded(model, list(texts), t, ckpt.path) for texts in groups]
            for t in sorted(dtypes, key=cast_order)
        }


def _encoded(model, texts: list[str], dtype, path: Path):
    """sentence-transformers' `encode` of `texts` in `dtype`, on the CPU in float32."""
    model.to(dtype)
    try:
        with torch.inference_mode():
            found = model.encode(  # in one batch, as verify gives the texts to the model
                texts, batch_size=len(texts), convert_to_tensor=True, show_progress_bar=False
            )
    except Exception as e:  # its own code, on what the directory asks of it
        reason = (str(e).splitlines() or [type(e).__name__])[0][:300]
        raise CheckpointError(
            f"{path}: sentence-transformers cannot encode verify's texts with it ({reason}); "
            "a text as long as its truncation length (sentence_bert_config.json's "
            "max_seq_length) must fit its positions"
        ) from None
    return found.cpu().float()
