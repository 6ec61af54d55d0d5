"""BERT in the style of the annotated-transformer tutorials: a LayerNorm written by hand with
`a_2` and `b_2`, query, key and value fused in one raw (in, 3 x out) parameter `Wqkv`, and an
activation inside a `LinearActivation` module, whose pooler applies its own tanh."""

import math

import torch
import torch.nn.functional as F
from torch import nn

ACT = {"gelu": F.gelu, "tanh": torch.tanh, "relu": F.relu}


class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-12):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return self.a_2 * (x - mean) / torch.sqrt(var + self.eps) + self.b_2


class LinearActivation(nn.Module):
    """A projection and its activation in one module."""

    def __init__(self, in_features, out_features, act="gelu"):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.02)
        self.bias = nn.Parameter(torch.zeros(out_features))
        self.act_fn = ACT[act]

    def forward(self, x):
        return self.act_fn(F.linear(x, self.weight, self.bias))


class Attention(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.Wqkv = nn.Parameter(torch.randn(h, 3 * h) * 0.02)
        self.bqkv = nn.Parameter(torch.zeros(3 * h))
        self.proj = nn.Linear(h, h)

    def forward(self, x, mask):
        B, T, H = x.shape
        qkv = (x @ self.Wqkv + self.bqkv).view(B, T, 3, self.heads, H // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(H // self.heads)
        scores = scores.masked_fill(mask[:, None, None, :] == 0, -1e9)
        out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, H)
        return self.proj(out)


class Sublayer(nn.Module):
    def __init__(self, h, eps):
        super().__init__()
        self.norm = LayerNorm(h, eps)

    def forward(self, x, y):
        return self.norm(x + y)


class EncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.attention = Attention(h, c.num_attention_heads)
        self.sublayer = nn.ModuleList([Sublayer(h, c.layer_norm_eps) for _ in range(2)])
        self.ff_in = LinearActivation(h, c.intermediate_size, "gelu")
        self.ff_out = nn.Linear(c.intermediate_size, h)

    def forward(self, x, mask):
        x = self.sublayer[0](x, self.attention(x, mask))
        return self.sublayer[1](x, self.ff_out(self.ff_in(x)))


class AnnotatedBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.tok = nn.Embedding(config.vocab_size, h)
        self.seg = nn.Embedding(config.type_vocab_size, h)
        self.pos = nn.Embedding(config.max_position_embeddings, h)
        self.norm = LayerNorm(h, config.layer_norm_eps)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_hidden_layers))
        self.pooler = LinearActivation(h, h, "tanh")

    def forward(self, input_ids, token_type_ids, attention_mask):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.norm(self.tok(input_ids) + self.seg(token_type_ids) + self.pos(positions))
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x, self.pooler(x[:, 0])
