"""A sentiment classifier whose head is named for next sentence prediction: infer, led by the
name, places it as NSP; on a sentiment checkpoint that must fail, never pass without the
checkpoint's classifier."""

import torch
from torch import nn


class MisplacedHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.embed = nn.ModuleDict(
            {
                "words": nn.Embedding(config.vocab_size, h),
                "positions": nn.Embedding(config.max_position_embeddings, h),
                "segments": nn.Embedding(config.type_vocab_size, h),
            }
        )
        self.embed_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        layer = nn.TransformerEncoderLayer(
            h, config.num_attention_heads, config.intermediate_size, dropout=0.0,
            activation="gelu", layer_norm_eps=config.layer_norm_eps, batch_first=True,
        )  # fmt: skip
        self.encoder = nn.TransformerEncoder(
            layer, config.num_hidden_layers, enable_nested_tensor=False
        )
        self.pooler = nn.Linear(h, h)
        self.seq_relationship = nn.Linear(h, 2)

    def forward(self, input_ids, attention_mask, token_type_ids):
        e = self.embed
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = e["words"](input_ids) + e["positions"](positions) + e["segments"](token_type_ids)
        x = self.encoder(self.embed_norm(x), src_key_padding_mask=attention_mask == 0)
        return self.seq_relationship(torch.tanh(self.pooler(x[:, 0])))
