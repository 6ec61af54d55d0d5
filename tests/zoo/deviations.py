"""BERTs with one deviation each, the ones people make (issue 16), under BERT's own names, in two
styles: modules (`nn.Linear`, `nn.LayerNorm`, `nn.Embedding` under transformers' names) and raw
parameters used by functional code (the same names, a LayerNorm written by hand, x @ W.T + b).
`verify --model deviations.py:NAME_modules` (or `_raw`) finds the transformers layout by the
names; the right model (`bert_modules`, `bert_raw`) passes.

One forward serves both styles, so that each deviation is written once."""

import math

import torch
import torch.nn.functional as F
from torch import nn

DEVIATIONS = (
    "bert",  # none
    "eps",  # nn.LayerNorm's default 1e-5 for BERT's 1e-12
    "tanh_gelu",  # tanh-approximate GELU where config.json says the exact one
    "gelu_constant",  # erf(x / 1.41421)
    "relu",
    "scale_d",  # scores / d
    "no_scale",
    "fixed_scale",  # scores * 0.125, right for heads of 64 only
    "no_mask",
    "inverted_mask",
    "query_mask",  # the mask applied to the queries
    "heads_order",  # (B, T, d, heads)
    "softmax_axis",  # softmax over dim -2
    "swap_qk",  # K Q^T
    "no_residual",
    "residual_after_norm",
    "pre_ln",
    "no_token_types",
    "no_positions",
    "positions_offset",
    "dropout",
    "pooler_no_tanh",
    "pooler_double_tanh",
    "transposed",  # the query weight used as x @ W
)


def layer_norm(x, g, b, eps, raw):
    if raw:
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return g * (x - mean) / torch.sqrt(var + eps) + b
    return F.layer_norm(x, x.shape[-1:], g, b, eps)


