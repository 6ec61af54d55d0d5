"""Your own BERT: importing it as Python would, building it from config.json, calling its forward
the way it asks, and reading what it computes from a trace of its torch calls (trace.py), with no
change to its code.

    --model PKG.MODULE:NAME      or      --model path/to/bert.py:NAME

NAME is a class called with the config (or, where its constructor takes sizes, with those it
names), or a function that returns an `nn.Module`. The config is an object with attribute access
to every config.json field, and BertConfig's defaults for the fields config.json leaves out.

The forward is called by parameter name, then by elimination (`plan`); reading.py reads what
it computed.
"""

import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from ..config import BertConfig
from ..errors import CheckpointError, UsageError, UserCodeError
from .trace import Trace
from .units import words

# What each input is called, most likely first; matched whole, then by the words of a name.
SPELLINGS = {
    "input_ids": ("input_ids", "ids", "input", "inputs", "x", "tokens", "token_ids", "src",
                  "input_seq", "seq", "sequence", "text", "idx", "words", "word_ids", "sents"),
    "attention_mask": ("attention_mask", "mask", "attn_mask", "input_mask", "attention_masks",
                       "masks", "src_mask", "pad_attn_mask", "am"),
    "token_type_ids": ("token_type_ids", "segment_ids", "token_type", "token_types",
                       "segment_label", "segment_info", "segments", "segment", "seg_ids", "seg",
                       "segs", "type_ids", "tk_type_ids", "tt", "token_type_id", "segment_id"),
    "lengths": ("valid_lens", "valid_len", "lengths", "lens", "seq_lens", "seq_len",
                "seq_lengths", "input_lengths", "input_lens", "length", "src_lengths"),
}  # fmt: skip
# A mask that marks the padding rather than the tokens (nn.MultiheadAttention's convention).
INVERTED_MASKS = ("key_padding_mask", "padding_mask", "pad_mask", "src_key_padding_mask")
# Words that make a name something else than the attention mask: masked-LM positions, labels,
# a mask of heads, of the future, or of another sequence (cross-attention).
NOT_THE_MASK = {
    "lm", "mlm", "masked", "pos", "position", "positions", "label", "labels",
    "head", "heads", "causal", "future", "encoder", "decoder", "memory", "tgt",
}  # fmt: skip
# Sizes a constructor may ask for by another name, and the config.json field that gives each.
SIZE_NAMES = {
    "vocab_size": ("vocab_size", "vocab", "n_vocab", "ntoken", "num_tokens", "vocab_len"),
    "hidden_size": ("hidden_size", "hidden", "d_model", "dim", "embed_dim", "n_embd",
                    "emb_dim", "hidden_dim", "embedding_dim", "num_hiddens", "d_hidden"),
    "num_hidden_layers": ("num_hidden_layers", "n_layers", "num_layers", "n_layer", "depth",
                          "layers", "num_blks", "nlayers"),
    "num_attention_heads": ("num_attention_heads", "attn_heads", "num_heads", "n_heads",
                            "heads", "nhead", "n_head"),
    "intermediate_size": ("intermediate_size", "d_ff", "ffn_dim", "ff_dim", "dim_feedforward",
                          "mlp_dim", "feed_forward_hidden", "ffn_num_hiddens", "d_inner",
                          "ffn_hidden", "hidden_ff"),
    "max_position_embeddings": ("max_position_embeddings", "max_len", "max_seq_len",
                                "max_length", "n_positions", "block_size", "seq_len",
                                "max_seq_length", "n_ctx"),
    "type_vocab_size": ("type_vocab_size", "n_segments", "num_segments", "segment_size",
                        "type_vocab", "n_types"),
    "hidden_dropout_prob": ("hidden_dropout_prob", "dropout", "p_drop", "dropout_prob", "drop"),
    "layer_norm_eps": ("layer_norm_eps", "eps", "norm_eps", "ln_eps"),
    "pad_token_id": ("pad_token_id", "pad_idx", "padding_idx", "pad_id", "pad"),
}  # fmt: skip
# Fields of transformers' BertConfig that config.json may leave out, as their defaults: a model
# may read any of them (`config.initializer_range` in its weight init).
DEFAULTS = {
    "initializer_range": 0.02,
    "use_cache": True,
    "is_decoder": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
    "bos_token_id": None,
    "eos_token_id": None,
    "output_hidden_states": False,
    "output_attentions": False,
    "return_dict": True,
    "torchscript": False,
    "chunk_size_feed_forward": 0,
}


