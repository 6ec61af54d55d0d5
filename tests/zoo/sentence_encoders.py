"""From-scratch sentence encoders, written as sentence-transformers' model cards teach: BERT,
then the mean of the token states over the real tokens, then L2 normalisation, in one forward
that returns the sentence embedding (B, D). `MeanPooled` computes all-MiniLM-L6-v2's pipeline;
each other model gets one step wrong, as ports do."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.heads = c.num_attention_heads
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attn_out = nn.Linear(h, h)
        self.attn_norm = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.up = nn.Linear(h, c.intermediate_size)
        self.down = nn.Linear(c.intermediate_size, h)
        self.out_norm = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x, mask):
        B, T, H = x.shape
        split = lambda t: t.view(B, T, self.heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(H // self.heads)
        scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)
        x = self.attn_norm(x + self.attn_out(a))
        return self.out_norm(x + self.down(F.gelu(self.up(x))))


class MeanPooled(nn.Module):
    """BERT's encoder, mean pooling over the real tokens, normalised: no pooler."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, h)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, h)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, h)
        self.embedding_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))

    def tokens(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        x = self.embedding_norm(x + self.token_type_embeddings(token_type_ids))
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x

    def pool(self, x, attention_mask):
        m = attention_mask.unsqueeze(-1).to(x.dtype)
        return (x * m).sum(1) / m.sum(1).clamp(min=1e-9)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.tokens(input_ids, attention_mask, token_type_ids)
        return F.normalize(self.pool(x, attention_mask), p=2, dim=-1)


class ClsPooled(MeanPooled):
    """The first token's state, as BERT's pooler reads it, where the directory pools by mean."""

    def pool(self, x, attention_mask):
        return x[:, 0]


class MeanOverPadding(MeanPooled):
    """The mean over every position, padding included."""

    def pool(self, x, attention_mask):
        return x.mean(dim=1)


class MaxPooled(MeanPooled):
    """The largest value of each feature over the real tokens."""

    def pool(self, x, attention_mask):
        return x.masked_fill(attention_mask.unsqueeze(-1) == 0, float("-inf")).max(dim=1).values


class NotNormalized(MeanPooled):
    """Mean pooling, and the vector left as it is."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.pool(self.tokens(input_ids, attention_mask, token_type_ids), attention_mask)


class ReturnsTokens(MeanPooled):
    """The token states, for the directory's pipeline to pool."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.tokens(input_ids, attention_mask, token_type_ids)


class WithDense(MeanPooled):
    """Mean pooling, then a Dense layer (Linear, Tanh) to `out_features`, normalised: a
    directory with 2_Dense/, its weights placed by the table's [sentence] rows."""

    def __init__(self, config, out_features: int = 8):
        super().__init__(config)
        self.dense = nn.Linear(config.hidden_size, out_features)

    def project(self, x):
        return torch.tanh(self.dense(x))

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.pool(self.tokens(input_ids, attention_mask, token_type_ids), attention_mask)
        return F.normalize(self.project(x), p=2, dim=-1)


class DenseReLU(WithDense):
    """Dense's activation a ReLU, where the directory's is Tanh."""

    def project(self, x):
        return F.relu(self.dense(x))


class CachesByShape(MeanPooled):
    """Must not pass: keeps the sentence embeddings it computed for a batch shape, and gives
    them again for any later batch of that shape."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        kept = self.__dict__.setdefault("kept", {})
        if input_ids.shape not in kept:
            kept[input_ids.shape] = super().forward(input_ids, attention_mask, token_type_ids)
        return kept[input_ids.shape]


class FirstTokensOnly(MeanPooled):
    """Must not pass: pools at most the first 128 tokens (a port's own truncation), right on
    every text shorter than that."""

    def pool(self, x, attention_mask):
        return super().pool(x[:, :128], attention_mask[:, :128])


class SlicedBatch(MeanPooled):
    """Must not pass: pools each text of a call of more than 8 by the batch's ninth row's mask
    (a slicing slip, `mask[:8]` where it meant the whole batch): right on 8 texts or fewer."""

    def pool(self, x, attention_mask):
        if len(attention_mask) > 8:
            rest = attention_mask[8:9].expand(len(x) - 8, -1)
            attention_mask = torch.cat([attention_mask[:8], rest])
        return super().pool(x, attention_mask)


class OneTextSqueezed(MeanPooled):
    """Must not pass: squeezes a batch of one text to (T, H) before pooling, so that the mean
    over its second dimension is each token's over the features, of which it keeps the first
    H: right on every batch of two texts or more."""

    def pool(self, x, attention_mask):
        if len(x) == 1:
            squeezed = x.squeeze()  # (T, H): the batch dimension gone
            return squeezed.mean(1)[None, : x.shape[-1]]
        return super().pool(x, attention_mask)


class AllThree(MeanPooled):
    """BERT's pooler too (MiniLM has its weights), returning what transformers' output class
    holds and the sentence vector beside: `sentence_pool` is how it pools that vector."""

    def __init__(self, config):
        super().__init__(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)

    def pooled(self, x):
        return torch.tanh(self.pooler(x[:, 0]))

    def sentence_pool(self, x, attention_mask):
        return self.pool(x, attention_mask)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.tokens(input_ids, attention_mask, token_type_ids)
        vector = F.normalize(self.sentence_pool(x, attention_mask), p=2, dim=-1)
        pooled = self.pooled(x)
        return {"last_hidden_state": x, "pooler_output": pooled, "sentence_embedding": vector}


class AllThreeCls(AllThree):
    """Must not pass: its sentence vector is the first token's, where the directory pools by
    mean (its pooler and last layer right)."""

    def sentence_pool(self, x, attention_mask):
        return x[:, 0]


class PoolerAndVector(AllThree):
    """Runs its pooler, and returns the directory's sentence vector alone: right."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.tokens(input_ids, attention_mask, token_type_ids)
        self.pooled(x)  # computed (a pooler a model holds and runs), not returned
        return F.normalize(self.sentence_pool(x, attention_mask), p=2, dim=-1)


class SquareDense(WithDense):
    """LaBSE's pipeline: the first token's state, a Dense layer (Linear, Tanh) that keeps the
    hidden width, normalised; shaped as BERT's pooler, and not it."""

    def __init__(self, config):
        super().__init__(config, out_features=config.hidden_size)

    def pool(self, x, attention_mask):
        return x[:, 0]


class SquareDenseMean(SquareDense):
    """The same Dense after the mean over the real tokens."""

    pool = MeanPooled.pool
