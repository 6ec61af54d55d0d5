"""pkgbert's model: its layer comes from `.layers`, a relative import."""

import torch
from torch import nn

from .layers import Layer, Norm


class PkgBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.emb = nn.Embedding(config.vocab_size, h)
        self.pos = nn.Embedding(config.max_position_embeddings, h)
        self.tt = nn.Embedding(config.type_vocab_size, h)
        self.norm = Norm(h, config.layer_norm_eps)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))

    def forward(self, src, src_mask, tt_ids):
        x = self.emb(src) + self.tt(tt_ids) + self.pos(torch.arange(src.shape[1]))
        x = self.norm(x)
        for layer in self.layers:
            x = layer(x, src_mask)
        return x