class Config(dict):
    """config.json as an object: `config.hidden_size` as well as `config["hidden_size"]`."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"config.json has no field {name!r}") from None

    def __setattr__(self, name: str, value) -> None:
        self[name] = value  # a model may set a field of its own on the config it is given

    def to_dict(self) -> dict:
        return dict(self)


def config_object(config_dict: dict, config: BertConfig) -> Config:
    """Every field config.json has, BertConfig's (and transformers') defaults for the rest."""
    return Config({**DEFAULTS, **asdict(config), **config_dict})


def import_factory(spec: str) -> Callable:
    """The class or function `spec` names: `package.module:Name` or `path/to/file.py:Name`."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise UsageError(f"--model {spec!r}: expected PKG.MODULE:NAME or path/to/file.py:NAME")
    if where.endswith(".py") or "/" in where:
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"--model {spec!r}: cannot import {where} (no such file {path})")
        module_name, root = _module_name(path)
    else:
        path, module_name, root = Path(where), where, Path.cwd()
    with guarded(spec, f"importing {where}"), _importing(root, str(path)):
        if module_name == where:  # a module by its dotted name
            try:
                module = importlib.import_module(where)
            except ModuleNotFoundError as e:
                if e.name is None or not where.startswith(e.name):
                    raise
                raise UsageError(
                    f"--model {spec!r}: cannot import {where} (ModuleNotFoundError: {e})"
                ) from None
        else:
            module = _exec_file(module_name, path)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise UsageError(f"--model {spec!r}: {where} has no class or function {name!r}")
    return factory


def _module_name(path: Path) -> tuple[str, Path]:
    """The name Python would import a file under, and the directory that makes it importable: a
    file inside packages (beside an `__init__.py`) is `pkg.sub.file`, so that its relative
    imports work; any other is its stem, its own directory on the path."""
    parts, directory = [path.stem], path.parent
    while (directory / "__init__.py").is_file() and directory.name.isidentifier():
        parts.insert(0, directory.name)
        directory = directory.parent
    return ".".join(parts), directory


def _exec_file(module_name: str, path: Path):
    """Run the file as module `module_name`, in sys.modules while it runs and after, as an import
    would (a dataclass, `sys.modules[__name__]`, pickling need it). A file imported already is
    that module, as for Python; a name another module holds is not taken from it."""
    known = sys.modules.get(module_name)
    if known is not None:
        if Path(getattr(known, "__file__", "") or "").resolve() == path:
            return known
        module_name = f"bertconv_user.{module_name}"
    if "." in module_name and not module_name.startswith("bertconv_user."):
        importlib.import_module(module_name.rpartition(".")[0])  # its packages, for `from .x`
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(module_name)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if previous is None:
            sys.modules.pop(module_name, None)
        else:
            sys.modules[module_name] = previous
        raise
    return module


@contextmanager
def _importing(root: Path, program: str):
    """The model's directory importable (for its own imports of its neighbours), and sys.argv
    its own, as when Python runs it: a file that parses its arguments on import sees none."""
    saved_argv = sys.argv
    sys.path.insert(0, str(root))
    sys.argv = [program]
    try:
        yield
    finally:
        sys.argv = saved_argv
        if str(root) in sys.path:
            sys.path.remove(str(root))


@contextmanager
def guarded(spec: str, doing: str, advice: str = ""):
    """The user's code raising or exiting is reported as theirs: what, and where in their code
    (and `advice`, what to do)."""
    try:
        yield
    except (UsageError, KeyboardInterrupt):
        raise
    except SystemExit as e:
        raise UserCodeError(
            f"--model {spec!r}: {doing}, the model's code called sys.exit({e.code!r})"
            f"{_where(e)}; bertconv compared nothing{advice}"
        ) from None
    except (Exception, RecursionError) as e:  # the user's code: whatever it raises
        message = (str(e).splitlines() or [""])[0][:300]
        raise UserCodeError(
            f"--model {spec!r}: {doing}, the model's code raised {type(e).__name__}: "
            f"{message}{_where(e)}{advice}"
        ) from None


