"""What a user writes for `--model` when their class takes a config class of its own (minbert's
does), and a model whose forward bertconv cannot call by parameter name."""

from torch import nn

from seed_models import MinbertConfig, MinbertModel

FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "max_position_embeddings", "type_vocab_size", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "layer_norm_eps", "pad_token_id",
)  # fmt: skip


def minbert(config) -> nn.Module:
    return MinbertModel(MinbertConfig(**{k: config[k] for k in FIELDS}))


class Unusual(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)

    def forward(self, sequence, lengths):
        return self.embed(sequence)


def unusual_call(config) -> nn.Module:
    return Unusual()
