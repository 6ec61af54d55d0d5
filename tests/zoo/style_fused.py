"""BERTs in the style of vendors' fused code: projections without their bias
(`F.linear(x, W)`), the bias added apart in either order, bias and GELU (and the pooler's bias
and tanh) fused in TorchScript functions, LayerNorms reading their weights through `.data`."""

import math

import torch
import torch.nn.functional as F
from torch import nn


@torch.jit.script
def bias_gelu(bias, y):
    x = bias + y
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


@torch.jit.script
def bias_tanh(bias, y):
    return torch.tanh(y + bias)


@torch.jit.script
def bias_dropout_add(x, bias, residual, prob: float, training: bool):
    return residual + F.dropout(x + bias, p=prob, training=training)


class LinearNoBias(nn.Module):
    """A projection that hands its bias back to be fused into what follows (Megatron's
    `skip_bias_add`)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        self.bias = nn.Parameter(torch.zeros(n_out))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return F.linear(x, self.weight), self.bias


class FusedLayerNorm(nn.LayerNorm):
    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight.data, self.bias.data, self.eps)


class SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.n_heads = config.num_attention_heads
        self.qkv = nn.ModuleList(LinearNoBias(h, h) for _ in range(3))
        self.dense = LinearNoBias(h, h)
        self.norm = FusedLayerNorm(h, eps=config.layer_norm_eps)

    def forward(self, x, mask):
        B, T, H = x.shape
        q, k, v = (
            (b + y).view(B, T, self.n_heads, -1).transpose(1, 2)  # the bias first: b + W x
            for y, b in (proj(x) for proj in self.qkv)
        )
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(mask[:, None, None, :] == 0, -10000.0)
        context = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(B, T, H)
        out, bias = self.dense(context)
        return self.norm(bias_dropout_add(out, bias, x, 0.1, self.training))


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.attention = SelfAttention(config)
        self.dense_act = LinearNoBias(h, i)
        self.dense_out = LinearNoBias(i, h)
        self.norm = FusedLayerNorm(h, eps=config.layer_norm_eps)

    def forward(self, x, mask):
        x = self.attention(x, mask)
        y, bias = self.dense_act(x)
        out, out_bias = self.dense_out(bias_gelu(bias, y))
        return self.norm(out + out_bias + x)


class FusedBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.word = nn.Embedding(config.vocab_size, h)
        self.position = nn.Embedding(config.max_position_embeddings, h)
        self.token_type = nn.Embedding(config.type_vocab_size, h)
        self.norm = FusedLayerNorm(h, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.pool = LinearNoBias(h, h)

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        x = self.norm(x)
        for layer in self.layers:
            x = layer(x, attention_mask)
        y, bias = self.pool(x[:, 0])
        return x, bias_tanh(bias, y)
