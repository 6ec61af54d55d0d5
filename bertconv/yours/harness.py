"""Your own BERT: building it from config.json (its module imported by fence.py), calling its
forward the way it asks, and reading what it computes from a trace of its torch calls
(trace.py), with no change to its code.

    --model PKG.MODULE:NAME      or      --model path/to/bert.py:NAME

NAME is a class called with the config (or, where its constructor takes sizes, with those it
names), or a function that returns an `nn.Module`. The config is an object with attribute access
to every config.json field, and BertConfig's defaults for the fields config.json leaves out.
The forward is called by parameter name, then by elimination (`plan`).
"""

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from functools import partial
from unittest.mock import patch

import torch
from torch import nn

from ..config import BertConfig
from ..errors import CheckpointError, UsageError, UserCodeError, listed, said
from .fence import guarded, import_factory, users_code
from .trace import Trace, tensors_in
from .units import words

# What each input is called, most likely first; matched whole, then by the words of a name.
SPELLINGS = {
    "input_ids": ("input_ids", "ids", "input", "inputs", "x", "tokens", "token_ids", "src",
                  "input_seq", "seq", "sequence", "text", "idx", "words", "word_ids", "sents"),
    "attention_mask": ("attention_mask", "mask", "attn_mask", "input_mask", "attention_masks",
                       "masks", "src_mask", "pad_attn_mask", "am", "keep", "valid_mask"),
    "token_type_ids": ("token_type_ids", "segment_ids", "token_type", "token_types",
                       "segment_label", "segment_info", "segments", "segment", "seg_ids", "seg",
                       "segs", "type_ids", "tk_type_ids", "tt", "token_type_id", "segment_id"),
    "lengths": ("valid_lens", "valid_len", "lengths", "lens", "seq_lens", "seq_len",
                "seq_lengths", "input_lengths", "input_lens", "length", "src_lengths"),
    "position_ids": ("position_ids", "pos_ids", "positions", "position_idx", "pos_idx",
                     "position_index", "position_indices"),
}  # fmt: skip
# The forms of a mask, each made of the (B, T) mask of 1 at the tokens: the product of how
# public code writes its values (integers, booleans, floats; marking the tokens to keep, the
# padding to hide, or added to the scores) and its rank (as given to the scores or broadcast to
# them, every query's row the keys'). Tried in turn (masked): the first the model runs with,
# masking the padding, is its form; the likeliest first.
VALUES = {  # name -> (what it marks, the values)
    "1 at the tokens": ("keep", lambda m: m.long()),
    "True at the tokens": ("keep", lambda m: m.bool()),
    "True at the padding": ("hide", lambda m: ~m.bool()),
    "-10000 at the padding": ("add", lambda m: (1.0 - m.float()) * -1e4),
    "1.0 at the tokens": ("keep", lambda m: m.float()),
    "1 at the padding": ("hide", lambda m: 1 - m.long()),
}
RANKS = {
    "(B, T)": lambda m: m,
    "(B, 1, 1, T)": lambda m: m[:, None, None, :],
    "(B, 1, T, T)": lambda m: m[:, None, None, :].expand(-1, 1, m.shape[-1], -1),
    "(B, T, T)": lambda m: m[:, None, :].expand(-1, m.shape[-1], -1),
}
# Added to the scores as they come (transformers' extended mask): of their rank alone. A (B, T)
# float mask of -10000 at the padding is a mask True at the padding to a model that reads it
# as booleans, which its name (attention_mask) says it is not.
ADDED = ("(B, 1, 1, T)", "(B, 1, T, T)")
MASKS = {
    f"{rank}, {value}": (marks, lambda m, r=r, v=v: r(v(m)))
    for rank, r in RANKS.items()
    for value, (marks, v) in VALUES.items()
    if marks != "add" or rank in ADDED
}
# A mask that marks the padding rather than the tokens (nn.MultiheadAttention's convention).
INVERTED_MASKS = ("key_padding_mask", "padding_mask", "pad_mask", "src_key_padding_mask")
# Names that say which way round the mask is (transformers' and Google's: 1 at the tokens, or
# added to the scores; the inverted ones: the padding marked, or added): taken as they say.
# Another (`mask`, `m`, `attn_mask`) is tried every way.
SAID_MASKS = {
    "attention_mask": ("keep", "add"),
    "input_mask": ("keep", "add"),
    **{name: ("hide", "add") for name in INVERTED_MASKS},
}
# Words that make a name something else than the attention mask: masked-LM positions, labels,
# a mask of heads, of the future, or of another sequence (cross-attention).
NOT_THE_MASK = {
    "lm", "mlm", "masked", "pos", "position", "positions", "label", "labels",
    "head", "heads", "causal", "future", "encoder", "decoder", "memory", "tgt",
}  # fmt: skip
# Words that make a name something else than an input bertconv gives by elimination.
SAYS_OTHERWISE = {
    "position", "positions", "pos", "label", "labels", "head", "heads", "hidden", "state",
    "states", "past", "cache", "encoder", "decoder", "memory", "tgt", "target", "targets",
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
    "initializer_range": 0.02, "use_cache": True, "is_decoder": False, "tie_word_embeddings": True,
    "add_cross_attention": False, "bos_token_id": None, "eos_token_id": None, "return_dict": True,
    "output_hidden_states": False, "output_attentions": False, "torchscript": False,
    "chunk_size_feed_forward": 0,
}  # fmt: skip


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
        raise UsageError(f"{said(spec)}: gives a {type(model).__name__}, not an nn.Module")
    meta = [n for n, t in model.state_dict().items() if t.is_meta]
    if meta:
        raise UserCodeError(
            f"{said(spec)}: its tensors are on the meta device ({listed(meta)}): they "
            "hold no values for bertconv to load into. Build the model on the CPU"
        )
    with guarded(spec, "putting it in eval mode"):
        nn.Module.train(model, False)  # torch's own: an override may return nothing
        # Built in half precision, say: run in float32 from its first call, as verify compares
        # (in float16, a CPU cannot run it), and loaded with the weights as read, not rounded.
        nn.Module.float(model)
    return model


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
    held = model.state_dict()
    # Shapes first: load_state_dict raises on a size mismatch even where not strict.
    wrong = [
        f"{name}: {tuple(t.shape)} in the model, {tuple(tensors[name].shape)} converted"
        for name, t in held.items()
        if name in tensors and t.shape != tensors[name].shape
    ]
    fitting = {n: t for n, t in tensors.items() if n not in held or held[n].shape == t.shape}
    result = nn.Module.load_state_dict(model, fitting, strict=False)  # not an override of its
    missing = [
        n
        for n in result.missing_keys
        if n not in own_buffers and n not in absent and n not in tensors
    ]
    if missing or result.unexpected_keys or wrong:
        raise CheckpointError(
            f"{said(spec)}: the table's names do not fit the model: missing "
            f"[{listed(map(repr, missing))}], unexpected "
            f"[{listed(map(repr, result.unexpected_keys))}], shapes "
            f"[{listed(map(repr, wrong))}]. Check the table (`bertconv infer` writes one for your "
            "model)."
        )


