"""BERTs whose forward is called as public encoder code calls it: a boolean mask kept where the
tokens are, a rank-4 boolean mask True at the padding filled in place, an optional `positions`
the model asserts unset (fairseq's encoders), a `forward(*inputs)`, an output class of its own
holding every layer's states, queries scaled after their projection; each computes BERT, and
each one-bug variant must fail, named."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """A post-LN layer; `fill(scores, mask)` applies the mask as the model's code does."""

    def __init__(self, c, fill, query_scale=None):
        super().__init__()
        h = c.hidden_size
        self.heads, self.fill, self.query_scale = c.num_attention_heads, fill, query_scale
        self.folded = None  # the scaling in the query's projection (addmm), where set
        self.act = F.gelu
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.ln1 = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.ff1, self.ff2 = nn.Linear(h, c.intermediate_size), nn.Linear(c.intermediate_size, h)
        self.ln2 = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x, mask):
        B, T, H = x.shape
        d = H // self.heads
        q = self.q(x)
        if self.query_scale is not None:  # scaled once, before the scores
            q = q * self.query_scale
        if self.folded is not None:  # scaled inside the projection: addmm's alpha and beta
            flat = x.reshape(B * T, H)
            q = torch.addmm(
                self.q.bias, flat, self.q.weight.t(), beta=self.folded, alpha=self.folded
            )
            q = q.view(B, T, H)
        q, k, v = (t.view(B, T, self.heads, d).transpose(1, 2) for t in (q, self.k(x), self.v(x)))
        scores = q @ k.transpose(-2, -1)
        if self.query_scale is None and self.folded is None:
            scores = scores / math.sqrt(d)
        scores = self.fill(scores, mask)
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)
        x = self.ln1(x + self.o(context))
        return self.ln2(x + self.ff2(self.act(self.ff1(x))))


def keep_filled(scores, mask):
    """mask: (B, T) bool, True at the tokens."""
    return scores.masked_fill(~mask[:, None, None, :], float("-inf"))


def hide_filled_in_place(scores, mask):
    """mask: (B, 1, 1, T) bool, True at the padding."""
    return scores.masked_fill_(mask, float("-inf"))


class Encoder(nn.Module):
    fill = staticmethod(keep_filled)

    def __init__(self, config, eps=None):
        super().__init__()
        h = config.hidden_size
        self.pad = config.pad_token_id
        self.tok = nn.Embedding(config.vocab_size, h)
        self.pos = nn.Embedding(config.max_position_embeddings, h)
        self.seg = nn.Embedding(config.type_vocab_size, h)
        self.ln = nn.LayerNorm(h, eps=eps or config.layer_norm_eps)
        self.blocks = nn.ModuleList(
            Block(config, self.fill) for _ in range(config.num_hidden_layers)
        )

    def embed(self, ids, types):
        where = torch.arange(ids.shape[1], device=ids.device)
        types = torch.zeros_like(ids) if types is None else types
        return self.ln(self.tok(ids) + self.pos(where)[None] + self.seg(types))

    def encode(self, ids, types, mask):
        x = self.embed(ids, types)
        states = [x]
        for block in self.blocks:
            x = block(x, mask)
            states.append(x)
        return states


class KeepMask(Encoder):
    """`attention_mask` as a boolean (B, T), True at the tokens, applied by masked_fill(~m)."""

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        return self.encode(input_ids, token_type_ids, attention_mask)[-1]


class KeepMaskEps(KeepMask):
    """Must fail: the embeddings' LayerNorm with eps 1e-5."""

    def __init__(self, config):
        super().__init__(config, eps=1e-5)


class HideMask(Encoder):
    """`mask` (B, 1, 1, T), True at the padding, filled in place with -inf."""

    fill = staticmethod(hide_filled_in_place)

    def forward(self, src, segments, mask):
        return self.encode(src, segments, mask)[-1]


class AssertsPositions(Encoder):
    """fairseq's way: `positions` optional, asserted unset where a pad index is set; the mask
    made from the pad id."""

    def forward(self, src_tokens, segment_labels=None, positions=None, return_all_hiddens=False):
        assert positions is None or self.pad is None, "positions are made from the pad index"
        keep = src_tokens.ne(self.pad)
        states = self.encode(src_tokens, segment_labels, keep)
        return states if return_all_hiddens else states[-1]


class Varargs(Encoder):
    """forward(*inputs): the ids first, the mask made from the pad id."""

    def forward(self, *inputs):
        ids = inputs[0]
        return self.encode(ids, inputs[1] if len(inputs) > 1 else None, ids != self.pad)[-1]


class RejectsTokenTypes(nn.Module):
    """A table of token types it is never given: an optional argument it asserts unset."""

    def __init__(self, config):
        super().__init__()
        self.tok = nn.Embedding(config.vocab_size, config.hidden_size)
        self.seg = nn.Embedding(config.type_vocab_size, config.hidden_size)

    def forward(self, input_ids, token_type_ids=None):
        assert token_type_ids is None, "no token types here"
        return self.tok(input_ids)


