"""MPNets in styles the other zoo files do not use: query, key and value fused in one raw
parameter applied by einsum, the bias table a raw Parameter indexed by hand, LayerNorms written
by hand, the mask and the bias given to SDPA together. FusedMPNet computes MPNet; the others
must not pass: far buckets spilling over (an index error past some length), the bias cached at
the first length seen, the bias zeroed past 128 tokens (right on anything shorter)."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def rel_bucket(rp, nb=32, maxd=128, clamp=True):
    half = nb // 2
    ret = (rp > 0).long() * half
    n = rp.abs()
    exact = half // 2
    large = (
        exact
        + (
            torch.log(n.float().clamp(min=1) / exact) / math.log(maxd / exact) * (half - exact)
        ).long()
    )
    if clamp:
        large = large.clamp(max=half - 1)
    return ret + torch.where(n < exact, n, large)


class LN(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.g = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.g * (x - mu) / torch.sqrt(var + self.eps) + self.b


class Blk(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.nh = c.num_attention_heads
        self.W_qkv = nn.Parameter(torch.randn(h, 3 * h) * 0.02)
        self.b_qkv = nn.Parameter(torch.zeros(3 * h))
        self.proj = nn.Linear(h, h)
        self.ln1 = LN(h, c.layer_norm_eps)
        self.ln2 = LN(h, c.layer_norm_eps)
        self.fc1 = nn.Linear(h, c.intermediate_size)
        self.fc2 = nn.Linear(c.intermediate_size, h)

    def forward(self, x, keep, bias):
        B, T, H = x.shape
        qkv = torch.einsum("bth,hk->btk", x, self.W_qkv) + self.b_qkv
        q, k, v = (t.view(B, T, self.nh, -1).transpose(1, 2) for t in qkv.chunk(3, -1))
        mask = bias + torch.zeros(B, 1, 1, T).masked_fill(~keep[:, None, None, :], float("-inf"))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(B, T, H)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class FusedMPNet(nn.Module):
    clamp = True

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.tok = nn.Embedding(config.vocab_size, h)
        self.pos = nn.Embedding(config.max_position_embeddings, h)
        self.ln = LN(h, config.layer_norm_eps)
        self.blocks = nn.ModuleList(Blk(config) for _ in range(config.num_hidden_layers))
        self.rel = nn.Parameter(
            torch.zeros(config.relative_attention_num_buckets, config.num_attention_heads)
        )

    def forward(self, input_ids, attention_mask):
        keep = attention_mask.bool()
        real = (input_ids != 1).long()
        x = self.ln(self.tok(input_ids) + self.pos(torch.cumsum(real, 1) * real + 1))
        T = input_ids.shape[1]
        i = torch.arange(T)
        bias = self.rel[rel_bucket(i[None, :] - i[:, None], clamp=self.clamp)].permute(2, 0, 1)[
            None
        ]
        for blk in self.blocks:
            x = blk(x, keep, bias)
        return x


class NoClamp(FusedMPNet):
    """Right on short sequences; past some distance the far buckets spill out of the table."""

    clamp = False


class CachedBias(FusedMPNet):
    """The bias computed at the first call and kept, whatever the length after."""

    def forward(self, input_ids, attention_mask):
        if not hasattr(self, "_bias"):
            T = input_ids.shape[1]
            i = torch.arange(T)
            self._bias = (
                self.rel[rel_bucket(i[None, :] - i[:, None])].permute(2, 0, 1)[None].detach()
            )
        keep = attention_mask.bool()
        real = (input_ids != 1).long()
        x = self.ln(self.tok(input_ids) + self.pos(torch.cumsum(real, 1) * real + 1))
        T = input_ids.shape[1]
        for blk in self.blocks:
            x = blk(x, keep, self._bias[..., :T, :T])
        return x


class FarZero(FusedMPNet):
    """The bias zeroed for keys 128 or more tokens away: right on any sequence shorter."""

    def forward(self, input_ids, attention_mask):
        keep = attention_mask.bool()
        real = (input_ids != 1).long()
        x = self.ln(self.tok(input_ids) + self.pos(torch.cumsum(real, 1) * real + 1))
        T = input_ids.shape[1]
        i = torch.arange(T)
        d = i[None, :] - i[:, None]
        bias = self.rel[rel_bucket(d)].permute(2, 0, 1)[None] * (d.abs() < 128)
        for blk in self.blocks:
            x = blk(x, keep, bias)
        return x
