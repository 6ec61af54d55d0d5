"""What a user writes for `--model` when their class takes a config class of its own (minbert's
does) or its sizes as arguments (BERT-pytorch's), and a model whose forward bertconv cannot call
by parameter name."""

from torch import nn

from seed_models import BertPytorchBERT, MinbertConfig, MinbertModel

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


def bert_pytorch(config) -> nn.Module:
    """Seed 004's BERT: it takes no attention mask (it makes one from the ids)."""
    return BertPytorchBERT(
        config.vocab_size,
        hidden=config.hidden_size,
        n_layers=config.num_hidden_layers,
        attn_heads=config.num_attention_heads,
    )
