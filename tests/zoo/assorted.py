"""From-scratch BERTs written the ways people write them, for `bertconv infer` and
`bertconv verify --model` to meet. Each computes BERT (post-LN, erf GELU) except PreLNBert, which
normalises before each sublayer and must be refused, and NoSegmentsBert, which has no token type
embeddings. Each takes a config with attribute access and is called as model(input_ids,
attention_mask, token_type_ids) in one spelling or another."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def attention(q, k, v, mask, heads: int):
    """softmax(Q K^T / sqrt(d)) V over heads; mask (B, T), 1 at real tokens."""
    B, T, H = q.shape
    split = lambda x: x.view(B, T, heads, H // heads).transpose(1, 2)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(H // heads)
    scores = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)


class FusedBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, h = c.num_attention_heads, c.hidden_size
        self.qkv = nn.Linear(h, 3 * h)  # query, key and value in one projection
        self.out = nn.Linear(h, h)
        self.norm1 = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.ffn = nn.Sequential(
            nn.Linear(h, c.intermediate_size), nn.GELU(), nn.Linear(c.intermediate_size, h)
        )
        self.norm2 = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        x = self.norm1(x + self.out(attention(q, k, v, mask, self.heads)))
        return self.norm2(x + self.ffn(x))


class FusedBert(nn.Module):
    """A fused qkv Linear(h, 3h), layers in `layers`, the feed-forward an nn.Sequential."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.tok = nn.Embedding(config.vocab_size, h)
        self.pos = nn.Embedding(config.max_position_embeddings, h)
        self.seg = nn.Embedding(config.type_vocab_size, h)
        self.emb_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(FusedBlock(config) for _ in range(config.num_hidden_layers))
        self.pool = nn.Linear(h, h)

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.emb_norm(self.tok(input_ids) + self.seg(token_type_ids) + self.pos(positions))
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x, torch.tanh(self.pool(x[:, 0]))


class RawLayer(nn.Module):
    """Raw parameters stored (in, out), used as x @ W; the projections fused as (h, 3h)."""

    def __init__(self, c):
        super().__init__()
        h, i = c.hidden_size, c.intermediate_size
        self.heads = c.num_attention_heads
        self.W_qkv = nn.Parameter(torch.randn(h, 3 * h) * 0.02)
        self.b_qkv = nn.Parameter(torch.zeros(3 * h))
        self.W_o = nn.Parameter(torch.randn(h, h) * 0.02)
        self.b_o = nn.Parameter(torch.zeros(h))
        self.attn_ln = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.W_1 = nn.Parameter(torch.randn(h, i) * 0.02)
        self.b_1 = nn.Parameter(torch.zeros(i))
        self.W_2 = nn.Parameter(torch.randn(i, h) * 0.02)
        self.b_2 = nn.Parameter(torch.zeros(h))
        self.ffn_ln = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x, mask):
        q, k, v = (x @ self.W_qkv + self.b_qkv).chunk(3, dim=-1)
        x = self.attn_ln(x + attention(q, k, v, mask, self.heads) @ self.W_o + self.b_o)
        return self.ffn_ln(x + F.gelu(x @ self.W_1 + self.b_1) @ self.W_2 + self.b_2)


class RawBert(nn.Module):
    """Embedding tables as raw parameters too; the mask spelled `mask`, the types `segment_ids`."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.word_table = nn.Parameter(torch.randn(config.vocab_size, h) * 0.02)
        self.position_table = nn.Parameter(torch.randn(config.max_position_embeddings, h) * 0.02)
        self.segment_table = nn.Parameter(torch.randn(config.type_vocab_size, h) * 0.02)
        self.embed_ln = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.stack = nn.ModuleList(RawLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, ids, mask, segment_ids):
        T = ids.shape[1]
        x = F.embedding(ids, self.word_table) + F.embedding(segment_ids, self.segment_table)
        x = self.embed_ln(x + self.position_table[:T])
        for layer in self.stack:
            x = layer(x, mask)
        return x


class Block(nn.Module):
    """q, k, v and out as separate Linears named to_*, LayerNorms ln1 and ln2."""

    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.heads = c.num_attention_heads
        self.to_q, self.to_k, self.to_v = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.to_out = nn.Linear(h, h)
        self.ln1 = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.fc_in = nn.Linear(h, c.intermediate_size)
        self.fc_out = nn.Linear(c.intermediate_size, h)
        self.ln2 = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x, mask):
        a = attention(self.to_q(x), self.to_k(x), self.to_v(x), mask, self.heads)
        x = self.ln1(x + self.to_out(a))
        return self.ln2(x + self.fc_out(F.gelu(self.fc_in(x))))


class BlocksBert(nn.Module):
    """Layers in a ModuleList called `blocks`; the mask is a key-padding mask (True at padding)."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.token_embedding = nn.Embedding(config.vocab_size, h)
        self.position_embedding = nn.Embedding(config.max_position_embeddings, h)
        self.type_embedding = nn.Embedding(config.type_vocab_size, h)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.pooler = nn.Linear(h, h)

    def forward(self, input_ids, key_padding_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        e = self.token_embedding(input_ids) + self.position_embedding(positions)
        x = self.norm(e + self.type_embedding(token_type_ids))
        for block in self.blocks:
            x = block(x, ~key_padding_mask)
        return torch.tanh(self.pooler(x[:, 0]))


class Embed(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.position = nn.Embedding(c.max_position_embeddings, h)
        self.segment = nn.Embedding(c.type_vocab_size, h)
        self.token = nn.Embedding(c.vocab_size, h)
        self.layer_norm = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, ids, types):
        # Summed in another order than BERT's: position, segment, token.
        p = self.position(torch.arange(ids.shape[1], device=ids.device))[None]
        return self.layer_norm(p + self.segment(types) + self.token(ids))


class OtherOrderBert(nn.Module):
    """The embeddings summed in another order, and registered in another order too."""

    def __init__(self, config):
        super().__init__()
        self.embed = Embed(config)
        self.encoder = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))

    def forward(self, tokens, attn_mask, token_type):
        x = self.embed(tokens, token_type)
        for block in self.encoder:
            x = block(x, attn_mask)
        return x


class PreLNBlock(Block):
    def forward(self, x, mask):
        y = self.ln1(x)
        x = x + self.to_out(attention(self.to_q(y), self.to_k(y), self.to_v(y), mask, self.heads))
        return x + self.fc_out(F.gelu(self.fc_in(self.ln2(x))))


class PreLNBert(BlocksBert):
    """A LayerNorm before each sublayer (GPT-2's way, and BERT-pytorch's): not BERT."""

    def __init__(self, config):
        super().__init__(config)
        self.blocks = nn.ModuleList(PreLNBlock(config) for _ in range(config.num_hidden_layers))


class NoSegmentsBert(OtherOrderBert):
    """No token type embeddings: a part of BERT missing."""

    def __init__(self, config):
        super().__init__(config)
        del self.embed.segment

    def forward(self, tokens, attn_mask):
        e = self.embed
        p = e.position(torch.arange(tokens.shape[1], device=tokens.device))[None]
        x = e.layer_norm(p + e.token(tokens))
        for block in self.encoder:
            x = block(x, attn_mask)
        return x
