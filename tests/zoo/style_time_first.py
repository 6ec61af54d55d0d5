"""BERT that works time-first, as fairseq-era encoders do: the embeddings are turned from
(batch, tokens, features) into (tokens, batch, features) once, every layer and
`nn.MultiheadAttention` (batch_first=False, its default) work that way, and the forward returns
every hidden state time-first, with the pooled first token."""

import torch
import torch.nn.functional as F
from torch import nn


class EncoderLayer(nn.Module):
    def __init__(self, dim, ffn_dim, heads, eps):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(dim, eps=eps)
        self.fc1 = nn.Linear(dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, dim)
        self.final_layer_norm = nn.LayerNorm(dim, eps=eps)

    def forward(self, x, padding_mask):
        # x: T x B x C
        attended, _ = self.self_attn(x, x, x, key_padding_mask=padding_mask, need_weights=False)
        x = self.self_attn_layer_norm(x + attended)
        return self.final_layer_norm(x + self.fc2(F.gelu(self.fc1(x))))


class TimeFirstBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim, eps = config.hidden_size, config.layer_norm_eps
        self.padding_idx = config.pad_token_id
        self.embed_tokens = nn.Embedding(config.vocab_size, dim, self.padding_idx)
        self.embed_positions = nn.Embedding(config.max_position_embeddings, dim)
        self.segment_embeddings = nn.Embedding(config.type_vocab_size, dim)
        self.emb_layer_norm = nn.LayerNorm(dim, eps=eps)
        sizes = (dim, config.intermediate_size, config.num_attention_heads, eps)
        self.layers = nn.ModuleList(EncoderLayer(*sizes) for _ in range(config.num_hidden_layers))
        self.pooler = nn.Linear(dim, dim)

    def forward(self, tokens, segment_labels, padding_mask):
        positions = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
        x = self.embed_tokens(tokens) + self.embed_positions(positions)
        x = self.emb_layer_norm(x + self.segment_embeddings(segment_labels))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        inner_states = [x]
        for layer in self.layers:
            x = layer(x, padding_mask)
            inner_states.append(x)
        sentence_rep = torch.tanh(self.pooler(x[0, :, :]))
        return inner_states, sentence_rep
