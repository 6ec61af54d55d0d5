"""A BERT whose attention output goes through `F.dropout(..., training=True)`: the dropout stays
on in eval mode, so two runs of the same batch differ. Written as research code often writes a
layer (separate query, key and value, dropout called as a function). `EvalBert` is the same model
with the dropout following the mode: it computes BERT, `ForcedDropoutBert` must never pass."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class EncoderLayer(nn.Module):
    def __init__(self, cfg, forced: bool):
        super().__init__()
        d = cfg.hidden_size
        self.n_heads, self.p, self.forced = cfg.num_attention_heads, cfg.hidden_dropout_prob, forced
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d, d) for _ in range(4))
        self.norm_attn = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.ff_in = nn.Linear(d, cfg.intermediate_size)
        self.ff_out = nn.Linear(cfg.intermediate_size, d)
        self.norm_ff = nn.LayerNorm(d, eps=cfg.layer_norm_eps)

    def split(self, x):
        return x.view(x.shape[0], x.shape[1], self.n_heads, -1).transpose(1, 2)

    def forward(self, h, pad):
        q, k, v = self.split(self.w_q(h)), self.split(self.w_k(h)), self.split(self.w_v(h))
        att = (q @ k.transpose(2, 3)) / math.sqrt(q.shape[-1]) + pad
        ctx = (att.softmax(dim=-1) @ v).transpose(1, 2).flatten(2)
        out = F.dropout(self.w_o(ctx), self.p, training=self.forced or self.training)
        h = self.norm_attn(h + out)
        return self.norm_ff(h + self.ff_out(F.gelu(self.ff_in(h))))


class EvalBert(nn.Module):
    forced = False

    def __init__(self, cfg):
        super().__init__()
        d = cfg.hidden_size
        tables = (cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size)
        self.word, self.position, self.segment = (nn.Embedding(n, d) for n in tables)
        self.norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.layers = nn.ModuleList(
            EncoderLayer(cfg, self.forced) for _ in range(cfg.num_hidden_layers)
        )
        self.pooler = nn.Linear(d, d)

    def forward(self, input_ids, token_type_ids, attention_mask):
        where = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        h = self.norm(self.word(input_ids) + self.position(where) + self.segment(token_type_ids))
        pad = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            h = layer(h, pad)
        return h, torch.tanh(self.pooler(h[:, 0]))


class ForcedDropoutBert(EvalBert):
    forced = True


class NoisyBert(EvalBert):
    """Noise of its own making added to the embeddings (a regulariser left on): no dropout
    call to find, but two runs of one batch still differ."""

    def forward(self, input_ids, token_type_ids, attention_mask):
        where = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        h = self.norm(self.word(input_ids) + self.position(where) + self.segment(token_type_ids))
        h = h + 0.01 * torch.randn_like(h)
        pad = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            h = layer(h, pad)
        return h, torch.tanh(self.pooler(h[:, 0]))
