"""The encoder layer of pkgbert, with its LayerNorm parameters named g/b as raw tensors."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Norm(nn.Module):
    def __init__(self, h, eps):
        super().__init__()
        self.g = nn.Parameter(torch.ones(h))
        self.b = nn.Parameter(torch.zeros(h))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.g, self.b, self.eps)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.heads = c.num_attention_heads
        self.proj_q, self.proj_k, self.proj_v = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.proj_o = nn.Linear(h, h)
        self.n1, self.n2 = Norm(h, c.layer_norm_eps), Norm(h, c.layer_norm_eps)
        self.w1, self.w2 = nn.Linear(h, c.intermediate_size), nn.Linear(c.intermediate_size, h)

    def forward(self, x, mask):
        B, T, H = x.shape
        d = H // self.heads
        v = self.proj_v(x).view(B, T, self.heads, d).transpose(1, 2)
        q = self.proj_q(x).view(B, T, self.heads, d).transpose(1, 2)
        k = self.proj_k(x).view(B, T, self.heads, d).transpose(1, 2)
        w = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        w = w.masked_fill(mask[:, None, None, :] == 0, -1e4)
        x = self.n1(x + self.proj_o((w.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)))
        return self.n2(x + self.w2(F.gelu(self.w1(x))))