class Outputs:
    """The model's own output class: no dataclass, no tuple."""

    def __init__(self, last_hidden_state, hidden_states):
        self.last_hidden_state = last_hidden_state
        self.hidden_states = hidden_states


class ReturnsItsOwnClass(Encoder):
    """Every layer's states returned in an object of its own."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        states = self.encode(input_ids, token_type_ids, attention_mask.bool())
        return Outputs(states[-1], states)


class ScaledQueries(Encoder):
    """The queries scaled by 1/sqrt(head size) after their projection, the scores then not."""

    def __init__(self, config):
        super().__init__(config)
        for block in self.blocks:
            block.query_scale = 1 / math.sqrt(config.hidden_size // config.num_attention_heads)

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.encode(input_ids, token_type_ids, attention_mask.bool())[-1]


class FoldedQueryScale(ScaledQueries):
    """The queries' scaling folded into their projection (addmm's alpha and beta)."""

    def __init__(self, config):
        super().__init__(config)
        for block in self.blocks:
            block.folded, block.query_scale = block.query_scale, None


class FoldedFixedScale(FoldedQueryScale):
    """Must fail: 0.125 folded into the query's projection, whatever the heads' width."""

    def __init__(self, config):
        super().__init__(config)
        for block in self.blocks:
            block.folded = 0.125


class FixedQueryScale(ScaledQueries):
    """Must fail: the queries scaled by a fixed 0.125 (BERT-base's 1/sqrt(64)), whatever the
    heads' width."""

    def __init__(self, config):
        super().__init__(config)
        for block in self.blocks:
            block.query_scale = 0.125


# MPNet as its original (fairseq-era) code holds it: time-major, one fused in-projection ------


def bucket(distance, buckets=32, farthest=128):
    half = buckets // 2
    exact = half // 2
    n = distance.abs()
    log = torch.log(n.float().clamp(min=1) / exact) / math.log(farthest / exact)
    far = (exact + (log * (half - exact)).long()).clamp(max=half - 1)
    return (distance > 0).long() * half + torch.where(n < exact, n, far)


class FusedSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scaling = self.head_dim**-0.5
        self.in_proj_weight = nn.Parameter(torch.randn(3 * dim, dim) * 0.02)
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)

    def _in_proj(self, x, start=0, end=None):
        return F.linear(x, self.in_proj_weight[start:end, :], self.in_proj_bias[start:end])

    def forward(self, x, key_padding_mask, position_bias):
        T, B, C = x.shape
        q, k, v = self._in_proj(x).chunk(3, dim=-1)
        q = q * self.scaling
        q, k, v = (t.contiguous().view(T, B * self.heads, self.head_dim).transpose(0, 1)
                   for t in (q, k, v))  # fmt: skip
        weights = torch.bmm(q, k.transpose(1, 2)) + position_bias.reshape(B * self.heads, T, T)
        weights = weights.view(B, self.heads, T, T)
        weights = weights.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        probs = weights.view(B * self.heads, T, T).softmax(-1)
        out = torch.bmm(probs, v).transpose(0, 1).contiguous().view(T, B, C)
        return self.out_proj(out)


class FusedLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.self_attn = FusedSelfAttention(h, c.num_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.fc1, self.fc2 = nn.Linear(h, c.intermediate_size), nn.Linear(c.intermediate_size, h)
        self.final_layer_norm = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x, key_padding_mask, position_bias):
        x = self.self_attn_layer_norm(x + self.self_attn(x, key_padding_mask, position_bias))
        return self.final_layer_norm(x + self.fc2(F.gelu(self.fc1(x))))


