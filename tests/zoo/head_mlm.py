"""transformers' BertForMaskedLM shape: no pooler, a masked-LM head whose decoder is the word
embeddings, with a bias of its own."""

import torch.nn.functional as F
from head_parts import Encoder
from torch import nn


class MaskedLMBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.bert = Encoder(config)
        self.transform = nn.Linear(h, h)
        self.transform_ln = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(h, config.vocab_size)
        self.decoder.weight = self.bert.tok.weight

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.bert(input_ids, attention_mask, token_type_ids)
        return self.decoder(self.transform_ln(F.gelu(self.transform(x))))
