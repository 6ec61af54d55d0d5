"""A pre-training BERT as tutorials write one: `forward(input_ids, segment_ids, masked_pos)`,
its mask made from the pad id (0) inside, filled in place with `masked_fill_`, a softmax module
built in the forward; the next-sentence head named `classifier` beside a masked-LM head whose
decoder shares the word embeddings, with a bias of its own. A masked-LM head beside it makes
the `classifier` next sentence prediction: no class of BERT's has both a masked-LM head and a
sequence classifier."""

import math

import torch
from torch import nn


def gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def pad_mask(ids):
    """(B, T, T): True where the key is padding."""
    return ids.eq(0).unsqueeze(1).expand(-1, ids.size(1), -1)


class Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.W_Q, self.W_K, self.W_V = (nn.Linear(d_model, d_model) for _ in range(3))
        self.out = nn.Linear(d_model, d_model)
        self.ln = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x, blocked):
        B = x.size(0)
        q, k, v = (W(x).view(B, -1, self.n_heads, self.d_k).transpose(1, 2)
                   for W in (self.W_Q, self.W_K, self.W_V))  # fmt: skip
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d_k)
        scores.masked_fill_(blocked.unsqueeze(1), -1e9)
        context = torch.matmul(nn.Softmax(dim=-1)(scores), v)
        context = context.transpose(1, 2).contiguous().view(B, -1, self.n_heads * self.d_k)
        return self.ln(self.out(context) + x)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.ln = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x):
        return self.ln(x + self.down(gelu(self.up(x))))


class PretrainingBert(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c.hidden_size
        self.tok_embed = nn.Embedding(c.vocab_size, d)
        self.pos_embed = nn.Embedding(c.max_position_embeddings, d)
        self.seg_embed = nn.Embedding(c.type_vocab_size, d)
        self.embed_ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(
            nn.Sequential(Attention(d, c.num_attention_heads), FeedForward(d, c.intermediate_size))
            for _ in range(c.num_hidden_layers)
        )
        self.fc, self.linear = nn.Linear(d, d), nn.Linear(d, d)
        self.norm = nn.LayerNorm(d, eps=1e-12)
        self.classifier = nn.Linear(d, 2)
        self.decoder = nn.Linear(d, c.vocab_size, bias=False)
        self.decoder.weight = self.tok_embed.weight
        self.decoder_bias = nn.Parameter(torch.zeros(c.vocab_size))

    def forward(self, input_ids, segment_ids, masked_pos):
        pos = torch.arange(input_ids.size(1)).unsqueeze(0).expand_as(input_ids)
        x = self.tok_embed(input_ids) + self.pos_embed(pos) + self.seg_embed(segment_ids)
        x = self.embed_ln(x)
        blocked = pad_mask(input_ids)
        for attention, feed_forward in self.layers:
            x = feed_forward(attention(x, blocked))
        is_next = self.classifier(torch.tanh(self.fc(x[:, 0])))
        picked = torch.gather(x, 1, masked_pos[:, :, None].expand(-1, -1, x.size(-1)))
        words = self.decoder(self.norm(gelu(self.linear(picked)))) + self.decoder_bias
        return words, is_next