@dataclass
class Plan:
    """How the user's forward takes its inputs: {its parameter: what bertconv passes it}."""

    arguments: dict[str, str]  # parameter -> input_ids, attention_mask, ..., masked_positions
    mask: str = next(iter(MASKS))  # the form of the mask (MASKS)
    said: tuple[str, ...] = ("keep", "hide", "add")  # what its name lets the mask mark
    optional: frozenset = frozenset()  # its parameters given that have defaults
    keywords: bool = True  # passed by name (else by position, to a forward(*args))
    packed: bool = False  # passed as one dict, keyed by `arguments`, to a forward(batch: dict)
    time_major: bool = False  # ids and token types as (T, B), the mask (B, T): nn.Transformer's

    @property
    def given(self) -> set[str]:
        return set(self.arguments.values())


def plan(model: nn.Module, spec: str, types: bool = True) -> Plan:
    """Which parameter of the user's forward takes each input: by name (the spellings above, or
    the words of a name), then by elimination: one required parameter left after the ids and
    the mask is the token types (after the ids and the token types, the mask). An optional
    parameter is left at its default unless bertconv must give it (_needed; `types`: has the
    model a table of token types?). Raises, showing the signature, where a required parameter
    is left that bertconv cannot give."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return Plan({"input_ids": "input_ids"}, keywords=False)
    params = [p for p in signature.parameters.values() if p.name != "self"]
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if named and _takes_a_dict(named[0]) and all(p.default is not p.empty for p in named[1:]):
        return Plan({k: k for k in ("input_ids", "attention_mask", "token_type_ids")}, packed=True)
    found = _by_name([p.name for p in named])
    if "input_ids" not in found.values():
        first = next((p.name for p in named if p.name not in found), None)
        if first is None:
            if any(p.kind == p.VAR_KEYWORD for p in params):  # forward(**kwargs): by our names
                return Plan({k: k for k in ("input_ids", "attention_mask", "token_type_ids")})
            return Plan({"input_ids": "input_ids"}, keywords=False)
        found[first] = "input_ids"
    required = [p.name for p in named if p.default is p.empty and p.name not in found]
    left = [k for k in ("token_type_ids", "attention_mask") if k not in found.values()]
    if len(required) == 1 and left and not words(required[0]) & SAYS_OTHERWISE:
        found[required.pop()] = left[0]
    if required:
        raise UsageError(
            f"{said(spec)}: forward{signature} needs {', '.join(map(repr, required))}, which "
            "bertconv cannot give: it passes the token ids, the attention mask (or lengths) and "
            "the token types. Give the parameter a default, or give --model a function that "
            "wraps your model"
        )
    order = {p.name: i for i, p in enumerate(named)}
    defaults = {p.name for p in named if p.default is not p.empty}
    found = {k: v for k, v in found.items() if k not in defaults or _needed(v, found, types)}
    arguments = dict(sorted(found.items(), key=lambda kv: order[kv[0]]))
    allowed = next((SAID_MASKS[a] for a in arguments if a in SAID_MASKS), Plan.said)
    form = next(f for f, (marks, _) in MASKS.items() if marks in allowed)
    return Plan(arguments, form, allowed, optional=frozenset(defaults & set(arguments)))


def _needed(given: str, found: dict[str, str], types: bool) -> bool:
    """Must bertconv give an optional parameter taking `given`? The ids and the mask, the token
    types where the model has a table of them, lengths where it takes no mask, a masked-LM
    head's positions; never position ids (its default numbers them as it means to)."""
    if given == "token_type_ids":
        return types
    if given == "lengths":
        return "attention_mask" not in found.values()
    return given != "position_ids"


