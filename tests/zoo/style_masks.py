"""BERTs whose forward takes its mask in the forms public code uses: the extended (B, 1, 1, T)
mask, an additive float mask (0 at the tokens, -10000 or -inf at the padding), a boolean mask
that is True at the padding, no mask at all (made from the pad id), and a masked-LM head's
positions, `forward(input_ids, segment_ids, masked_pos)`."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.out = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, bias):
        B, T, H = x.shape

        def heads(t):
            return t.view(B, T, self.heads, -1).transpose(1, 2)  # (B, heads, T, head_dim)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)
        return self.norm(x + self.out(context))


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.attention = Attention(h, config.num_attention_heads)
        self.fc1, self.fc2 = nn.Linear(h, i), nn.Linear(i, h)
        self.norm = nn.LayerNorm(h, eps=1e-12)

    def forward(self, x, bias):
        x = self.attention(x, bias)
        return self.norm(x + self.fc2(F.gelu(self.fc1(x))))


class Encoder(nn.Module):
    """The BERT every model below shares: its attention reads an additive (B, 1, 1, T) bias."""

    def __init__(self, config):
        super().__init__()
        h, self.pad_id = config.hidden_size, config.pad_token_id
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.tok = nn.Embedding(config.vocab_size, h)
        self.pos = nn.Embedding(config.max_position_embeddings, h)
        self.seg = nn.Embedding(config.type_vocab_size, h)
        self.norm, self.pool = nn.LayerNorm(h, eps=1e-12), nn.Linear(h, h)

    def encode(self, ids, segments, bias):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tok(ids) + self.pos(positions) + self.seg(segments))
        for layer in self.layers:
            x = layer(x, bias)
        return x, torch.tanh(self.pool(x[:, 0]))


class ExtendedMaskBert(Encoder):
    """`extended_attention_mask`: (B, 1, 1, T) of 1 and 0, made by the caller."""

    def forward(self, input_ids, token_type_ids, attention_mask):
        return self.encode(input_ids, token_type_ids, (1.0 - attention_mask) * -10000.0)


class AdditiveMaskBert(Encoder):
    """A float mask added to the scores as it is: 0 at the tokens, -10000 at the padding."""

    def forward(self, input_ids, token_type_ids, attention_mask):
        return self.encode(input_ids, token_type_ids, attention_mask)


class PaddingMaskBert(Encoder):
    """A boolean mask that is True at the padding, filled with -inf."""

    def forward(self, input_ids, token_type_ids, mask):
        bias = torch.zeros(mask.shape, device=mask.device).masked_fill(mask, float("-inf"))
        return self.encode(input_ids, token_type_ids, bias[:, None, None, :])


class PadIdBert(Encoder):
    """A mask of its own, (B, T, T) where one is given, made from the pad id where none is."""

    def forward(self, input_ids, segment_ids, attention_mask=None):
        if attention_mask is None:
            keep = input_ids != self.pad_id
            attention_mask = keep[:, None, :].expand(-1, input_ids.shape[1], -1)
        B, T = input_ids.shape
        bias = torch.zeros(B, T, T).masked_fill(attention_mask == 0, -10000.0)
        return self.encode(input_ids, segment_ids, bias[:, None])


class MaskedLMBert(Encoder):
    """Pretraining code: the masked-LM head gathers the masked positions; no mask is given."""

    def __init__(self, config):
        super().__init__(config)
        self.lm_transform = nn.Linear(config.hidden_size, config.hidden_size)
        self.lm_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.lm_bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, input_ids, segment_ids, masked_pos):
        keep = (input_ids != self.pad_id)[:, None, None, :]
        h, pooled = self.encode(input_ids, segment_ids, (~keep).float() * -10000.0)
        index = masked_pos[:, :, None].expand(-1, -1, h.shape[-1])
        masked = self.lm_norm(F.gelu(self.lm_transform(torch.gather(h, 1, index))))
        return F.linear(masked, self.tok.weight) + self.lm_bias, pooled
