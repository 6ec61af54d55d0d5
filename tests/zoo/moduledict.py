"""BERT of ModuleDicts, projections computed with einsum, a mask it makes itself from the pad
id (its forward takes none), and a dict for an output."""

import math

import torch
from torch import nn


def dense(x, layer):
    return torch.einsum("bti,oi->bto", x, layer.weight) + layer.bias


class DictBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, c = config.hidden_size, config
        self.pad, self.heads, self.eps = c.pad_token_id, c.num_attention_heads, c.layer_norm_eps
        self.embed = nn.ModuleDict(
            {
                "word": nn.Embedding(c.vocab_size, h),
                "position": nn.Embedding(c.max_position_embeddings, h),
                "segment": nn.Embedding(c.type_vocab_size, h),
                "norm": nn.LayerNorm(h, eps=c.layer_norm_eps),
            }
        )
        self.layers = nn.ModuleList(
            nn.ModuleDict(
                {
                    "attn": nn.ModuleDict({n: nn.Linear(h, h) for n in ("q", "k", "v", "o")}),
                    "ln_attn": nn.LayerNorm(h, eps=c.layer_norm_eps),
                    "mlp": nn.ModuleDict(
                        {
                            "up": nn.Linear(h, c.intermediate_size),
                            "down": nn.Linear(c.intermediate_size, h),
                        }
                    ),
                    "ln_mlp": nn.LayerNorm(h, eps=c.layer_norm_eps),
                }
            )
            for _ in range(c.num_hidden_layers)
        )
        self.pool = nn.Linear(h, h)

    def attend(self, x, attn, keep):
        B, T, H = x.shape
        d = H // self.heads
        q, k, v = (dense(x, attn[n]).view(B, T, self.heads, d) for n in ("q", "k", "v"))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(B, T, H)
        return dense(out, attn["o"])

    def forward(self, input_ids, token_type_ids=None):
        keep = input_ids != self.pad
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        e = self.embed
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None].expand_as(
            input_ids
        )
        x = e["norm"](
            e["word"](input_ids) + e["segment"](token_type_ids) + e["position"](positions)
        )
        for layer in self.layers:
            x = layer["ln_attn"](x + self.attend(x, layer["attn"], keep))
            mlp = layer["mlp"]
            x = layer["ln_mlp"](x + mlp["down"](torch.nn.functional.gelu(mlp["up"](x))))
        return {"last_hidden_state": x, "pooler_output": torch.tanh(self.pool(x[:, 0]))}
