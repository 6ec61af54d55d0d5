"""BERTs as people write them, each with one of the habits or slips of issue 31's fifth hostile
pass: a mask cached by its shape, attention in blocks, outputs returned in half precision, the
pooler's `x[0]`, position ids asked for, a mask True at the padding, more returned than the last
layer, a masked-LM head's log-softmax, a head reading the wrong state, pre-LN blocks returning
every state, a model built in half precision. Written as a tutorial writes BERT: separate query,
key and value, an additive mask, post-LN blocks, a tanh pooler."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def split(self, x):
        B, T, H = x.shape
        return x.view(B, T, self.heads, H // self.heads).transpose(1, 2)

    def forward(self, x, bias):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
        return (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)


class Block(nn.Module):
    def __init__(self, config, pre_ln=False):
        super().__init__()
        H, eps = config.hidden_size, config.layer_norm_eps
        self.pre_ln = pre_ln
        self.attention = SelfAttention(H, config.num_attention_heads)
        self.attention_out = nn.Linear(H, H)
        self.norm1 = nn.LayerNorm(H, eps=eps)
        self.up = nn.Linear(H, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, H)
        self.norm2 = nn.LayerNorm(H, eps=eps)

    def forward(self, x, bias):
        if self.pre_ln:
            x = x + self.attention_out(self.attention(self.norm1(x), bias))
            return x + self.down(F.gelu(self.up(self.norm2(x))))
        x = self.norm1(x + self.attention_out(self.attention(x, bias)))
        return self.norm2(x + self.down(F.gelu(self.up(x))))


class TutorialBert(nn.Module):
    pre_ln = False

    def __init__(self, config):
        super().__init__()
        H = config.hidden_size
        self.word = nn.Embedding(config.vocab_size, H)
        self.position = nn.Embedding(config.max_position_embeddings, H)
        self.segment = nn.Embedding(config.type_vocab_size, H)
        self.norm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.blocks = nn.ModuleList(
            Block(config, self.pre_ln) for _ in range(config.num_hidden_layers)
        )
        self.pool = nn.Linear(H, H)

    def attention_bias(self, attention_mask):
        return (1.0 - attention_mask[:, None, None, :].float()) * -10000.0

    def embed(self, input_ids, token_type_ids, position_ids=None):
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word(input_ids) + self.position(position_ids) + self.segment(token_type_ids)
        return self.norm(x)

    def states(self, input_ids, attention_mask, token_type_ids, position_ids=None):
        bias = self.attention_bias(attention_mask)
        states = [self.embed(input_ids, token_type_ids, position_ids)]
        for block in self.blocks:
            states.append(block(states[-1], bias))
        return states

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.states(input_ids, attention_mask, token_type_ids)[-1]
        return x, torch.tanh(self.pool(x[:, 0]))


class CachedMaskBert(TutorialBert):
    """Keeps the attention bias of each batch shape it has seen (a common speed-up): right on
    the first batch of a shape, wrong on the next one of that shape padded otherwise."""

    def __init__(self, config):
        super().__init__(config)
        self.cache = {}

    def attention_bias(self, attention_mask):
        shape = tuple(attention_mask.shape)
        if shape not in self.cache:
            self.cache[shape] = super().attention_bias(attention_mask)
        return self.cache[shape]


class BlockAttentionBert(TutorialBert):
    """Attends within blocks of `block` tokens only: exact on sequences no longer than a
    block, wrong past it."""

    block = 64

    def attention_bias(self, attention_mask):
        blocks = torch.arange(attention_mask.shape[1]) // self.block
        apart = (blocks[:, None] != blocks[None, :]).float() * -10000.0
        return super().attention_bias(attention_mask) + apart


class Block56Bert(BlockAttentionBert):
    block = 56  # past verify's 48 random tokens, short of a tiny checkpoint's 64 positions


class HalfOutputBert(TutorialBert):
    """Computes in float32, returns float16 (to save memory, say)."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        x, pooled = super().forward(input_ids, attention_mask, token_type_ids)
        return x.half(), pooled.half()


