"""A classifier read straight off the [CLS] hidden state, with no pooler between: not
transformers' classifier (which reads the pooled output), so the model's own."""

from head_parts import Encoder
from torch import nn


class ClsHeadBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = Encoder(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask, token_type_ids):
        sequence_output = self.bert(input_ids, attention_mask, token_type_ids)
        return sequence_output, self.classifier(sequence_output[:, 0])
