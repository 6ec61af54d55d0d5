"""BERT with its feed-forward written as two `Conv1d(kernel_size=1)` over the channels, as older
"Attention is all you need" ports write the position-wise feed-forward (weights (out, in, 1)),
and attention through `nn.MultiheadAttention` with a key padding mask."""

import torch
import torch.nn.functional as F
from torch import nn


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_in, d_hid, eps):
        super().__init__()
        self.w_1 = nn.Conv1d(d_in, d_hid, 1)  # position-wise
        self.w_2 = nn.Conv1d(d_hid, d_in, 1)
        self.layer_norm = nn.LayerNorm(d_in, eps=eps)

    def forward(self, x):
        residual = x
        output = self.w_2(F.gelu(self.w_1(x.transpose(1, 2))))
        return self.layer_norm(output.transpose(1, 2) + residual)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, d_inner, n_head, eps):
        super().__init__()
        self.slf_attn = nn.MultiheadAttention(d_model, n_head, batch_first=True)
        self.attn_norm = nn.LayerNorm(d_model, eps=eps)
        self.pos_ffn = PositionwiseFeedForward(d_model, d_inner, eps)

    def forward(self, x, pad_mask):
        attended, _ = self.slf_attn(x, x, x, key_padding_mask=pad_mask, need_weights=False)
        return self.pos_ffn(self.attn_norm(x + attended))


class ConvBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.src_word_emb = nn.Embedding(config.vocab_size, d, padding_idx=config.pad_token_id)
        self.position_enc = nn.Embedding(config.max_position_embeddings, d)
        self.segment_emb = nn.Embedding(config.type_vocab_size, d)
        self.layer_norm = nn.LayerNorm(d, eps=eps)
        sizes = (d, config.intermediate_size, config.num_attention_heads, eps)
        self.layer_stack = nn.ModuleList(
            EncoderLayer(*sizes) for _ in range(config.num_hidden_layers)
        )
        self.pooler = nn.Linear(d, d)

    def forward(self, src_seq, src_segments, src_key_padding_mask):
        positions = torch.arange(src_seq.shape[1], device=src_seq.device)[None]
        x = self.src_word_emb(src_seq) + self.position_enc(positions)
        x = self.layer_norm(x + self.segment_emb(src_segments))
        for layer in self.layer_stack:
            x = layer(x, src_key_padding_mask)
        return x, torch.tanh(self.pooler(x[:, 0]))
