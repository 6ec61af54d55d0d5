"""BERT from scratch: the encoder of Devlin et al. (2018), computing what transformers' BertModel
computes, in one file read top to bottom; the task classes that put a head on it (pre-training,
masked LM, ..., question answering) are in heads.py, which names them all (`heads.CLASSES`).
It reads nothing but its config: which architecture it computes, the config says (BERT's
family; and the modern encoders' rotary positions, local windows, gated feed-forwards and norms
before each sublayer, for ModernBERT and NomicBERT).

Parameter names follow seed 000 ("Code Review for BERT"): attention projections are `Wq/Wk/Wv`,
LayerNorms hold `gamma/beta`; everything else keeps the names of the original release
(`embeddings.word_embeddings`, `encoder.layer.N.attention.output.dense`, `pooler.dense`, ...).
`mappings/bertconv.toml` relates these names to the official ones.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .config import ACTIVATIONS, RELATIVE_BUCKETS, BertConfig


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function a config's hidden_act names (config.ACTIVATIONS)."""
    function, kwargs = ACTIVATIONS[name]
    return partial(getattr(F, function), **kwargs)


class LayerNorm(nn.Module):
    """Normalise over the hidden features, then scale by gamma and shift by beta (none where
    the model's norms have no bias: ModernBERT's)."""

    def __init__(self, hidden_size: int, eps: float, bias: bool = True):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(hidden_size))
        self.beta = nn.Parameter(torch.zeros(hidden_size)) if bias else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta, self.eps)


