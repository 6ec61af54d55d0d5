"""Fine-tuning BERTs as people write them: a sentence classifier that returns only its logits (the
pooled output is read from the trace), a span-extraction (SQuAD) model returning start and end
logits, and a tagger, each on a shared encoder."""

import torch
import torch.nn.functional as F
from torch import nn


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.heads, self.eps = c.num_attention_heads, c.layer_norm_eps
        self.word = nn.Embedding(c.vocab_size, h)
        self.position = nn.Embedding(c.max_position_embeddings, h)
        self.segment = nn.Embedding(c.type_vocab_size, h)
        self.norm = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.qkv = nn.ModuleList(nn.Linear(h, 3 * h) for _ in range(c.num_hidden_layers))
        self.out = nn.ModuleList(nn.Linear(h, h) for _ in range(c.num_hidden_layers))
        self.norm1 = nn.ModuleList(nn.LayerNorm(h, eps=c.layer_norm_eps) for _ in self.out)
        self.up = nn.ModuleList(nn.Linear(h, c.intermediate_size) for _ in self.out)
        self.down = nn.ModuleList(nn.Linear(c.intermediate_size, h) for _ in self.out)
        self.norm2 = nn.ModuleList(nn.LayerNorm(h, eps=c.layer_norm_eps) for _ in self.out)

    def forward(self, ids, mask, segments):
        B, T = ids.shape
        x = self.word(ids) + self.segment(segments) + self.position(torch.arange(T))[None]
        x = self.norm(x)
        keep = mask.bool()[:, None, None, :]
        for i in range(len(self.out)):
            q, k, v = self.qkv[i](x).split(x.shape[-1], dim=-1)
            q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            x = self.norm1[i](x + self.out[i](a.transpose(1, 2).reshape(B, T, -1)))
            x = self.norm2[i](x + self.down[i](F.gelu(self.up[i](x))))
        return x


class SentenceClassifier(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = Encoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.bert(input_ids, attention_mask, token_type_ids)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(self.dropout(pooled))


class SpanExtractor(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = Encoder(config)
        self.span = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids, attention_mask, token_type_ids):
        logits = self.span(self.bert(input_ids, attention_mask, token_type_ids))
        start, end = logits.split(1, dim=-1)
        return start.squeeze(-1), end.squeeze(-1)


class Tagger(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = Encoder(config)
        self.tags = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return self.tags(self.bert(input_ids, attention_mask, token_type_ids))
