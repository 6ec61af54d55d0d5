"""BERT on torch's own nn.TransformerEncoder: the attention's query, key and value in one
in_proj_weight, a key-padding mask (True at padding), the pooler an nn.Sequential with its tanh."""

import torch
from torch import nn


class TorchEncoderBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, h, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, h)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, h)
        self.emb_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        layer = nn.TransformerEncoderLayer(
            d_model=h,
            nhead=config.num_attention_heads,
            dim_feedforward=config.intermediate_size,
            dropout=config.hidden_dropout_prob,
            activation="gelu",
            layer_norm_eps=config.layer_norm_eps,
            batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(
            layer, num_layers=config.num_hidden_layers, enable_nested_tensor=False
        )
        self.pooler = nn.Sequential(nn.Linear(h, h), nn.Tanh())

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.size(1), device=input_ids.device).unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = self.dropout(self.emb_norm(x + self.position_embeddings(positions)))
        padding = None if attention_mask is None else attention_mask == 0
        x = self.encoder(x, src_key_padding_mask=padding)
        return x, self.pooler(x[:, 0])
