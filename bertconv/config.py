"""BertConfig: the model's hyper-parameters and what its architecture computes, in BERT's
config.json fields (catalog.read_config reads a config.json of any type into them). Torch-free,
so that commands which only rename tensors never import torch."""

import math
from dataclasses import dataclass, fields

from .errors import CheckpointError

# hidden_act's names, each as the torch.nn.functional function that computes it and its keyword
# arguments (data, so that this module stays torch-free; model.activation makes the function).
ACTIVATIONS = {
    "gelu": ("gelu", {}),  # the exact, erf-based GELU of the original release
    "gelu_new": ("gelu", {"approximate": "tanh"}),
    "gelu_pytorch_tanh": ("gelu", {"approximate": "tanh"}),
    "relu": ("relu", {}),
    "silu": ("silu", {}),  # NomicBERT's SwiGLU gate
}

# config.json fields that would change what the model computes, with the only value implemented.
# Fields not named here and not in BertConfig (architectures, dtype, use_cache, ...) do not change
# the encoder's arithmetic, so they are left out rather than refused.
ONLY_VALUE = {
    "is_decoder": False,
    "add_cross_attention": False,
}
POSITIONS = ("absolute", "relative_key", "relative_key_query")
# Model types of BERT's kin whose arithmetic is not BERT's, each with why (config.json's
# model_type, as transformers writes it).
NOT_BERT = {
    "albert": "its layers share one set of weights, and its embeddings are projected up",
    "deberta": "its attention is disentangled (content and position apart)",
    "deberta-v2": "its attention is disentangled (content and position apart)",
    "xlnet": "a permutation language model with two attention streams",
    "longformer": "sliding-window attention with global tokens",
    "funnel": "it pools the sequence between its blocks",
}

# What BertConfig carries from the architecture's catalog, never from config.json: the modern
# encoders' (ModernBERT's, NomicBERT's) arithmetic.
MODERN_FACTS = ("rotary_positions", "gated", "norm_first", "linear_bias", "norm_bias")
# config.json's fields of rotary positions and local windows, read for a type with rotary
# positions alone (BERT's config class has none of them: a BERT's file naming one is not read).
ROTARY_FIELDS = (
    "rotary_theta",
    "local_rotary_theta",
    "local_attention",
    "global_attn_every_n_layers",
)
# The rope types bertconv computes: the plain rotation (transformers' "default"); the scaled
# ones (linear, dynamic, yarn, ...) are refused when read.
ROPE_TYPES = ("default",)
LAYER_TYPES = ("full_attention", "sliding_attention")
POOLINGS = ("cls", "mean")  # ModernBERT's classifier_pooling
CARRIED = (
    "model_type",
    "token_types",
    "positions_after_pad",
    "classification_activation",
    "relative_bias",
    *MODERN_FACTS,
)

# The size fields, each at least 1 and at most a bound far above any BERT's, so that a hostile
# config.json cannot have bertconv build a billion layers' worth of names.
SIZES = {
    "vocab_size": 1 << 24,
    "hidden_size": 1 << 16,
    "num_hidden_layers": 1 << 10,
    "num_attention_heads": 1 << 12,
    "intermediate_size": 1 << 18,
    "max_position_embeddings": 1 << 20,
    "type_vocab_size": 1 << 16,
    "num_labels": 1 << 20,
    "relative_attention_num_buckets": 1 << 12,
    "local_attention": 1 << 20,
    "global_attn_every_n_layers": 1 << 10,
}
PROBABILITIES = ("hidden_dropout_prob", "attention_probs_dropout_prob")
# MPNet's buckets of query-key distance: transformers computes 32 whatever its table's size
RELATIVE_BUCKETS = 32
# Sizes that may be 0: none (a BERT's relative attention table, a window, as BertConfig holds them)
NONE_AT_ZERO = ("relative_attention_num_buckets", "local_attention")


