"""Models with BERT's parts that compute something else, or lack a part: each must be refused
(infer) or fail (verify), saying where."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.heads = c.num_attention_heads
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.norm1 = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.fc1 = nn.Linear(h, c.intermediate_size)
        self.fc2 = nn.Linear(c.intermediate_size, h)
        self.norm2 = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def attend(self, x, mask, bias=None):
        B, T, H = x.shape
        d = H // self.heads
        q, k, v = (f(x).view(B, T, self.heads, d).transpose(1, 2) for f in (self.q, self.k, self.v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        if bias is not None:
            scores = scores + bias
        scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H))

    def forward(self, x, mask, bias=None):
        x = self.norm1(x + self.attend(x, mask, bias))
        return self.norm2(x + self.fc2(F.gelu(self.fc1(x))))


class PostLNBert(nn.Module):
    """BERT itself: the twin the others differ from."""

    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.tok = nn.Embedding(c.vocab_size, h)
        self.pos = nn.Embedding(c.max_position_embeddings, h)
        self.typ = nn.Embedding(c.type_vocab_size, h)
        self.ln = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.num_hidden_layers))
        self.pool = nn.Linear(h, h)

    def embed(self, ids, types):
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.ln(self.tok(ids) + self.typ(types) + self.pos(positions))

    def pooled(self, x):
        return torch.tanh(self.pool(x[:, 0]))

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.embed(input_ids, token_type_ids)
        for block in self.blocks:
            x = block(x, attention_mask)
        return x, self.pooled(x)


class NoTanhPoolerBert(PostLNBert):
    """The pooler's tanh forgotten: every layer is BERT's, the pooled output is not."""

    def pooled(self, x):
        return self.pool(x[:, 0])


class PreLNBlock(Block):
    def forward(self, x, mask, bias=None):
        x = x + self.attend(self.norm1(x), mask, bias)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class PreLNBert(PostLNBert):
    """A LayerNorm before each sublayer (GPT-2's way): not BERT."""

    def __init__(self, c):
        super().__init__(c)
        self.blocks = nn.ModuleList(PreLNBlock(c) for _ in range(c.num_hidden_layers))


class AlibiBert(nn.Module):
    """ALiBi (MosaicBERT's positions): no position embeddings, a bias by distance per head."""

    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.heads = c.num_attention_heads
        self.tok = nn.Embedding(c.vocab_size, h)
        self.typ = nn.Embedding(c.type_vocab_size, h)
        self.ln = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.num_hidden_layers))
        slopes = torch.tensor([2 ** (-8 * (i + 1) / self.heads) for i in range(self.heads)])
        self.register_buffer("slopes", slopes, persistent=False)

    def forward(self, input_ids, attention_mask, token_type_ids):
        T = input_ids.shape[1]
        distance = (torch.arange(T)[None, :] - torch.arange(T)[:, None]).abs()
        bias = -self.slopes[:, None, None] * distance[None]
        x = self.ln(self.tok(input_ids) + self.typ(token_type_ids))
        for block in self.blocks:
            x = block(x, attention_mask, bias)
        return x


class FinalNormPreLNBert(PreLNBert):
    """Pre-LN as GPT-2 and most "BERT-like" pre-LN code ends it: a final LayerNorm no part of
    BERT has."""

    def __init__(self, c):
        super().__init__(c)
        self.final_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x, _ = super().forward(input_ids, attention_mask, token_type_ids)
        x = self.final_norm(x)
        return x, self.pooled(x)


class PositionsAfterNormBert(PostLNBert):
    """The positions added to the embeddings after their LayerNorm."""

    def embed(self, ids, types):
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.ln(self.tok(ids) + self.typ(types)) + self.pos(positions)


class TypesAfterNormBert(PostLNBert):
    """The segments added after the LayerNorm, as some pair classifiers do."""

    def embed(self, ids, types):
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.ln(self.tok(ids) + self.pos(positions)) + self.typ(types)


class SkipsLastLayerBert(PostLNBert):
    """An off-by-one in its loop: the last layer is built and loaded, never run."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.embed(input_ids, token_type_ids)
        for i in range(len(self.blocks) - 1):
            x = self.blocks[i](x, attention_mask)
        return x, self.pooled(x)


class LooseEpsMaskedLMBert(PostLNBert):
    """PyTorch's default eps (1e-5) everywhere, and a masked-LM head in place of the pooler
    (BertForMaskedLM's shape): the eps, not the head's biases, is what differs."""

    def __init__(self, c):
        c.layer_norm_eps = 1e-5
        super().__init__(c)
        del self.pool
        h = c.hidden_size
        self.transform = nn.Linear(h, h)
        self.transform_ln = nn.LayerNorm(h)
        self.decoder = nn.Linear(h, c.vocab_size)
        self.decoder.weight = self.tok.weight

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.embed(input_ids, token_type_ids)
        for block in self.blocks:
            x = block(x, attention_mask)
        return x, self.decoder(self.transform_ln(F.gelu(self.transform(x))))