def _takes_a_dict(parameter: inspect.Parameter) -> bool:
    """A parameter annotated as a dict of the inputs (`batch: dict`, `Dict[str, Tensor]`,
    `Mapping[...]`, or the same as a string), as training code that hands its model a collated
    batch writes it: given transformers' names as keys."""
    annotation = parameter.annotation
    if annotation is parameter.empty:
        return False
    origin = typing.get_origin(annotation) or annotation
    if isinstance(origin, type):
        return issubclass(origin, Mapping)
    spelt = str(annotation).removeprefix("typing.").split("[")[0]
    return spelt in ("dict", "Dict", "Mapping", "MutableMapping")


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
    if words & {"mask", "masked", "mlm", "lm"} and words & {"pos", "position", "positions"}:
        return "masked_positions"  # masked_pos, mlm_positions: a masked-LM head's, given all
    if words & {"pos", "position", "positions"} and words & {"ids", "id", "idx", "index"}:
        return "position_ids"
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
    positions_after_pad: bool = False  # RoBERTa's: counted over the real tokens alone

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
            "attention_mask": lambda: MASKS[self.plan.mask][1](mask),
            "token_type_ids": lambda: batch["token_type_ids"],
            "lengths": lambda: mask.sum(-1),
            "masked_positions": lambda: torch.arange(mask.shape[-1]).repeat(len(mask), 1),
            "position_ids": lambda: self.positions(mask),
        }
        # each call its own copy: a forward may write into what it is given (its mask)
        args = {theirs: values[ours]().clone() for theirs, ours in self.plan.arguments.items()}
        if self.plan.time_major:  # nn.MultiheadAttention's (T, B); its key_padding_mask (B, T)
            along = {"input_ids", "token_type_ids", "position_ids"}
            args = {k: v.T.contiguous() if self.plan.arguments[k] in along else v
                    for k, v in args.items()}  # fmt: skip
        if self.plan.packed:
            return self.model(args)
        return self.model(**args) if self.plan.keywords else self.model(*args.values())

    def positions(self, mask: torch.Tensor) -> torch.Tensor:
        """The position of each token, as the model holds the architecture: its place in the
        row (BERT's, from 0), or RoBERTa's own ids into every row of its table (the real tokens
        from the pad id + 1, the padding at the pad id)."""
        if self.positions_after_pad:
            real = mask.long()
            return real.cumsum(-1) * real + self.pad_token_id
        return torch.arange(mask.shape[-1]).expand(mask.shape).contiguous()

    def varies(self, run: Run) -> bool:
        """Does a second forward of the run's batch give other outputs (a dropout left on)?"""
        with torch.inference_mode(), guarded(self.spec, "running its forward"):
            again = self.call(run.batch)
        pairs = zip(tensors_in(run.output), tensors_in(again), strict=False)
        return any(a.shape != b.shape or not torch.equal(a, b) for a, b in pairs)

    def run(
        self, batch: dict[str, torch.Tensor], guard: bool = True, keep=None, sums=frozenset()
    ) -> Run:
        """A traced forward on a prepared batch. The user's code raising is theirs (guard), or,
        where a candidate table may break it, the caller's to handle. `keep`: the weights
        whose calls are read after it (Trace), where not every call is; `sums`: those whose
        call's residual sum is."""
        trace = Trace(self.model, dict(batch), keep, sums)
        user = guarded(self.spec, "running its forward") if guard else users_code()
        with torch.inference_mode(), trace, user:
            output = self.call(batch)
        return Run(trace, output, batch)