class BFloat16OutputBert(TutorialBert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        x, pooled = super().forward(input_ids, attention_mask, token_type_ids)
        return x.to(torch.bfloat16), pooled.to(torch.bfloat16)


class PoolerSlipBert(TutorialBert):
    """x[0] for x[:, 0]: the first sequence's tokens pooled, not each sequence's first."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.states(input_ids, attention_mask, token_type_ids)[-1]
        return x, torch.tanh(self.pool(x[0]))


class PositionIdsBert(TutorialBert):
    """forward(input_ids, attention_mask, position_ids): no token types asked for."""

    def forward(self, input_ids, attention_mask, position_ids):
        types = torch.zeros_like(input_ids)
        x = self.states(input_ids, attention_mask, types, position_ids)[-1]
        return x, torch.tanh(self.pool(x[:, 0]))


class LabelsBert(TutorialBert):
    """A training forward: labels required, which bertconv cannot give."""

    def forward(self, input_ids, attention_mask, labels):
        return super().forward(input_ids, attention_mask, torch.zeros_like(input_ids))


class PaddingMaskBert(TutorialBert):
    """`mask` True at the padding, under a name that says nothing of it."""

    def forward(self, input_ids, mask, token_type_ids):
        return super().forward(input_ids, (~mask).long(), token_type_ids)


class EveryStateBert(TutorialBert):
    """Returns the embeddings and the sum of the last four layers beside the last layer's (the
    feature-extraction recipe of the BERT paper)."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        states = self.states(input_ids, attention_mask, token_type_ids)
        pooled = torch.tanh(self.pool(states[-1][:, 0]))
        return states[0], states[-1], sum(states[-4:]), pooled


class PreLNBert(TutorialBert):
    """Each sublayer's LayerNorm before it (GPT-2's way, not BERT's), every state returned."""

    pre_ln = True

    def forward(self, input_ids, attention_mask, token_type_ids):
        states = self.states(input_ids, attention_mask, token_type_ids)
        pooled = torch.tanh(self.pool(states[-1][:, 0]))
        return {"last_hidden_state": states[-1], "hidden_states": states, "pooler_output": pooled}


def half_built(config):
    """Built in half precision (to save memory), as a user's factory may return it."""
    return TutorialBert(config).half()


class MaskedLMBert(TutorialBert):
    """With a masked-LM head: a transform (dense, GELU, LayerNorm), then a decoder."""

    def __init__(self, config):
        super().__init__(config)
        H = config.hidden_size
        self.transform = nn.Linear(H, H)
        self.transform_norm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(H, config.vocab_size)

    def head_input(self, states):
        return states[-1]

    def predictions(self, logits):
        return logits

    def forward(self, input_ids, attention_mask, token_type_ids):
        states = self.states(input_ids, attention_mask, token_type_ids)
        h = self.transform_norm(F.gelu(self.transform(self.head_input(states))))
        pooled = torch.tanh(self.pool(states[-1][:, 0]))
        return states[-1], pooled, self.predictions(self.decoder(h))


class LogSoftmaxMLMBert(MaskedLMBert):
    """Returns the log-probabilities (BERT-pytorch's head ends in LogSoftmax)."""

    def predictions(self, logits):
        return F.log_softmax(logits, dim=-1)


class SoftmaxMLMBert(MaskedLMBert):
    def predictions(self, logits):
        return logits.softmax(-1)


class EmbeddingsMLMBert(MaskedLMBert):
    """The head reads the embeddings' output: a slip no checkpoint without the head shows."""

    def head_input(self, states):
        return states[0]


class AutocastLongBert(TutorialBert):
    """Long sequences under bfloat16 autocast, to save memory: exact in float64 (autocast
    leaves it alone), off by ~1e-2 in float32 past 48 tokens."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        if input_ids.shape[1] <= 48:
            return super().forward(input_ids, attention_mask, token_type_ids)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x, pooled = super().forward(input_ids, attention_mask, token_type_ids)
        return x.to(self.pool.weight.dtype), pooled.to(self.pool.weight.dtype)


class NoDecoderBiasMLMBert(MaskedLMBert):
    """Must not pass: its decoder's bias held (and loaded) but never added: the logits are the
    projection alone. Every layer right."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        states = self.states(input_ids, attention_mask, token_type_ids)
        h = self.transform_norm(F.gelu(self.transform(states[-1])))
        pooled = torch.tanh(self.pool(states[-1][:, 0]))
        return states[-1], pooled, h @ self.decoder.weight.T