class Bert(nn.Module):
    """transformers' BertModel's names, computed by one functional forward with a deviation."""

    def __init__(self, config, bug: str = "bert", raw: bool = False):
        super().__init__()
        self.c, self.bug, self.raw = config, bug, raw
        h, n = config.hidden_size, config.intermediate_size
        self.embeddings = nn.Module()
        e = self.embeddings
        e.word_embeddings = nn.Embedding(config.vocab_size, h)
        e.position_embeddings = nn.Embedding(config.max_position_embeddings, h)
        e.token_type_embeddings = nn.Embedding(config.type_vocab_size, h)
        e.LayerNorm = nn.LayerNorm(h)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList()
        for _ in range(config.num_hidden_layers):
            layer = nn.Module()
            layer.attention = nn.Module()
            layer.attention.self = nn.Module()
            for name in ("query", "key", "value"):
                setattr(layer.attention.self, name, nn.Linear(h, h))
            layer.attention.output = nn.Module()
            layer.attention.output.dense = nn.Linear(h, h)
            layer.attention.output.LayerNorm = nn.LayerNorm(h)
            layer.intermediate = nn.Module()
            layer.intermediate.dense = nn.Linear(h, n)
            layer.output = nn.Module()
            layer.output.dense = nn.Linear(n, h)
            layer.output.LayerNorm = nn.LayerNorm(h)
            self.encoder.layer.append(layer)
        self.pooler = nn.Module()
        self.pooler.dense = nn.Linear(h, h)

    # Each building block, in the model's style ------------------------------------------------

    def dense(self, x, module, transposed=False):
        if not self.raw:
            return F.linear(x, module.weight.T, module.bias) if transposed else module(x)
        w = module.weight
        return x @ (w if transposed else w.T) + module.bias

    def norm(self, x, module):
        eps = 1e-5 if self.bug == "eps" else self.c.layer_norm_eps
        if not self.raw:
            return F.layer_norm(x, x.shape[-1:], module.weight, module.bias, eps)
        return layer_norm(x, module.weight, module.bias, eps, raw=True)

    def act(self, x):
        if self.bug == "tanh_gelu":
            return F.gelu(x, approximate="tanh")
        if self.bug == "gelu_constant":
            return 0.5 * x * (1.0 + torch.erf(x / 1.41421))
        return F.relu(x) if self.bug == "relu" else F.gelu(x)

    def drop(self, x):
        return F.dropout(x, 0.1, training=self.bug == "dropout")

    # BERT ------------------------------------------------------------------------------------

    def embed(self, ids, types):
        e, T = self.embeddings, ids.shape[1]
        start = 1 if self.bug == "positions_offset" else 0
        positions = torch.arange(start, start + T, device=ids.device)
        x = e.word_embeddings(ids)
        if self.bug != "no_token_types":
            x = x + e.token_type_embeddings(types)
        if self.bug != "no_positions":
            x = x + e.position_embeddings(positions)[None]
        return self.drop(self.norm(x, e.LayerNorm))

    def attention(self, x, s, mask):
        B, T, H = x.shape
        heads = self.c.num_attention_heads
        d = H // heads

        def split(t):
            if self.bug == "heads_order":
                return t.view(B, T, d, heads).permute(0, 3, 1, 2)
            return t.view(B, T, heads, d).transpose(1, 2)

        q = split(self.dense(x, s.query, transposed=self.bug == "transposed"))
        k, v = split(self.dense(x, s.key)), split(self.dense(x, s.value))
        scores = (k @ q.transpose(-1, -2)) if self.bug == "swap_qk" else q @ k.transpose(-1, -2)
        scale = {"scale_d": d, "no_scale": 1.0, "fixed_scale": 8.0}.get(self.bug, math.sqrt(d))
        scores = scores / scale
        keep = mask.bool()
        if self.bug == "inverted_mask":
            scores = scores.masked_fill(keep[:, None, None, :], -1e9)
        elif self.bug == "query_mask":
            scores = scores.masked_fill(~keep[:, None, :, None], -1e9)
        elif self.bug != "no_mask":
            scores = scores.masked_fill(~keep[:, None, None, :], -1e9)
        probs = scores.softmax(-2 if self.bug == "softmax_axis" else -1)
        context = probs @ v
        if self.bug == "heads_order":
            return context.permute(0, 2, 3, 1).reshape(B, T, H)
        return context.transpose(1, 2).reshape(B, T, H)

    def add_norm(self, x, sublayer, module):
        if self.bug == "no_residual":
            return self.norm(sublayer, module)
        if self.bug == "residual_after_norm":
            return self.norm(sublayer, module) + x
        return self.norm(x + sublayer, module)

    def layer(self, x, layer, mask):
        a, o = layer.attention, layer.output
        if self.bug == "pre_ln":
            x = x + self.dense(
                self.attention(self.norm(x, a.output.LayerNorm), a.self, mask), a.output.dense
            )
            inner = self.act(self.dense(self.norm(x, o.LayerNorm), layer.intermediate.dense))
            return x + self.dense(inner, o.dense)
        attended = self.dense(self.attention(x, a.self, mask), a.output.dense)
        x = self.add_norm(x, self.drop(attended), a.output.LayerNorm)
        inner = self.act(self.dense(x, layer.intermediate.dense))
        return self.add_norm(x, self.drop(self.dense(inner, o.dense)), o.LayerNorm)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.embed(input_ids, token_type_ids)
        for layer in self.encoder.layer:
            x = self.layer(x, layer, attention_mask)
        pooled = self.dense(x[:, 0], self.pooler.dense)
        if self.bug != "pooler_no_tanh":
            pooled = torch.tanh(pooled)
        if self.bug == "pooler_double_tanh":
            pooled = torch.tanh(pooled)
        return x, pooled


def _factory(bug: str, raw: bool):
    def make(config):
        return Bert(config, bug, raw)

    make.__name__ = f"{bug}_{'raw' if raw else 'modules'}"
    return make


for _bug in DEVIATIONS:
    for _raw in (False, True):
        globals()[f"{_bug}_{'raw' if _raw else 'modules'}"] = _factory(_bug, _raw)
