"""A final LayerNorm left from a pre-LN configuration, which this post-LN forward never uses."""

import torch
from head_parts import Encoder
from torch import nn


class UnusedNormBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = Encoder(config)
        self.final_ln = nn.LayerNorm(config.hidden_size)  # used only when pre_ln was set
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.bert(input_ids, attention_mask, token_type_ids)
        return x, torch.tanh(self.pooler(x[:, 0]))
