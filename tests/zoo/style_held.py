"""BERTs holding their weights in ways public code does besides plain parameters: tables kept
as buffers (`register_buffer`, as ported TensorFlow code and frozen-embedding tricks do), and a
pooler built as a scripted module (`torch.jit.script(Pooler(...))` in the constructor)."""

import torch
import torch.nn.functional as F
from head_parts import Encoder
from torch import nn


class Pooler(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, x):
        return torch.tanh(self.dense(x[:, 0]))


class BufferBert(Encoder):
    """The word and position tables held as buffers, read with F.embedding."""

    def __init__(self, c):
        super().__init__(c)
        del self.tok, self.pos
        self.register_buffer("word_table", torch.randn(c.vocab_size, c.hidden_size) * 0.02)
        self.register_buffer("pos_table", torch.randn(c.max_position_embeddings, c.hidden_size))
        self.pooler = Pooler(c.hidden_size)

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = F.embedding(input_ids, self.word_table) + F.embedding(positions, self.pos_table)
        x = self.emb_ln(x + self.seg(token_type_ids))
        keep = attention_mask.bool()[:, None, None, :]
        for block in self.blocks:
            x = block(x, keep)
        return x, self.pooler(x)


class ScriptedPoolerBert(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.encoder = Encoder(c)
        self.pooler = torch.jit.script(Pooler(c.hidden_size))

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.encoder(input_ids, attention_mask, token_type_ids)
        return x, self.pooler(x)
