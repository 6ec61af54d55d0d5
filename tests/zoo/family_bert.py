"""A from-scratch BERT in the plainest style, given a RoBERTa's, ELECTRA's or DistilBERT's weights
(tests/test_family.py): `PooledBert` reads its LayerNorm eps from the config it is given;
`FixedEpsBert` hard-codes BERT's 1e-12, as many do."""

import torch
from head_parts import Encoder
from torch import nn


class PooledBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = Encoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.bert(input_ids, attention_mask, token_type_ids)
        return x, torch.tanh(self.pooler(x[:, 0]))


class FixedEpsBert(PooledBert):
    def __init__(self, config):
        config.layer_norm_eps = 1e-12
        super().__init__(config)


class RightPaddedMaskBert(PooledBert):
    """Its mask assumes right padding: the first `sum(mask)` tokens are taken as the real ones.
    Exact on right-padded batches; on a left-padded one it masks the wrong tokens, which is no
    matter of positions counted from 0."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        T = input_ids.shape[1]
        right = (torch.arange(T) < attention_mask.sum(-1, keepdim=True)).long()
        return super().forward(input_ids, right, token_type_ids)
