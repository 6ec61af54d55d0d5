"""BERT as functions of raw parameters, no module per layer: every tensor in one ParameterDict
(`l0_wq`, `l0_g1`, ...), weights stored (in, out) and used as x @ W + b, the forward spelled
forward(x, seg, mask)."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def self_attention(x, p, i, mask, heads):
    B, T, H = x.shape
    d = H // heads

    def project(name):
        y = x @ p[f"l{i}_w{name}"] + p[f"l{i}_b{name}"]
        return y.view(B, T, heads, d).permute(0, 2, 1, 3)

    q, k, v = project("q"), project("k"), project("v")
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
    scores = scores + (1.0 - mask[:, None, None, :].float()) * torch.finfo(scores.dtype).min
    context = torch.matmul(F.softmax(scores, dim=-1), v)
    return context.permute(0, 2, 1, 3).reshape(B, T, H)


class FunctionalBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, n = config.hidden_size, config.intermediate_size
        self.heads, self.eps = config.num_attention_heads, config.layer_norm_eps
        self.layers = config.num_hidden_layers
        std = config.initializer_range
        shapes = {
            "tok": (config.vocab_size, h),
            "pos": (config.max_position_embeddings, h),
            "seg": (config.type_vocab_size, h),
            "emb_g": (h,),
            "emb_b": (h,),
        }
        for i in range(config.num_hidden_layers):
            for name in "qkvo":
                shapes[f"l{i}_w{name}"], shapes[f"l{i}_b{name}"] = (h, h), (h,)
            shapes |= {f"l{i}_g1": (h,), f"l{i}_b1": (h,), f"l{i}_w_up": (h, n)}
            shapes |= {f"l{i}_b_up": (n,), f"l{i}_w_down": (n, h), f"l{i}_b_down": (h,)}
            shapes |= {f"l{i}_g2": (h,), f"l{i}_b2": (h,)}
        shapes |= {"pool_w": (h, h), "pool_b": (h,)}
        self.p = nn.ParameterDict(
            {k: nn.Parameter(torch.randn(*s) * std) for k, s in shapes.items()}
        )

    def forward(self, x, seg, mask):
        p = self.p
        T = x.shape[1]
        h = F.embedding(x, p["tok"]) + F.embedding(seg, p["seg"]) + p["pos"][:T]
        h = F.layer_norm(h, h.shape[-1:], p["emb_g"], p["emb_b"], self.eps)
        for i in range(self.layers):
            a = self_attention(h, p, i, mask, self.heads) @ p[f"l{i}_wo"] + p[f"l{i}_bo"]
            h = F.layer_norm(h + a, h.shape[-1:], p[f"l{i}_g1"], p[f"l{i}_b1"], self.eps)
            f = F.gelu(h @ p[f"l{i}_w_up"] + p[f"l{i}_b_up"]) @ p[f"l{i}_w_down"]
            h = F.layer_norm(
                h + f + p[f"l{i}_b_down"], h.shape[-1:], p[f"l{i}_g2"], p[f"l{i}_b2"], self.eps
            )
        return h, torch.tanh(h[:, 0] @ p["pool_w"] + p["pool_b"])