class FusedMPNet(nn.Module):
    """MPNet's positions counted past the pad id, its relative bias shared by every layer."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.padding_idx = config.pad_token_id
        self.embed_tokens = nn.Embedding(config.vocab_size, h, self.padding_idx)
        self.embed_positions = nn.Embedding(config.max_position_embeddings, h)
        self.emb_layer_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(FusedLayer(config) for _ in range(config.num_hidden_layers))
        self.relative_attention_bias = nn.Embedding(32, config.num_attention_heads)

    def forward(self, src_tokens):
        padding = src_tokens.eq(self.padding_idx)
        real = (~padding).long()
        positions = real.cumsum(1) * real + self.padding_idx
        x = self.emb_layer_norm(self.embed_tokens(src_tokens) + self.embed_positions(positions))
        T = src_tokens.shape[1]
        place = torch.arange(T, device=src_tokens.device)
        bias = self.relative_attention_bias(bucket(place[None, :] - place[:, None]))
        bias = bias.permute(2, 0, 1)[None].expand(src_tokens.shape[0], -1, -1, -1)
        x = x.transpose(0, 1)  # T x B x C
        for layer in self.layers:
            x = layer(x, padding, bias)
        return x.transpose(0, 1)


# A time-major BERT taking fairseq's key_padding_mask, with its own q, k, v and out projections


class TimeMajorLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.heads = c.num_attention_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(h, h) for _ in range(4))
        self.attn_ln = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.fc1, self.fc2 = nn.Linear(h, c.intermediate_size), nn.Linear(c.intermediate_size, h)
        self.ffn_ln = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x, key_padding_mask):
        T, B, C = x.shape
        d = C // self.heads
        q, k, v = (p(x).contiguous().view(T, B * self.heads, d).transpose(0, 1)
                   for p in (self.q_proj, self.k_proj, self.v_proj))  # fmt: skip
        w = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(d)
        w = w.view(B, self.heads, T, T).masked_fill(key_padding_mask[:, None, None, :], -1e9)
        out = torch.bmm(w.view(B * self.heads, T, T).softmax(-1), v)
        x = self.attn_ln(x + self.out_proj(out.transpose(0, 1).contiguous().view(T, B, C)))
        return self.ffn_ln(x + self.fc2(F.gelu(self.fc1(x))))


class TimeMajor(nn.Module):
    """src_tokens (T, B), key_padding_mask (B, T) True at the padding; states (T, B, C)."""

    eps = None

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, h)
        self.embed_positions = nn.Embedding(config.max_position_embeddings, h)
        self.embed_segments = nn.Embedding(config.type_vocab_size, h)
        self.emb_ln = nn.LayerNorm(h, eps=self.eps or config.layer_norm_eps)
        self.layers = nn.ModuleList(TimeMajorLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, src_tokens, segment_labels, key_padding_mask):
        T = src_tokens.shape[0]
        positions = torch.arange(T, device=src_tokens.device)[:, None]
        x = self.embed_tokens(src_tokens) + self.embed_positions(positions)
        x = self.emb_ln(x + self.embed_segments(segment_labels))
        for layer in self.layers:
            x = layer(x, key_padding_mask)
        return x


class TimeMajorEps(TimeMajor):
    """Must fail: the embeddings' LayerNorm with eps 1e-5."""

    eps = 1e-5


class FromZeroRoberta(nn.Module):
    """A RoBERTa counting positions from 0 over every place, padding included, into a table
    without the two reserved rows (as BERT counts): right on right padding alone."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.pad = config.pad_token_id
        self.word_embeddings = nn.Embedding(config.vocab_size, h, padding_idx=self.pad)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, h)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, h)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.blocks = nn.ModuleList(
            Block(config, keep_filled) for _ in range(config.num_hidden_layers)
        )

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        where = torch.arange(input_ids.shape[1], device=input_ids.device)
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        x = self.word_embeddings(input_ids) + self.position_embeddings(where)[None]
        x = self.norm(x + self.token_type_embeddings(types))
        for block in self.blocks:
            x = block(x, attention_mask.bool())
        return x


# Models that lack a part of BERT's or add one: refused, naming it --------------------------


class Sinusoidal(Encoder):
    """Fixed sinusoids for positions, computed in forward: no table of them."""

    def __init__(self, config):
        super().__init__(config)
        del self.pos

    def embed(self, ids, types):
        T, H = ids.shape[1], self.tok.embedding_dim
        place = torch.arange(T, dtype=torch.float32)[:, None]
        rate = torch.exp(torch.arange(0, H, 2).float() * (-math.log(10000.0) / H))
        table = torch.zeros(T, H)
        table[:, 0::2], table[:, 1::2] = torch.sin(place * rate), torch.cos(place * rate)
        types = torch.zeros_like(ids) if types is None else types
        return self.ln(self.tok(ids) + table[None] + self.seg(types))

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.encode(input_ids, token_type_ids, attention_mask.bool())[-1]


class NoEmbeddingNorm(KeepMask):
    """The embeddings summed, no LayerNorm over them."""

    def __init__(self, config):
        super().__init__(config)
        del self.ln

    def embed(self, ids, types):
        where = torch.arange(ids.shape[1], device=ids.device)
        return self.tok(ids) + self.pos(where)[None] + self.seg(types)


class ScaledWords(KeepMask):
    """The token embeddings scaled by sqrt(hidden size), as the Transformer paper's are."""

    def embed(self, ids, types):
        where = torch.arange(ids.shape[1], device=ids.device)
        words = self.tok(ids) * math.sqrt(self.tok.embedding_dim)
        return self.ln(words + self.pos(where)[None] + self.seg(types))


class ReluBlocks(KeepMask):
    """ReLU in the feed-forward, where BERT has GELU."""

    def __init__(self, config):
        super().__init__(config)
        for block in self.blocks:
            block.act = F.relu


class PreLNBlock(Block):
    def forward(self, x, mask):
        B, T, H = x.shape
        d = H // self.heads
        y = self.ln1(x)
        q, k, v = (p(y).view(B, T, self.heads, d).transpose(1, 2) for p in (self.q, self.k, self.v))
        scores = self.fill(q @ k.transpose(-2, -1) / math.sqrt(d), mask)
        x = x + self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class PreLNWithFinalNorm(KeepMask):
    """LayerNorms before each sublayer, and one after the last layer (GPT-2's, ViT's)."""

    def __init__(self, config):
        super().__init__(config)
        self.blocks = nn.ModuleList(
            PreLNBlock(config, keep_filled) for _ in range(config.num_hidden_layers)
        )
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        return self.final_norm(super().forward(input_ids, attention_mask, token_type_ids))