def load(spec: str, config_dict: dict, config: BertConfig, batch: dict) -> Harness:
    """The user's model `spec`, built from config.json, with the harness that calls it, its mask
    in the form its forward takes (`masked`); lazy modules (`nn.LazyLinear`) shaped by that
    first forward, on `batch`."""
    # torch.jit.script giving back what it is given, as under PYTORCH_JIT=0: a scripted function
    # (a fused bias and GELU) runs as Python, in the trace's sight, not as TorchScript out of it.
    with patch.object(torch.jit._state._enabled, "enabled", False):
        model = construct(import_factory(spec), spec, config_object(config_dict, config))
    after_pad = config.positions_after_pad
    types = _has_types(model, config)
    harness = Harness(
        model, spec, plan(model, spec, types), config.pad_token_id, config.vocab_size, after_pad
    )
    harness.plan = _called(harness, batch)
    return harness


def _has_types(model: nn.Module, config: BertConfig) -> bool:
    """Does the model hold a table of the config's token types (as they say: rows by columns,
    or its transpose)?"""
    shape, lazy = (config.type_vocab_size, config.hidden_size), nn.parameter.UninitializedParameter
    held = [p for p in model.parameters() if not isinstance(p, lazy)]
    return any(tuple(t.shape) in (shape, shape[::-1]) for t in held)


