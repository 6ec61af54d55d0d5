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
    "modernbert": "rotary positions, gated feed-forwards and LayerNorms before each sublayer",
    "xlnet": "a permutation language model with two attention streams",
    "longformer": "sliding-window attention with global tokens",
    "funnel": "it pools the sequence between its blocks",
}

# What BertConfig carries from the architecture's catalog, never from config.json.
MODERN_FACTS = (
    "rotary_theta",
    "local_rotary_theta",
    "local_window",
    "global_every",
    "gated",
    "norm_first",
    "linear_bias",
    "norm_bias",
)
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
}
PROBABILITIES = ("hidden_dropout_prob", "attention_probs_dropout_prob")
# MPNet's buckets of query-key distance: transformers computes 32 whatever its table's size
RELATIVE_BUCKETS = 32
# Sizes that may be 0: none (a BERT's relative attention table, as BertConfig holds it)
NONE_AT_ZERO = ("relative_attention_num_buckets",)


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
    # The modern encoders' arithmetic (ModernBERT's, NomicBERT's), BERT's by default: rotary
    # positions of this base in place of a position table (0: none), another base in the local
    # layers (0: the same), the local layers' window (how far a token sees either way; 0: no
    # window) and which layers are global (every n-th, the first among them); a feed-forward
    # gated (act(gate x) * up x); LayerNorms before each sublayer (and none before the first
    # layer's attention: the embeddings' norm is it) with a final one after the last layer;
    # biases in the linear layers and in the LayerNorms or none.
    rotary_theta: float = 0.0
    local_rotary_theta: float = 0.0
    local_window: int = 0
    global_every: int = 1
    gated: bool = False
    norm_first: bool = False
    linear_bias: bool = True
    norm_bias: bool = True

    @property
    def relative(self) -> bool:
        return self.position_embedding_type != "absolute"

    @property
    def rotary(self) -> bool:
        return self.rotary_theta > 0

    def is_local(self, layer: int) -> bool:
        """Whether layer `layer` attends within the window (all but every global_every-th)."""
        return self.local_window > 0 and layer % self.global_every != 0

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
        if self.reserved_positions >= self.max_position_embeddings:
            problems.append(
                f"pad_token_id={self.pad_token_id} leaves none of "
                f"max_position_embeddings={self.max_position_embeddings} positions: the first "
                f"token reads position pad_token_id + 1 ({self.pad_token_id + 1})"
            )
        return problems


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
    elif name == "layer_norm_eps" and (not _is_number(value) or value <= 0):
        return f"layer_norm_eps={value!r} is not a positive number"
    return None