@dataclass
class BertConfig:
    """The hyper-parameters, under the field names of transformers' config.json."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0  # kept for the tokenizer: BERT's embeddings treat it as any other id
    num_labels: int = 2  # transformers' default; config.json gives it as id2label
    classifier_dropout: float | None = None  # the task heads' dropout; hidden_dropout_prob if None
    position_embedding_type: str = "absolute"  # or relative_key(_query): see model.SelfAttention
    # MPNet's: the rows of its shared relative attention bias (0: none, BERT's)
    relative_attention_num_buckets: int = 0
    # What the architecture computes, from its catalog (mappings/architectures/MODEL_TYPE.toml),
    # never from the file: its type (Google's bert_config.json names none: BERT), whether it
    # has token types, whether positions count from pad_token_id + 1 over the real tokens
    # (RoBERTa's) or from 0, the activation of a dense + activation + out_proj classifier,
    # whether every layer adds a shared relative attention bias (MPNet's).
    model_type: str = "bert"
    token_types: bool = True
    positions_after_pad: bool = False
    classification_activation: str = "tanh"
    relative_bias: bool = False  # MPNet's: a relative attention bias shared by every layer
    # ModernBERT's sequence classification: the first token's state, or the mean of the real
    # tokens' (config.json's classifier_pooling)
    classifier_pooling: str = "cls"
    # The modern encoders' arithmetic (ModernBERT's, NomicBERT's), BERT's by default. From
    # config.json (ROTARY_FIELDS, read as transformers reads them: catalog.py): rotary positions
    # of this base in place of a position table, another base in the local layers (0: the same),
    # the local layers' window of tokens (0: none; a token sees local_attention // 2 either
    # way) and which layers are global (every n-th, the first among them). From the catalog
    # (MODERN_FACTS): whether positions are rotary; a feed-forward gated (act(gate x) * up x);
    # LayerNorms before each sublayer (none before the first layer's attention: the
    # embeddings' norm is it) with a final one after the last layer; biases in the linear
    # layers and in the LayerNorms, or none.
    rotary_theta: float = 0.0
    local_rotary_theta: float = 0.0
    local_attention: int = 0
    global_attn_every_n_layers: int = 1
    rotary_positions: bool = False
    gated: bool = False
    norm_first: bool = False
    linear_bias: bool = True
    norm_bias: bool = True

    @property
    def relative(self) -> bool:
        return self.position_embedding_type != "absolute"

    @property
    def rotary(self) -> bool:
        return self.rotary_positions

    def is_local(self, layer: int) -> bool:
        """Whether layer `layer` attends within the window: all but every n-th (transformers'
        layer_types, derived)."""
        return self.local_attention > 0 and layer % self.global_attn_every_n_layers != 0

    @property
    def reach(self) -> int:
        """How far a local layer's token sees, either way (transformers' local_attention // 2)."""
        return self.local_attention // 2

    @property
    def attention_head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def reserved_positions(self) -> int:
        """Rows of the position table no token reads: RoBERTa's, up to the pad id."""
        return self.pad_token_id + 1 if self.positions_after_pad else 0

    @property
    def relative_distances(self) -> int:
        """How far apart two tokens can be, either way: -(max - 1) .. max - 1."""
        return 2 * self.max_position_embeddings - 1

    @classmethod
    def from_dict(cls, d: dict, source: str = "config", problems=(), **facts) -> "BertConfig":
        """A config.json in BERT's field names (catalog.read_config puts any type's there), the
        architecture's `facts` (CARRIED) beside it: keep the fields the model uses, each checked
        by type and range; refuse any that ask for what the model does not implement, and
        `problems` found already."""
        if not isinstance(d, dict):
            raise CheckpointError(f"{source}: holds a {type(d).__name__}, not a JSON object")
        kind = facts.get("model_type", "bert")
        if d.get("model_type", kind) != kind:
            raise CheckpointError(
                f"{source}: model_type={d['model_type']!r}: read it as its type says, with "
                "bertconv.catalog.read_config"
            )
        problems = list(problems) + [
            f"{key}={d[key]!r} is not supported (only {want!r})"
            for key, want in ONLY_VALUE.items()
            if key in d and d[key] != want
        ]
        size = d.get("embedding_size", d.get("hidden_size"))
        if size != d.get("hidden_size"):  # ELECTRA's small models and generators
            problems.append(
                f"embedding_size={size!r} differs from hidden_size={d.get('hidden_size')!r}: "
                "the embeddings are projected up (embeddings_project), which BERT does not do"
            )
        buckets = d.get("relative_attention_num_buckets")
        if facts.get("relative_bias") and _is_int(buckets) and buckets < RELATIVE_BUCKETS:
            problems.append(
                f"relative_attention_num_buckets={buckets!r}: MPNet looks up {RELATIVE_BUCKETS} "
                "buckets of query-key distance whatever this says (transformers' as bertconv's), "
                "and a table of fewer rows has none for the farthest"
            )
        known = {f.name for f in fields(cls)} - set(CARRIED)
        if facts.get("rotary_positions"):
            d, found = rotary_read(d)
            problems += found
        else:  # fields of a modern encoder's config class, which BERT's does not read
            known -= {*ROTARY_FIELDS, "classifier_pooling"}
        if facts.get("positions_after_pad") and d.get("pad_token_id", 0) is None:
            problems.append("pad_token_id=None: positions are counted from pad_token_id + 1")
        # pad_token_id and classifier_dropout may be null: their defaults then serve.
        given = {k: v for k, v in d.items() if k in known and (v is not None or k in SIZES)}
        labels = d.get("id2label")
        if labels is not None:
            if isinstance(labels, dict) and labels:
                given["num_labels"] = len(labels)
            else:
                problems.append(f"id2label={labels!r} is not an object of labels")
        problems += [p for k, v in given.items() if (p := _field_problem(k, v))]
        if not problems:
            config = cls(**given, **facts)
            problems += config._consistency_problems()
        if problems:
            raise CheckpointError(
                f"{source}: this model is not one bertconv's BERT can compute: "
                + "; ".join(problems)
                + "."
            )
        return config

    def _consistency_problems(self) -> list[str]:
        problems = []
        if self.hidden_size % self.num_attention_heads:
            problems.append(
                f"hidden_size={self.hidden_size} is not a multiple of "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.pad_token_id >= self.vocab_size:
            problems.append(
                f"pad_token_id={self.pad_token_id} is not below vocab_size={self.vocab_size}"
            )
        if self.rotary and not self.rotary_theta > 0:
            problems.append(f"the rotary base is {self.rotary_theta!r}: a positive number")
        if self.rotary and not problems and self.attention_head_size % 2:
            problems.append(
                f"the head size (hidden_size / num_attention_heads = {self.attention_head_size}) "
                "is odd: rotary positions turn a head's features in pairs"
            )
        if self.reserved_positions >= self.max_position_embeddings:
            problems.append(
                f"pad_token_id={self.pad_token_id} leaves none of "
                f"max_position_embeddings={self.max_position_embeddings} positions: the first "
                f"token reads position pad_token_id + 1 ({self.pad_token_id + 1})"
            )
        return problems


def rotary_read(d: dict) -> tuple[dict, list[str]]:
    """A rotary type's config.json as transformers' config class reads it: the bases from
    rope_parameters (one for every layer, or one per layer type: full_attention, sliding_attention)
    over the older fields (already in BertConfig's names: catalog.py); the layer types, where
    given, held to a global layer every n-th (derived so where absent, as transformers derives
    them); every token id within the vocabulary; a scaled rope type, a window of 0 and a
    partial rotation refused."""
    out, problems = dict(d), []
    rope = d.get("rope_parameters")
    if rope is not None and not isinstance(rope, dict):
        problems.append(f"rope_parameters={rope!r} is not an object")
        rope = None
    scaling = d.get("rope_scaling")
    for where, params in _rope_parts(rope or {}, scaling):
        if not isinstance(params, dict):
            problems.append(f"{where}={params!r} is not an object")
            continue
        kind = params.get("rope_type", params.get("type", "default"))
        if kind not in ROPE_TYPES:
            problems.append(
                f"{where}'s rope_type={kind!r} is not computed by bertconv (only {ROPE_TYPES}: "
                "rotary positions unscaled)"
            )
        if params.get("partial_rotary_factor", 1.0) != 1.0:
            problems.append(
                f"{where}'s partial_rotary_factor={params['partial_rotary_factor']!r}: bertconv "
                "rotates every feature of a head (1.0)"
            )
    if isinstance(rope, dict):
        nested = set(rope) & set(LAYER_TYPES)
        full = rope.get("full_attention", {}) if nested else rope
        local = rope.get("sliding_attention", {}) if nested else {}
        for ours, params in (("rotary_theta", full), ("local_rotary_theta", local)):
            if isinstance(params, dict) and "rope_theta" in params:
                out[ours] = params["rope_theta"]
    for name in ("rotary_theta", "local_rotary_theta"):
        if name in out and not (_is_number(out[name]) and out[name] > 0):
            problems.append(f"the rotary base {out[name]!r} ({name}) is not a positive number")
    if out.get("local_attention") == 0:
        problems.append(
            "local_attention=0: a window of no token; give the window's width (ModernBERT's is "
            "128), or layer_types all full_attention for none"
        )
    problems += _layer_types_problems(out)
    problems += _token_id_problems(out)
    if out.get("classifier_pooling", "cls") not in POOLINGS:
        problems.append(
            f"classifier_pooling={out['classifier_pooling']!r} is not one of {POOLINGS}"
        )
    return out, problems


def _rope_parts(rope: dict, scaling) -> list[tuple[str, object]]:
    """Each set of rope parameters config.json gives, with where it is."""
    parts = [(f"rope_parameters.{t}", rope[t]) for t in LAYER_TYPES if t in rope]
    if not parts and rope:
        parts = [("rope_parameters", rope)]
    return parts + ([("rope_scaling", scaling)] if scaling is not None else [])


def _layer_types_problems(d: dict) -> list[str]:
    """layer_types, where config.json gives them, as a global layer every n-th: n is read off
    them (transformers reads them as they are; bertconv computes that pattern alone)."""
    types, layers = d.get("layer_types"), d.get("num_hidden_layers")
    if types is None or not _is_int(layers):
        return []
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(LAYER_TYPES):
        return [f"layer_types={types!r} is not a list of {layers} of {' or '.join(LAYER_TYPES)}"]
    every = next((n for n in range(1, layers + 1) if types == _layer_types(layers, n)), None)
    if every is None:
        return [
            f"layer_types={types!r}: bertconv computes a full_attention layer every n-th, the "
            "first among them, sliding_attention between"
        ]
    given = d.get("global_attn_every_n_layers", every)
    if given != every and _layer_types(layers, given) != types:
        return [f"layer_types={types!r} and global_attn_every_n_layers={given!r} disagree"]
    if "sliding_attention" not in types:  # every layer global: no window, whatever its width
        d["local_attention"] = 0
    d["global_attn_every_n_layers"] = every
    return []


def _layer_types(layers: int, every) -> list[str] | None:
    if not _is_int(every) or every < 1:
        return None
    return ["sliding_attention" if i % every else "full_attention" for i in range(layers)]


def _token_id_problems(d: dict) -> list[str]:
    """Token ids config.json names, each within the vocabulary (transformers warns; an id
    beyond it is a tokenizer of another model)."""
    vocab = d.get("vocab_size")
    if not _is_int(vocab):
        return []

    def within(value) -> bool:  # an id, or a list of them (eos_token_id may be several)
        ids = value if isinstance(value, list) and value else [value]
        return all(_is_int(i) and 0 <= i < vocab for i in ids)

    return [
        f"{name}={value!r} is not a token id within vocab_size={vocab}"
        for name, value in d.items()
        if name.endswith("_token_id") and value is not None and not within(value)
    ]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _field_problem(name: str, value) -> str | None:
    """What is wrong with one config.json field, if anything."""
    if name in SIZES:
        if not _is_int(value):
            return f"{name}={value!r} is not an integer"
        least = 0 if name in NONE_AT_ZERO else 1
        if not least <= value <= SIZES[name]:
            return f"{name}={value!r} is outside {least}..{SIZES[name]}"
    elif name == "pad_token_id":
        if not _is_int(value) or value < 0:
            return f"pad_token_id={value!r} is not a token id (an integer >= 0)"
    elif name == "position_embedding_type":
        if value not in POSITIONS:
            return f"position_embedding_type={value!r} is not supported (one of {POSITIONS})"
    elif name == "hidden_act":
        if not isinstance(value, str) or value not in ACTIVATIONS:
            return f"hidden_act={value!r} is not supported (one of {tuple(ACTIVATIONS)})"
    elif name in PROBABILITIES or name == "classifier_dropout":
        if not _is_number(value) or not 0 <= value <= 1:
            return f"{name}={value!r} is not a probability (a number in 0..1)"
    elif name in ("rotary_theta", "local_rotary_theta"):
        if not _is_number(value) or value < 0:
            return f"{name}={value!r} is not a rotary base (a number >= 0)"
    elif name == "layer_norm_eps" and (not _is_number(value) or value <= 0):
        return f"layer_norm_eps={value!r} is not a positive number"
    return None
