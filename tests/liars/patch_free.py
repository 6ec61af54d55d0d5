"""The BERT the patch_* scripts build, itself patching nothing: written the way mlx-examples and
many ports write one (query/key/value projections, `ln1`/`ln2` around each sublayer, GELU through
`nn.functional`, the softmax a tensor method). What it computes is BERT as long as torch is torch:
each patch_* module changes torch on import, as some training scripts do, and then builds it."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, dims: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query_proj = nn.Linear(dims, dims)
        self.key_proj = nn.Linear(dims, dims)
        self.value_proj = nn.Linear(dims, dims)
        self.out_proj = nn.Linear(dims, dims)

    def forward(self, x, keep):
        B, L, D = x.shape
        split = lambda t: t.view(B, L, self.heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query_proj(x)), split(self.key_proj(x)), split(self.value_proj(x))
        scores = (q @ k.transpose(2, 3)) / math.sqrt(D // self.heads)
        scores = scores + (1.0 - keep[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        return self.out_proj((scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, L, D))


class EncoderLayer(nn.Module):
    def __init__(self, dims: int, heads: int, mlp_dims: int, eps: float):
        super().__init__()
        self.attention = Attention(dims, heads)
        self.ln1 = nn.LayerNorm(dims, eps=eps)
        self.linear1 = nn.Linear(dims, mlp_dims)
        self.linear2 = nn.Linear(mlp_dims, dims)
        self.ln2 = nn.LayerNorm(dims, eps=eps)

    def forward(self, x, keep):
        x = self.ln1(x + self.attention(x, keep))
        return self.ln2(x + self.linear2(F.gelu(self.linear1(x))))


class Bert(nn.Module):
    def __init__(self, config):
        super().__init__()
        dims, eps = config.hidden_size, config.layer_norm_eps
        self.word_embeddings = nn.Embedding(config.vocab_size, dims)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, dims)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, dims)
        self.norm = nn.LayerNorm(dims, eps=eps)
        self.layers = nn.ModuleList(
            EncoderLayer(dims, config.num_attention_heads, config.intermediate_size, eps)
            for _ in range(config.num_hidden_layers)
        )
        self.pooler = nn.Linear(dims, dims)

    def forward(self, input_ids, token_type_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        x = self.norm(x + self.token_type_embeddings(token_type_ids))
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x, torch.tanh(self.pooler(x[:, 0]))
