"""A from-scratch MPNet whose modules are named as transformers' MPNetModel names them (so that
verify --model needs no table), written as a port from transformers' code looks; and one fault
of it: the shared bias added in the first layer only."""

import math

import torch
from torch import nn


def relative_buckets(relative, num_buckets=32, max_distance=128):
    ret = 0
    n = -relative
    num_buckets //= 2
    ret += (n < 0).to(torch.long) * num_buckets
    n = torch.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    scaled = torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return ret + torch.where(is_small, n, large)


class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.padding_idx = 1
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=1)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, input_ids):
        mask = input_ids.ne(self.padding_idx).int()
        positions = torch.cumsum(mask, dim=1) * mask + self.padding_idx
        return self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(positions))


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, h = c.num_attention_heads, c.hidden_size
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))

    def forward(self, x, mask, bias):
        B, T, H = x.shape

        def split(t):
            return t.view(B, T, self.heads, H // self.heads).permute(0, 2, 1, 3)

        scores = split(self.q(x)) @ split(self.k(x)).transpose(-1, -2)
        scores = scores / math.sqrt(H // self.heads) + bias + mask
        context = scores.softmax(-1) @ split(self.v(x))
        return self.o(context.permute(0, 2, 1, 3).reshape(B, T, H))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn = Attn(c)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x, mask, bias):
        return self.LayerNorm(x + self.attn(x, mask, bias))


class Dense(nn.Module):
    def __init__(self, n_in, n_out, c=None):
        super().__init__()
        self.dense = nn.Linear(n_in, n_out)
        if c is not None:
            self.LayerNorm = nn.LayerNorm(n_out, eps=c.layer_norm_eps)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Dense(c.hidden_size, c.intermediate_size)
        self.output = Dense(c.intermediate_size, c.hidden_size, c)

    def forward(self, x, mask, bias):
        x = self.attention(x, mask, bias)
        h = self.output.dense(nn.functional.gelu(self.intermediate.dense(x)))
        return self.output.LayerNorm(x + h)


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_heads = c.num_attention_heads
        self.layer = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))
        self.relative_attention_bias = nn.Embedding(c.relative_attention_num_buckets, self.n_heads)

    def position_bias(self, T, device):
        context = torch.arange(T, device=device)[:, None]
        memory = torch.arange(T, device=device)[None, :]
        buckets = relative_buckets(memory - context)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x, mask):
        bias = self.position_bias(x.shape[1], x.device)
        for i, layer in enumerate(self.layer):
            x = layer(x, mask, self.bias_of(bias, i))
        return x

    def bias_of(self, bias, i):
        return bias


class MPNetModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = Embeddings(config)
        self.encoder = self.encoder_class(config)
        self.pooler = Dense(config.hidden_size, config.hidden_size)

    encoder_class = Encoder

    def forward(self, input_ids, attention_mask):
        mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        x = self.encoder(self.embeddings(input_ids), mask)
        return x, torch.tanh(self.pooler.dense(x[:, 0]))


class FirstLayerEncoder(Encoder):
    def bias_of(self, bias, i):
        return bias if i == 0 else 0.0


class BiasInFirstLayerOnly(MPNetModel):
    encoder_class = FirstLayerEncoder
