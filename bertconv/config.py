"""BertConfig: the model's hyper-parameters, read from transformers' config.json. Torch-free, so
that commands which only rename tensors never import torch."""

import json
from dataclasses import dataclass, fields
from pathlib import Path

from .errors import CheckpointError, NotFoundError

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")

# config.json fields that would change what the model computes, with the only value implemented.
# Fields not named here and not in BertConfig (architectures, dtype, use_cache, ...) do not change
# the encoder's arithmetic, so they are left out rather than refused.
ONLY_VALUE = {
    "model_type": "bert",
    "position_embedding_type": "absolute",
    "is_decoder": False,
    "add_cross_attention": False,
}


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

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> "BertConfig":
        """Keep the fields the model uses; refuse any that ask for what it does not implement."""
        problems = [
            f"{key}={d[key]!r} is not supported (only {want!r})"
            for key, want in ONLY_VALUE.items()
            if key in d and d[key] != want
        ]
        if d.get("hidden_act", "gelu") not in ACTIVATIONS:
            problems.append(
                f"hidden_act={d['hidden_act']!r} is not supported (one of {ACTIVATIONS})"
            )
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in d.items() if k in known and v is not None})
        if config.hidden_size % config.num_attention_heads:
            problems.append(
                f"hidden_size={config.hidden_size} is not a multiple of "
                f"num_attention_heads={config.num_attention_heads}"
            )
        if problems:
            raise CheckpointError(
                f"{source}: this model is not one bertconv's BERT can compute: "
                + "; ".join(problems)
                + ". bertconv implements the original BERT encoder only."
            )
        return config

    @classmethod
    def from_json_file(cls, path: Path) -> "BertConfig":
        try:
            d = json.loads(Path(path).read_text())
        except FileNotFoundError as e:
            raise NotFoundError(f"{path}: no config.json; a checkpoint directory needs one") from e
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{path}: not valid JSON ({e}); is the download complete?") from e
        return cls.from_dict(d, source=str(path))