class Embeddings(nn.Module):
    """Token + position + segment embeddings, summed and normalised."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = (  # rotary positions are the attention's: no table
            None
            if config.rotary
            else nn.Embedding(config.max_position_embeddings, config.hidden_size)
        )
        self.token_type_embeddings = (  # DistilBERT and ModernBERT have none
            nn.Embedding(config.type_vocab_size, config.hidden_size) if config.token_types else None
        )
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps, config.norm_bias)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.relative = config.relative or config.rotary
        # RoBERTa's positions: the real tokens counted from pad_token_id + 1, the padding's the
        # pad id (its ids, not the mask, say which is which, as in transformers).
        self.pad = config.pad_token_id if config.positions_after_pad else None

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        # Summed in transformers' order, so that float rounding matches it too.
        x = self.word_embeddings(input_ids)
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(token_type_ids)
        if self.relative:  # relative or rotary positions are the attention's
            return self.dropout(self.LayerNorm(x))
        positions = torch.arange(input_ids.shape[1], device=x.device)
        if self.pad is not None:
            real = input_ids.ne(self.pad).long()
            positions = real.cumsum(1) * real + self.pad
        return self.dropout(self.LayerNorm(x + self.position_embeddings(positions)))


class Padding:
    """Where the real tokens of a padded (B, T) batch are. Padding carries no information, so
    the dense layers (projections and feed-forward: nearly all the arithmetic) run on the real
    tokens alone, packed into one (N, features) matrix. Attention, which needs each sequence
    whole, spreads them out to (B, T, features) and packs its result again."""

    def __init__(self, attention_mask: torch.Tensor | None, shape: torch.Size) -> None:
        self.shape = shape  # (B, T)
        self.real = self.key_mask = None
        # A mask that hides nothing is no mask: nothing to pack, and SDPA, given no mask, takes
        # its fastest kernel (transformers drops such a mask too).
        if attention_mask is not None and not bool(attention_mask.all()):
            real = attention_mask.flatten().bool()  # (B * T,)
            self.real = real.nonzero().squeeze(1)  # (N,), into B * T
            # Each position's row among the N real tokens. Unpacking gathers these rows (a
            # gather is much faster than a scatter on a GPU); a padded position reads row N,
            # a row of zeros, or, where any values will do, row 0.
            row = real.cumsum(0) - 1
            self.rows = torch.where(real, row, len(self.real))
            self.any_rows = torch.where(real, row, 0)
            # A key-padding mask, broadcast by SDPA: no (B, heads, T, T) tensor is ever built.
            self.key_mask = attention_mask.bool()[:, None, None, :]

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, F) -> (N, F): the real tokens only."""
        x = x.reshape(-1, x.shape[-1])
        return x if self.real is None else x.index_select(0, self.real)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(N, F) -> (B, T, F), zeros at the padding."""
        if self.real is not None:
            x = torch.cat([x, x.new_zeros(1, x.shape[-1])]).index_select(0, self.rows)
        return x.view(*self.shape, x.shape[-1])

    def spread(self, x: torch.Tensor) -> torch.Tensor:
        """(N, F) -> (B, T, F), anything at the padding: attention's queries, keys and values,
        where the key mask hides padded keys and pack drops what padded queries compute."""
        if self.real is None or len(x) == 0:  # no row 0 in a batch of padding alone
            return self.unpack(x)
        return x.index_select(0, self.any_rows).view(*self.shape, x.shape[-1])


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim) + bias) v, per head: (B, heads, T, head_dim). key_mask,
    broadcast to (B, 1, T, T), is True where a query may see a key (the real keys, within the
    window where there is one); bias, broadcast to (B, heads, T, T), is added to the scaled
    scores (the relative-position term), the hidden keys then set to -inf in it."""
    mask = key_mask
    if bias is not None:
        mask = bias if key_mask is None else bias.masked_fill(~key_mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


def relative_position_bucket(
    distance: torch.Tensor, buckets: int = RELATIVE_BUCKETS, farthest: int = 128
):
    """T5's buckets of the distance from a query to a key (key - query), as MPNet uses them:
    half the buckets for keys before the query, half for keys after; within each half, a
    bucket for each distance below a quarter of the buckets (8), then buckets growing
    logarithmically up to `farthest`, beyond which all distances share the last."""
    half = buckets // 2
    after = (distance > 0).long() * half  # keys after the query: the second half
    n = distance.abs()
    exact = half // 2
    far = (
        exact + (torch.log(n.float() / exact) / math.log(farthest / exact) * (half - exact)).long()
    )
    return after + torch.where(n < exact, n, far.clamp(max=half - 1))


def rotary(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary positions (Su et al., 2021), as ModernBERT and NomicBERT rotate: each head's two
    halves are a vector's two coordinates, turned by position * theta^(-2i / head_dim) for its
    i-th pair; computed in float32. (B, heads, T, head_dim)."""
    T, head_dim = x.shape[-2], x.shape[-1]
    exponent = torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float) / head_dim
    angles = torch.arange(T, device=x.device, dtype=torch.float)[:, None] / theta**exponent
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x.float().chunk(2, dim=-1)
    return (x.float() * cos + torch.cat([-second, first], dim=-1) * sin).to(x.dtype)


def window(length: int, reach: int, device) -> torch.Tensor:
    """(T, T): True where a query (row) and a key (column) are at most `reach` apart."""
    positions = torch.arange(length, device=device)
    return (positions[:, None] - positions[None, :]).abs() <= reach


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product attention: softmax(Q K^T / sqrt(head_dim)) V, per head.

    With relative position embeddings (Shaw et al., 2018; Huang et al., 2020: transformers 4's
    position_embedding_type "relative_key" and "relative_key_query"), each query (and key) also
    meets a learned vector for its distance to the other token, the products added to the
    scores.

    With rotary positions, queries and keys are turned by their positions before they meet
    (rotary); a local layer (ModernBERT's) sees keys within its window alone."""

    def __init__(self, config: BertConfig, layer: int = 0):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        H, bias = config.hidden_size, config.linear_bias
        self.Wq, self.Wk, self.Wv = (nn.Linear(H, H, bias=bias) for _ in range(3))
        local = config.is_local(layer)
        self.reach = config.reach if local else None  # None: no window (0: the token alone)
        self.theta = (local and config.local_rotary_theta) or config.rotary_theta
        self.theta = self.theta if config.rotary else 0
        self.dropout_p = config.attention_probs_dropout_prob
        self.position_embedding_type = config.position_embedding_type
        if config.relative:  # a vector per distance, -(max - 1) .. max - 1
            self.distance_embedding = nn.Embedding(config.relative_distances, self.head_dim)
            self.max_positions = config.max_position_embeddings

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, hidden) -> (B, heads, T, head_dim)"""
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    def relative_scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(B, heads, T, T): q_l . d(l - r), and + k_r . d(l - r) for relative_key_query; scaled
        as the scores are (SDPA scales Q K^T itself, and adds these as they are)."""
        positions = torch.arange(q.shape[2], device=q.device)
        distance = positions[:, None] - positions[None, :]  # (T, T)
        d = self.distance_embedding(distance + self.max_positions - 1).to(q.dtype)  # (T, T, hd)
        scores = torch.einsum("bhld,lrd->bhlr", q, d)
        if self.position_embedding_type == "relative_key_query":
            scores = scores + torch.einsum("bhrd,lrd->bhlr", k, d)
        return scores / math.sqrt(self.head_dim)

    def forward(self, x: torch.Tensor, padding: Padding, shared=None) -> torch.Tensor:
        """(N, hidden), the real tokens, -> (N, hidden); `shared`: a bias every layer adds to
        its scores (MPNet's), (1, heads, T, T)."""
        q, k, v = (self.split_heads(padding.spread(W(x))) for W in (self.Wq, self.Wk, self.Wv))
        if self.theta:
            q, k = rotary(q, self.theta), rotary(k, self.theta)
        bias = self.relative_scores(q, k) if hasattr(self, "distance_embedding") else None
        if shared is not None:
            bias = shared.to(q.dtype) if bias is None else bias + shared.to(q.dtype)
        mask = padding.key_mask
        if self.reach is not None:
            band = window(q.shape[2], self.reach, q.device)
            mask = band if mask is None else mask & band
        dropout = self.dropout_p if self.training else 0.0
        out = attention(q, k, v, mask, bias, dropout)  # (B, heads, T, head_dim)
        return padding.pack(out.transpose(1, 2).flatten(2))  # the heads side by side again


class AddNorm(nn.Module):
    """Project back to the hidden size, add the residual, normalise: "Add & Norm"."""

    def __init__(self, in_features: int, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size, bias=config.linear_bias)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps, config.norm_bias)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    def __init__(self, config: BertConfig, layer: int = 0):
        super().__init__()
        self.self = SelfAttention(config, layer)
        self.output = AddNorm(config.hidden_size, config)

    def forward(self, x: torch.Tensor, padding: Padding, shared=None) -> torch.Tensor:
        return self.output(self.self(x, padding, shared), x)


