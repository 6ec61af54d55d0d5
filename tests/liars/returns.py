"""BERTs that compute BERT inside but return something else: the embeddings, noise, nothing,
the hidden states out of order, the second-to-last layer. Written as tutorials write a BERT
(an encoder of post-LN blocks over nn.MultiheadAttention-free attention, a tanh pooler); only
what forward returns differs. None of them may pass verify."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, hidden, heads, inner, eps):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=eps)
        self.fc1 = nn.Linear(hidden, inner)
        self.fc2 = nn.Linear(inner, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, mask):
        B, T, H = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)
        x = self.ln1(x + self.proj(context))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Bert(nn.Module):
    def __init__(self, config):
        super().__init__()
        H, eps = config.hidden_size, config.layer_norm_eps
        self.tok = nn.Embedding(config.vocab_size, H)
        self.pos = nn.Embedding(config.max_position_embeddings, H)
        self.seg = nn.Embedding(config.type_vocab_size, H)
        self.ln = nn.LayerNorm(H, eps=eps)
        self.blocks = nn.ModuleList(
            Block(H, config.num_attention_heads, config.intermediate_size, eps)
            for _ in range(config.num_hidden_layers)
        )
        self.pool = nn.Linear(H, H)

    def states(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.ln(self.tok(input_ids) + self.pos(positions) + self.seg(token_type_ids))
        states = [x]
        for block in self.blocks:
            states.append(block(states[-1], attention_mask))
        return states, torch.tanh(self.pool(states[-1][:, 0]))

    def forward(self, input_ids, attention_mask, token_type_ids):
        states, pooled = self.states(input_ids, attention_mask, token_type_ids)
        return states[-1], pooled


class ReturnsEmbeddings(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        states, pooled = self.states(input_ids, attention_mask, token_type_ids)
        return states[0], pooled


class ReturnsNoise(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        states, pooled = self.states(input_ids, attention_mask, token_type_ids)
        return torch.randn_like(states[-1]), pooled


class ReturnsNone(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        self.states(input_ids, attention_mask, token_type_ids)


class ReturnsStatesReversed(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        states, pooled = self.states(input_ids, attention_mask, token_type_ids)
        return {"hidden_states": states[::-1], "pooler_output": pooled}


class ReturnsSecondToLast(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        states, pooled = self.states(input_ids, attention_mask, token_type_ids)
        return states[-2], pooled


class ReturnsRandomPooled(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        states, pooled = self.states(input_ids, attention_mask, token_type_ids)
        return states[-1], torch.rand_like(pooled)


class NormOutOfSight(Bert):
    """The embeddings' LayerNorm computed in numpy, where the trace cannot see it: the
    embeddings' output is never seen computed, so it cannot pass."""

    def states(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (self.tok(input_ids) + self.pos(positions) + self.seg(token_type_ids)).numpy()
        normed = (x - x.mean(-1, keepdims=True)) / (x.var(-1, keepdims=True) + self.ln.eps) ** 0.5
        gamma, beta = self.ln.weight.detach().numpy(), self.ln.bias.detach().numpy()
        states = [torch.from_numpy(normed * gamma + beta)]
        for block in self.blocks:
            states.append(block(states[-1], attention_mask))
        return states, torch.tanh(self.pool(states[-1][:, 0]))
