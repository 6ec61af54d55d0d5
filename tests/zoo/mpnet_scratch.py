"""A from-scratch MPNet, written as people write it from the paper: BERT's layers (q, k, v, o
projections, post-LN), positions counted from 2 past the padding, and one relative attention
bias shared by every layer, from T5's buckets of the query-key distance. Then its one-bug
variants, each a mistake ports of MPNet make: each must FAIL, the bias named."""

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

    buckets, farthest = 32, 128

    def distances(self, T, device):
        place = torch.arange(T, device=device)
        return place[None, :] - place[:, None]  # key - query

    def forward(self, input_ids, attention_mask):
        real = input_ids.ne(1).long()
        x = self.norm(self.words(input_ids) + self.positions(real.cumsum(1) * real + 1))
        relative = bucket(self.distances(input_ids.shape[1], input_ids.device), self.buckets,
                          self.farthest)  # fmt: skip
        bias = self.relative_bias(relative).permute(2, 0, 1)[None]
        for i, block in enumerate(self.blocks):
            x = block(x, attention_mask, self.layer_bias(bias, i))
        return x

    def layer_bias(self, bias, i):
        return bias


class HalfTheBuckets(MPNet):
    """16 buckets where the table has the config's 32."""

    buckets = 16


class FartherReach(MPNet):
    """Logarithmic buckets up to 256, not 128."""

    farthest = 256


class NearerReach(MPNet):
    farthest = 64


class BiasInFirstLayerOnly(MPNet):
    def layer_bias(self, bias, i):
        return bias if i == 0 else 0


class NoBias(MPNet):
    """The table is there (it loads) but never added."""

    def layer_bias(self, bias, i):
        return 0


class QueryMinusKey(MPNet):
    """The distance the other way round: the halves of the buckets exchanged."""

    def distances(self, T, device):
        return -super().distances(T, device)


class BiasSubtracted(MPNet):
    def layer_bias(self, bias, i):
        return -bias


class WithoutTheTable(MPNet):
    """RoBERTa's arithmetic under MPNet's names: no relative bias at all."""

    def __init__(self, config):
        super().__init__(config)
        del self.relative_bias

    def forward(self, input_ids, attention_mask):
        real = input_ids.ne(1).long()
        x = self.norm(self.words(input_ids) + self.positions(real.cumsum(1) * real + 1))
        for block in self.blocks:
            x = block(x, attention_mask, 0)
        return x


class ItsOwnBucketCount(MPNet):
    """64 buckets, the table sized for them: a checkpoint's 32 rows do not load into it."""

    buckets = 64

    def __init__(self, config):
        super().__init__(config)
        self.relative_bias = nn.Embedding(self.buckets, config.num_attention_heads)


class MaskedLM(nn.Module):
    """The MPNet above with its masked-LM head: a projection, GELU, LayerNorm, then the word
    embeddings' transpose and a bias of its own."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.mpnet = MPNet(config)
        self.transform = nn.Linear(h, h)
        self.transform_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.vocab_bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, input_ids, attention_mask):
        x = self.mpnet(input_ids, attention_mask)
        x = self.transform_norm(F.gelu(self.transform(x)))
        return x @ self.mpnet.words.weight.T + self.vocab_bias


class ConfigsBucketCount(MPNet):
    """Buckets as many as config.json's relative_attention_num_buckets: transformers' MPNet
    always makes 32, whatever the table's size."""

    def __init__(self, config):
        super().__init__(config)
        self.buckets = config.relative_attention_num_buckets
