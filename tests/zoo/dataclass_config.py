"""BERT with a config dataclass of its own under `from __future__ import annotations` (the
dataclass looks the module up in sys.modules), weight initialisation that reads
`config.initializer_range`, a helper imported from a neighbouring file, a MLM head whose decoder
is tied to the word embeddings, and NSP. Its forward returns the two heads' logits only."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from helpers import gelu
from torch import nn


@dataclass
class BertSettings:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    initializer_range: float


def make(config) -> nn.Module:
    fields = BertSettings.__dataclass_fields__
    return PretrainingBert(BertSettings(**{k: config[k] for k in fields}))


class Layer(nn.Module):
    def __init__(self, s: BertSettings):
        super().__init__()
        h = s.hidden_size
        self.heads = s.num_attention_heads
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attn_out = nn.Linear(h, h)
        self.attn_norm = nn.LayerNorm(h, eps=s.layer_norm_eps)
        self.ffn_in = nn.Linear(h, s.intermediate_size)
        self.ffn_out = nn.Linear(s.intermediate_size, h)
        self.ffn_norm = nn.LayerNorm(h, eps=s.layer_norm_eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        B, T, H = x.shape
        d = H // self.heads
        k = self.key(x).view(B, T, self.heads, d).transpose(1, 2)
        q = self.query(x).view(B, T, self.heads, d).transpose(1, 2)
        v = self.value(x).view(B, T, self.heads, d).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d)) + bias
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, H)
        x = self.attn_norm(x + self.attn_out(y))
        return self.ffn_norm(x + self.ffn_out(gelu(self.ffn_in(x))))


class PretrainingBert(nn.Module):
    def __init__(self, s: BertSettings):
        super().__init__()
        h = s.hidden_size
        self.settings = s
        self.word = nn.Embedding(s.vocab_size, h)
        self.position = nn.Embedding(s.max_position_embeddings, h)
        self.token_type = nn.Embedding(s.type_vocab_size, h)
        self.embed_norm = nn.LayerNorm(h, eps=s.layer_norm_eps)
        self.layers = nn.ModuleList(Layer(s) for _ in range(s.num_hidden_layers))
        self.pool = nn.Linear(h, h)
        self.mlm_dense = nn.Linear(h, h)
        self.mlm_norm = nn.LayerNorm(h, eps=s.layer_norm_eps)
        self.decoder = nn.Linear(h, s.vocab_size)
        self.decoder.weight = self.word.weight  # tied
        self.nsp = nn.Linear(h, 2)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear | nn.Embedding):
            module.weight.data.normal_(0.0, self.settings.initializer_range)

    def forward(self, input_ids, segment_ids, input_mask):
        T = input_ids.shape[1]
        x = self.word(input_ids) + self.token_type(segment_ids)
        x = self.embed_norm(x + self.position(torch.arange(T, device=x.device)))
        bias = (1.0 - input_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        pooled = torch.tanh(self.pool(x[:, 0]))
        mlm = self.decoder(self.mlm_norm(gelu(self.mlm_dense(x))))
        return mlm, self.nsp(pooled)
