"""A from-scratch MPNet, written as people write it from the paper: BERT's layers (q, k, v, o
projections, post-LN), positions counted from 2 past the padding, and one relative attention
bias shared by every layer, from T5's buckets of the query-key distance."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def bucket(distance, buckets=32, farthest=128):
    half = buckets // 2
    exact = half // 2
    n = distance.abs()
    far = (
        exact + (torch.log(n.float() / exact) / math.log(farthest / exact) * (half - exact)).long()
    )
    return (distance > 0).long() * half + torch.where(n < exact, n, far.clamp(max=half - 1))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.heads = c.num_attention_heads
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.norm1 = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.up = nn.Linear(h, c.intermediate_size)
        self.down = nn.Linear(c.intermediate_size, h)
        self.norm2 = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x, mask, bias):
        B, T, H = x.shape
        split = lambda t: t.view(B, T, self.heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(H // self.heads) + bias
        scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)
        x = self.norm1(x + self.o(a))
        return self.norm2(x + self.down(F.gelu(self.up(x))))


class MPNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.words = nn.Embedding(config.vocab_size, h)
        self.positions = nn.Embedding(config.max_position_embeddings, h)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.relative_bias = nn.Embedding(
            config.relative_attention_num_buckets, config.num_attention_heads
        )

    def forward(self, input_ids, attention_mask):
        real = input_ids.ne(1).long()
        x = self.norm(self.words(input_ids) + self.positions(real.cumsum(1) * real + 1))
        T = input_ids.shape[1]
        place = torch.arange(T, device=input_ids.device)
        bias = self.relative_bias(bucket(place[None, :] - place[:, None])).permute(2, 0, 1)[None]
        for block in self.blocks:
            x = block(x, attention_mask, bias)
        return x
