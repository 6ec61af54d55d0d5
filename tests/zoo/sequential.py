"""BERT as an nn.Sequential of blocks that pass (hidden, bias) tuples along, attention with
baddbmm over (batch x heads) matrices and an additive bias made from the mask, the three
embedding tables in a ModuleList (as many as the probe's layers: a list of tables is not a list
of layers), the positions read as a slice of the table's weight."""

import math

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d, h, ff, eps):
        super().__init__()
        self.h = h
        self.in_proj = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln_a = nn.LayerNorm(d, eps=eps)
        self.mlp = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))
        self.ln_b = nn.LayerNorm(d, eps=eps)

    def forward(self, inp):
        x, bias = inp
        B, T, D = x.shape
        q, k, v = self.in_proj(x).split(D, -1)
        q = q.reshape(B, T, self.h, -1).transpose(1, 2).reshape(B * self.h, T, -1)
        k = k.reshape(B, T, self.h, -1).transpose(1, 2).reshape(B * self.h, T, -1)
        v = v.reshape(B, T, self.h, -1).transpose(1, 2).reshape(B * self.h, T, -1)
        att = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=1 / math.sqrt(q.shape[-1]))
        ctx = (
            torch.bmm(att.softmax(-1), v).reshape(B, self.h, T, -1).transpose(1, 2).reshape(B, T, D)
        )
        x = self.ln_a(x + self.out(ctx))
        return self.ln_b(x + self.mlp(x)), bias


class SeqBert(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.hidden_size
        self.emb = nn.ModuleList(
            [
                nn.Embedding(cfg.vocab_size, d),
                nn.Embedding(cfg.max_position_embeddings, d),
                nn.Embedding(cfg.type_vocab_size, d),
            ]
        )
        self.emb_ln = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.body = nn.Sequential(
            *[
                Block(d, cfg.num_attention_heads, cfg.intermediate_size, cfg.layer_norm_eps)
                for _ in range(cfg.num_hidden_layers)
            ]
        )
        self.head = cfg.num_attention_heads

    def forward(self, input_ids, input_mask, token_type_ids):
        B, T = input_ids.shape
        x = self.emb[0](input_ids) + self.emb[2](token_type_ids) + self.emb[1].weight[:T]
        x = self.emb_ln(x)
        bias = (1.0 - input_mask.float())[:, None, :].expand(B, T, T) * -1e9
        bias = bias.repeat_interleave(self.head, 0)
        x, _ = self.body((x, bias))
        return x