def _called(harness: Harness, batch: dict) -> Plan:
    """The plan its forward runs with: as planned, its mask in the form it takes (`masked`);
    where every call raises, the same without each optional argument bertconv chose in turn (a
    forward asserting `positions is None`), before the first error is reported as the model's."""
    first = harness.plan
    lazy = any(
        isinstance(p, nn.parameter.UninitializedParameter) for p in harness.model.parameters()
    )
    chosen = [a for a, v in first.arguments.items() if a in first.optional and v != "input_ids"]
    fewer = [
        replace(first, arguments={k: v for k, v in first.arguments.items() if k != a})
        for a in chosen
    ]
    if not ("attention_mask" in first.given or lazy or fewer):
        return first  # nothing to choose: its forward runs later, where its errors are said
    error = None
    for plan in [first, *fewer]:
        harness.plan = plan
        try:
            if "attention_mask" in plan.given or lazy:
                return masked(harness, batch)
            with torch.no_grad(), guarded(harness.spec, "running its forward"):
                harness.call(harness.prepare(batch))
            return plan
        except UserCodeError as e:
            error = error or e
    harness.plan = first
    raise error


def masked(harness: Harness, batch: dict) -> Plan:
    """The plan with the mask in the form (MASKS) its forward takes: the first of those its
    name allows (SAID_MASKS) it runs with, finite, where other ids at the padded places change
    nothing at the tokens: chosen by what it computes, not by its name alone; each tried with
    the ids batch-major (B, T), then time-major (T, B); then no mask (the model makes it from
    the pad id). Where each form it runs with leaks, the first of them (the verdict says how);
    where every form raises, the first error is the model's."""
    first, errors, leaky = harness.plan, [], []
    allowed = [f for f, (marks, _) in MASKS.items() if marks in first.said]
    forms = allowed if "attention_mask" in first.given else []
    unmasked = {k: v for k, v in first.arguments.items() if v != "attention_mask"}
    plans = [replace(first, mask=f) for f in forms]
    # time-major (T, B) ids, tried before no mask at all: that runs either way round
    plans += [replace(p, time_major=True) for p in plans] + [replace(first, arguments=unmasked)]
    for i, plan in enumerate(plans):
        harness.plan = plan
        outputs = _attempt(harness, batch, errors)
        if outputs is not None and all(t.isfinite().all() for t in outputs):
            if i == len(plans) - 1 or not _leaks(harness, batch, outputs):
                return plan
            leaky.append(plan)
    harness.plan = (leaky or [first])[0]
    if len(errors) < len(plans):
        return harness.plan
    with guarded(harness.spec, "running its forward"):
        raise errors[0]


def _attempt(harness: Harness, batch: dict, errors: list) -> list[torch.Tensor] | None:
    """The forward's floating outputs on `batch`; None where it raises (the error in `errors`)."""
    try:
        with torch.no_grad(), guarded(harness.spec, "running its forward"):
            output = harness.call(harness.prepare(batch))
    except UserCodeError as e:
        errors.append(e.__context__ or e)
        return None
    return [t for t in tensors_in(output) if t.is_floating_point()]


def _leaks(harness: Harness, batch: dict, outputs: list[torch.Tensor]) -> bool:
    """Do other ids at the padded places change the outputs at the tokens?"""
    real, ids = batch["attention_mask"].bool(), batch["input_ids"]
    ids = torch.where(real, ids, (ids + 1) % harness.vocab_size)
    other = _attempt(harness, {**batch, "input_ids": ids}, [])
    if other is None or [t.shape for t in other] != [t.shape for t in outputs]:
        return True
    at = [t[real] if t.shape[:2] == real.shape else t for t in outputs + other]
    return not all(map(partial(torch.allclose, atol=1e-5), at[: len(other)], at[len(other) :]))
