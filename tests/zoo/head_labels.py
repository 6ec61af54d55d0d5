"""Fine-tuning heads as tutorials write them, their label count a number in the code rather than
config.num_labels: a two-label sentiment classifier on the pooled output (its head called
`classifier`, or `sentiment`), a three-class one whose count is a keyword argument, a
CoNLL-style tagger of nine tags and a two-tag one (`tagger`, or `tags`). Each head's width is
its label count, whatever the config says."""

import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.size = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def split(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.heads, self.size).permute(0, 2, 1, 3)  # (B, heads, T, size)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.size)
        scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        context = scores.softmax(dim=-1) @ v
        return context.permute(0, 2, 1, 3).flatten(2)


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.attention = SelfAttention(hidden, config.num_attention_heads)
        self.dense = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=eps)
        self.ff = nn.Sequential(
            nn.Linear(hidden, config.intermediate_size),
            nn.GELU(),
            nn.Linear(config.intermediate_size, hidden),
        )
        self.norm2 = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, mask):
        x = self.norm1(x + self.dense(self.attention(x, mask)))
        return self.norm2(x + self.ff(x))


class Bert(nn.Module):
    def __init__(self, config, add_pooling_layer=True):
        super().__init__()
        hidden = config.hidden_size
        self.tokens = nn.Embedding(config.vocab_size, hidden)
        self.positions = nn.Embedding(config.max_position_embeddings, hidden)
        self.segments = nn.Embedding(config.type_vocab_size, hidden)
        self.norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.pooler = nn.Linear(hidden, hidden) if add_pooling_layer else None

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.tokens(input_ids) + self.positions(positions) + self.segments(token_type_ids)
        x = self.norm(x)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x, torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None


class Sentiment(nn.Module):
    """Positive or negative: two labels, whatever config.num_labels is."""

    def __init__(self, config):
        super().__init__()
        self.bert = Bert(config)
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids, attention_mask, token_type_ids):
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids)
        return self.classifier(self.dropout(pooled))


class Polarity(Sentiment):
    """The same two labels under the head's task's name."""

    def __init__(self, config):
        super().__init__(config)
        self.sentiment = self.classifier
        del self.classifier

    def forward(self, input_ids, attention_mask, token_type_ids):
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids)
        return self.sentiment(self.dropout(pooled))


class NewsClassifier(nn.Module):
    """Three classes by default, its head named `out`."""

    def __init__(self, config, num_classes=3):
        super().__init__()
        self.bert = Bert(config)
        self.drop = nn.Dropout(p=0.3)
        self.out = nn.Linear(config.hidden_size, num_classes)

    def forward(self, input_ids, attention_mask, token_type_ids):
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids)
        return self.out(self.drop(pooled))


class NerTagger(nn.Module):
    """CoNLL-2003's nine tags (O and B-/I- of four entity types), one per token."""

    def __init__(self, config):
        super().__init__()
        self.bert = Bert(config, add_pooling_layer=False)
        self.fc = nn.Linear(config.hidden_size, 9)

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden, _ = self.bert(input_ids, attention_mask, token_type_ids)
        return self.fc(hidden)


class SpanTagger(nn.Module):
    """Two tags per token (inside a span or not): QA's width, told apart by its name."""

    def __init__(self, config):
        super().__init__()
        self.bert = Bert(config, add_pooling_layer=False)
        self.tagger = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden, _ = self.bert(input_ids, attention_mask, token_type_ids)
        return self.tagger(hidden)


class InsideOutside(SpanTagger):
    """The same two tags, the head called `tags`."""

    def __init__(self, config):
        super().__init__(config)
        self.tags = self.tagger
        del self.tagger

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden, _ = self.bert(input_ids, attention_mask, token_type_ids)
        return self.tags(hidden)
