"""A sentiment classifier: two labels off the pooled output, the head of the same width as
next sentence prediction's. Which it is comes from its name, or config.json's architectures."""

import torch
from head_parts import Encoder
from torch import nn


class SentimentBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = Encoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.bert(input_ids, attention_mask, token_type_ids)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


class UnnamedHead(SentimentBert):
    """The same head under a name that says nothing of its role."""

    def __init__(self, config):
        super().__init__(config)
        self.fc = self.classifier
        del self.classifier

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.bert(input_ids, attention_mask, token_type_ids)
        return self.fc(torch.tanh(self.pooler(x[:, 0])))