class Intermediate(nn.Module):
    """The first half of the position-wise feed-forward network, with its activation; gated
    (GLU variants, Shazeer 2020: ModernBERT's GeGLU, NomicBERT's SwiGLU), the activation's
    output times a second projection of the same input."""

    def __init__(self, config: BertConfig):
        super().__init__()
        H, inner, bias = config.hidden_size, config.intermediate_size, config.linear_bias
        self.dense = nn.Linear(H, inner, bias=bias)
        self.up = nn.Linear(H, inner, bias=bias) if config.gated else None
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.dense(x))
        return h if self.up is None else h * self.up(x)


class Layer(nn.Module):
    """One encoder block: self-attention, then the feed-forward network, each with Add & Norm."""

    def __init__(self, config: BertConfig, layer: int = 0):
        super().__init__()
        self.attention = Attention(config, layer)
        self.intermediate = Intermediate(config)
        self.output = AddNorm(config.intermediate_size, config)

    def forward(self, x: torch.Tensor, padding: Padding, shared=None) -> torch.Tensor:
        x = self.attention(x, padding, shared)
        return self.output(self.intermediate(x), x)


class PreNormLayer(nn.Module):
    """One encoder block with the LayerNorm before each sublayer and the residual added after
    it (Xiong et al., 2020; ModernBERT's): x + attention(norm(x)), then x + feed-forward(norm(x)).
    The first layer has no norm before its attention: the embeddings' norm is it."""

    def __init__(self, config: BertConfig, layer: int = 0):
        super().__init__()
        H, eps, bias = config.hidden_size, config.layer_norm_eps, config.norm_bias
        self.attention_norm = LayerNorm(H, eps, bias) if layer else None
        self.attention = SelfAttention(config, layer)
        self.attention_output = nn.Linear(H, H, bias=config.linear_bias)
        self.mlp_norm = LayerNorm(H, eps, bias)
        self.intermediate = Intermediate(config)
        self.output = nn.Linear(config.intermediate_size, H, bias=config.linear_bias)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, padding: Padding, shared=None) -> torch.Tensor:
        h = x if self.attention_norm is None else self.attention_norm(x)
        x = x + self.dropout(self.attention_output(self.attention(h, padding, shared)))
        return x + self.dropout(self.output(self.intermediate(self.mlp_norm(x))))


