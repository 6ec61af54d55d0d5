"""The encoder the head_* models share (imported by its plain name, as a neighbour module):
post-LN blocks with one fused qkv projection, as minimal BERT reimplementations write them."""

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, self.n_head = c.hidden_size, c.num_attention_heads
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln_1 = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.fc1 = nn.Linear(h, c.intermediate_size)
        self.fc2 = nn.Linear(c.intermediate_size, h)
        self.ln_2 = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x, keep):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = self.ln_1(x + self.proj(y.transpose(1, 2).reshape(B, T, C)))
        return self.ln_2(x + self.fc2(F.gelu(self.fc1(x))))


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok = nn.Embedding(c.vocab_size, c.hidden_size)
        self.pos = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.seg = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.emb_ln = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.num_hidden_layers))

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.tok(input_ids) + self.pos(positions) + self.seg(token_type_ids)
        x = self.emb_ln(x)
        keep = attention_mask.bool()[:, None, None, :]
        for block in self.blocks:
            x = block(x, keep)
        return x