def _where(error: BaseException) -> str:
    """` (at FILE:LINE, in FUNCTION)`: the last frame of the traceback outside torch, the
    standard library and bertconv, which is where the user's code was."""
    library = (f"{Path('bertconv')}/", "site-packages", "/lib/python3", "<frozen")
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if not any(part in f.filename for part in library)]
    return f" (at {own[-1].filename}:{own[-1].lineno}, in {own[-1].name})" if own else ""


def construct(factory: Callable, spec: str, config: Config) -> nn.Module:
    """The user's model, built from the config, in eval mode: called with the config, or, where
    its constructor names sizes (`vocab_size, hidden=768, n_layers=12`), with those."""
    kwargs = _size_arguments(factory, config)
    advice = (
        ". If it takes a config class of its own, give a function that builds it: "
        "def make(config): return MyBert(MyConfig(**config))"
    )
    with guarded(spec, "building it with the checkpoint's config", advice):
        model = factory(config) if kwargs is None else factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise UsageError(f"--model {spec!r}: gives a {type(model).__name__}, not an nn.Module")
    return model.eval()


def _size_arguments(factory: Callable, config: Config) -> dict | None:
    """Keyword arguments for a constructor that takes sizes by name; None where it takes the
    config (one parameter, or one whose name says config)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    params = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(params) <= 1 or any("config" in p.name.lower() or p.name == "cfg" for p in params):
        return None
    fields = {n: f for f, names in SIZE_NAMES.items() for n in names}
    kwargs = {p.name: config[fields[p.name]] for p in params if p.name in fields}
    return kwargs or None


def load_weights(
    model: nn.Module, spec: str, tensors: dict[str, torch.Tensor], absent: set[str]
) -> None:
    """Strictly: every tensor the model holds comes from the checkpoint, and none is left over,
    but the buffers it makes itself and `absent` (heads the checkpoint has none of)."""
    own_buffers = {n for n, _ in model.named_buffers()}
    result = model.load_state_dict(tensors, strict=False)
    missing = [n for n in result.missing_keys if n not in own_buffers and n not in absent]
    wrong = [
        f"{name}: {tuple(t.shape)} in the model, {tuple(tensors[name].shape)} converted"
        for name, t in model.state_dict().items()
        if name in tensors and t.shape != tensors[name].shape
    ]
    if missing or result.unexpected_keys or wrong:
        raise CheckpointError(
            f"--model {spec!r}: the table's names do not fit the model: missing "
            f"{missing[:8]}, unexpected {result.unexpected_keys[:8]}, shapes "
            f"{wrong[:4]}. Check the table (`bertconv infer` writes one for your model)."
        )


@dataclass
class Plan:
    """How the user's forward takes its inputs: {its parameter: what bertconv passes it}."""

    arguments: dict[str, str]  # parameter -> input_ids, attention_mask, token_type_ids, lengths
    inverted: bool = False  # the mask is True at padding
    keywords: bool = True  # passed by name (else by position, to a forward(*args))

    @property
    def given(self) -> set[str]:
        return set(self.arguments.values())