class Encoder(nn.Module):
    """The stack of layers; with MPNet's relative attention bias, one table of a number per
    head for each bucket of query-key distances, its bias added to every layer's scores."""

    def __init__(self, config: BertConfig):
        super().__init__()
        block = PreNormLayer if config.norm_first else Layer
        self.layer = nn.ModuleList(block(config, i) for i in range(config.num_hidden_layers))
        # with the norms before each sublayer, one after the last layer (ModernBERT's)
        self.final_norm = (
            LayerNorm(config.hidden_size, config.layer_norm_eps, config.norm_bias)
            if config.norm_first
            else None
        )
        if config.relative_bias:
            buckets, heads = config.relative_attention_num_buckets, config.num_attention_heads
            self.relative_attention_bias = nn.Embedding(buckets, heads)

    def position_bias(self, length: int, device) -> torch.Tensor | None:
        """(1, heads, T, T): each head's bias for each query (row) and key (column), from the
        bucket of their distance (32 buckets, as transformers' MPNet computes them whatever
        the table's size)."""
        if not hasattr(self, "relative_attention_bias"):
            return None
        positions = torch.arange(length, device=device)
        distance = positions[None, :] - positions[:, None]  # key - query
        per_head = self.relative_attention_bias(relative_position_bucket(distance))  # (T, T, heads)
        return per_head.permute(2, 0, 1)[None]

    def forward(self, x: torch.Tensor, padding: Padding, every: bool = True) -> list[torch.Tensor]:
        """Every layer's output (B, T, hidden), the embeddings' first; or, where not `every`,
        the last layer's alone (the tokens stay packed till then: nothing is unpacked twice)."""
        hidden_states, h = [x], padding.pack(x)  # h: (N, hidden), the real tokens
        shared = self.position_bias(x.shape[1], x.device)
        for layer in self.layer:
            h = layer(h, padding, shared)
            if every:
                hidden_states.append(padding.unpack(h))
        return hidden_states if every else [padding.unpack(h)]


class Pooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence representation the sentence-level heads read."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, hidden); zeros at padded positions
    pooler_output: torch.Tensor | None  # (B, hidden); None for a model without a pooler
    # the embeddings' output, then every layer's (None where output_hidden_states=False, as in
    # transformers)
    hidden_states: tuple[torch.Tensor, ...] | None


class BertModel(nn.Module):
    """The BERT encoder: embeddings, a stack of layers, and (usually) the pooler."""

    def __init__(self, config: BertConfig, pooler: bool = True):
        """pooler: whether to build one (transformers' BertModel does; ElectraModel does not)."""
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config) if pooler else None
        self.sentences = None  # a sentence-transformers pipeline, where loaded with one (encode)

    def encoded(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = True,
    ) -> tuple[BertOutput, Padding]:
        """The encoder's output, and where the real tokens are (for the heads). Every layer's
        hidden state, or (output_hidden_states=False) none but the last, which is faster."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        padding = Padding(attention_mask, input_ids.shape)
        x = self.embeddings(input_ids, token_type_ids)
        hidden_states = self.encoder(x, padding, every=output_hidden_states)
        last = hidden_states[-1]
        if self.encoder.final_norm is not None:  # the last state is the normed one, as
            last = padding.unpack(self.encoder.final_norm(padding.pack(last)))  # transformers'
            hidden_states[-1] = last
        pooled = self.pooler(last) if self.pooler is not None else None
        kept = tuple(hidden_states) if output_hidden_states else None
        return BertOutput(last, pooled, kept), padding

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = True,
    ) -> BertOutput:
        return self.encoded(input_ids, attention_mask, token_type_ids, output_hidden_states)[0]

    def encode(self, sentences: list[str], batch_size: int = 32, prompt_name=None, prompt=None):
        """The sentence embeddings (N, D) of `sentences`, as the sentence-transformers directory
        the model was loaded from computes them (its tokenizer, pooling, Dense, Normalize,
        prompts): `SentenceTransformer(DIR).encode(sentences, convert_to_tensor=True)`."""
        if self.sentences is None:
            raise ValueError(
                "this model computes no sentence embedding: bertconv.load() it from a "
                "sentence-transformers directory (one with modules.json)"
            )
        return self.sentences.encode(self, sentences, batch_size, prompt_name, prompt)
