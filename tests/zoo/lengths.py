"""BERT in the style of the d2l.ai book: built from its sizes (not a config), a forward that takes
`valid_lens` rather than a mask, lazy projections (nn.LazyLinear), a module that looks itself up
in sys.modules, and the pooler (the NSP head's hidden layer) a Sequential with its tanh."""

import math
import sys

import torch
from torch import nn

d2l = sys.modules[__name__]  # the book's helpers live in the module itself


def masked_softmax(X, valid_lens):
    """Softmax over the last axis, keys past each sequence's length masked out."""
    shape = X.shape
    keep = torch.arange(shape[-1], device=X.device)[None, :] < valid_lens[:, None]
    X = X.masked_fill(~keep[:, None, None, :], -1e6)
    return nn.functional.softmax(X, dim=-1)


class MultiHeadAttention(nn.Module):
    def __init__(self, num_hiddens, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.W_q = nn.LazyLinear(num_hiddens)
        self.W_k = nn.LazyLinear(num_hiddens)
        self.W_v = nn.LazyLinear(num_hiddens)
        self.W_o = nn.LazyLinear(num_hiddens)

    def split(self, X):
        X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)
        return X.permute(0, 2, 1, 3)

    def forward(self, X, valid_lens):
        q, k, v = self.split(self.W_q(X)), self.split(self.W_k(X)), self.split(self.W_v(X))
        scores = q @ k.transpose(2, 3) / math.sqrt(q.shape[-1])
        out = masked_softmax(scores, valid_lens) @ v
        out = out.permute(0, 2, 1, 3)
        return self.W_o(out.reshape(out.shape[0], out.shape[1], -1))


class AddNorm(nn.Module):
    def __init__(self, norm_shape, eps):
        super().__init__()
        self.ln = nn.LayerNorm(norm_shape, eps=eps)

    def forward(self, X, Y):
        return self.ln(Y + X)


class PositionWiseFFN(nn.Module):
    def __init__(self, ffn_num_hiddens, ffn_num_outputs):
        super().__init__()
        self.dense1 = nn.LazyLinear(ffn_num_hiddens)
        self.act = nn.GELU()
        self.dense2 = nn.LazyLinear(ffn_num_outputs)

    def forward(self, X):
        return self.dense2(self.act(self.dense1(X)))


class EncoderBlock(nn.Module):
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, eps):
        super().__init__()
        self.attention = d2l.MultiHeadAttention(num_hiddens, num_heads)
        self.addnorm1 = d2l.AddNorm(num_hiddens, eps)
        self.ffn = d2l.PositionWiseFFN(ffn_num_hiddens, num_hiddens)
        self.addnorm2 = d2l.AddNorm(num_hiddens, eps)

    def forward(self, X, valid_lens):
        Y = self.addnorm1(X, self.attention(X, valid_lens))
        return self.addnorm2(Y, self.ffn(Y))


class BERTModel(nn.Module):
    def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
                 max_len=512, eps=1e-12):  # fmt: skip
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, num_hiddens)
        self.segment_embedding = nn.Embedding(2, num_hiddens)
        self.pos_embedding = nn.Parameter(torch.randn(1, max_len, num_hiddens))
        self.embed_norm = nn.LayerNorm(num_hiddens, eps=eps)
        self.blks = nn.Sequential()
        for i in range(num_blks):
            self.blks.add_module(f"{i}", EncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, eps))
        self.hidden = nn.Sequential(nn.LazyLinear(num_hiddens), nn.Tanh())

    def forward(self, tokens, segments, valid_lens=None):
        X = self.token_embedding(tokens) + self.segment_embedding(segments)
        X = self.embed_norm(X + self.pos_embedding[:, : X.shape[1], :])
        for blk in self.blks:
            X = blk(X, valid_lens)
        return X, self.hidden(X[:, 0, :])