def plan(model: nn.Module, spec: str) -> Plan:
    """Which parameter of the user's forward takes each input: by name (the spellings above, or
    the words of a name), then by elimination: one required parameter left after the ids and
    the mask is the token types. Raises, showing the signature, where a required parameter is
    left that bertconv cannot give."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return Plan({"input_ids": "input_ids"}, keywords=False)
    params = [p for p in signature.parameters.values() if p.name != "self"]
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    found = _by_name([p.name for p in named])
    if "input_ids" not in found.values():
        first = next((p.name for p in named if p.name not in found), None)
        if first is None:
            if any(p.kind == p.VAR_KEYWORD for p in params):  # forward(**kwargs): by our names
                return Plan({k: k for k in ("input_ids", "attention_mask", "token_type_ids")})
            return Plan({"input_ids": "input_ids"}, keywords=False)
        found[first] = "input_ids"
    required = [p.name for p in named if p.default is p.empty and p.name not in found]
    if len(required) == 1 and "token_type_ids" not in found.values():
        found[required.pop()] = "token_type_ids"
    if required:
        raise UsageError(
            f"--model {spec!r}: forward{signature} needs {', '.join(map(repr, required))}, which "
            "bertconv cannot give: it passes the token ids, the attention mask (or lengths) and "
            "the token types. Give the parameter a default, or give --model a function that "
            "wraps your model"
        )
    order = {p.name: i for i, p in enumerate(named)}
    arguments = dict(sorted(found.items(), key=lambda kv: order[kv[0]]))
    return Plan(arguments, inverted=any(a in INVERTED_MASKS for a in arguments))


def _by_name(names: list[str]) -> dict[str, str]:
    """{parameter: input} for the parameters whose names say what they take."""
    found: dict[str, str] = {}
    for ours, spellings in SPELLINGS.items():  # whole names first, in order of likelihood
        spellings += INVERTED_MASKS if ours == "attention_mask" else ()
        spelling = next((s for s in spellings if s in names and s not in found), None)
        if spelling:
            found[spelling] = ours
    for name in names:  # then the words of a name: src_mask, segment_labels, input_tokens
        ours = None if name in found else _by_words(words(name))
        if ours and ours not in found.values():
            found[name] = ours
    return found


def _by_words(words: set[str]) -> str | None:
    if "mask" in words or "masks" in words:
        return None if words & NOT_THE_MASK else "attention_mask"
    if words & {"len", "lens", "length", "lengths"}:
        return "lengths"
    if words & {"seg", "segs", "segment", "segments", "type", "types"}:
        return "token_type_ids"
    if words & {"position", "positions", "pos", "label", "labels", "head", "hidden", "state"}:
        return None
    if words & {"ids", "input", "inputs", "token", "tokens", "x", "src", "seq", "sequence"}:
        return "input_ids"
    return None


@dataclass
class Run:
    """One traced forward: the trace, what the forward returned, and the batch it read."""

    trace: Trace
    output: object
    batch: dict[str, torch.Tensor]


@dataclass
class Harness:
    """The user's model, called the way its forward asks, every call traced."""

    model: nn.Module
    spec: str
    plan: Plan
    pad_token_id: int = 0
    vocab_size: int = 0

    def prepare(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch as both models read it. A model given neither a mask nor lengths makes its
        mask from the pad id: its padding is the pad id, and no real token is."""
        batch = dict(batch)
        if "token_type_ids" not in self.plan.given:
            batch["token_type_ids"] = torch.zeros_like(batch["token_type_ids"])
        if not self.plan.given & {"attention_mask", "lengths"}:
            pad, real, ids = self.pad_token_id, batch["attention_mask"].bool(), batch["input_ids"]
            ids = torch.where(real & (ids == pad), (pad + 1) % max(self.vocab_size, 2), ids)
            batch["input_ids"] = torch.where(real, ids, pad)
        return batch

    def call(self, batch: dict[str, torch.Tensor]):
        """The forward, given what the plan says, as its parameters take it."""
        mask = batch["attention_mask"]
        values = {
            "input_ids": lambda: batch["input_ids"],
            "attention_mask": lambda: ~mask.bool() if self.plan.inverted else mask,
            "token_type_ids": lambda: batch["token_type_ids"],
            "lengths": lambda: mask.sum(-1),
        }
        args = {theirs: values[ours]() for theirs, ours in self.plan.arguments.items()}
        if self.plan.keywords:
            return self.model(**args)
        return self.model(*args.values())

    def run(self, batch: dict[str, torch.Tensor], guard: bool = True) -> Run:
        """A traced forward on a prepared batch. The user's code raising is theirs (guard), or,
        where a candidate table may break it, the caller's to handle."""
        trace = Trace(self.model, dict(batch))
        user = guarded(self.spec, "running its forward") if guard else nullcontext()
        with torch.inference_mode(), trace, user:
            output = self.call(batch)
        return Run(trace, output, batch)


def load(spec: str, config_dict: dict, config: BertConfig, batch: dict) -> Harness:
    """The user's model `spec`, built from config.json, with the harness that calls it. Lazy
    modules (`nn.LazyLinear`) have their shapes only after a first forward: on `batch`."""
    model = construct(import_factory(spec), spec, config_object(config_dict, config))
    harness = Harness(model, spec, plan(model, spec), config.pad_token_id, config.vocab_size)
    if any(isinstance(p, nn.parameter.UninitializedParameter) for p in model.parameters()):
        with torch.no_grad(), guarded(spec, "running its forward"):
            harness.call(harness.prepare(batch))
    return harness
