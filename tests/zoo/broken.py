"""Models whose code fails: in their forward, or asking for an input bertconv cannot give."""

from torch import nn


class ShapeBound(nn.Module):
    """Takes only batches of 128 tokens: its forward raises on any other."""

    def __init__(self, config):
        super().__init__()
        self.tok = nn.Embedding(config.vocab_size, config.hidden_size)

    def forward(self, input_ids, attention_mask):
        if input_ids.shape[1] != 128:
            raise ValueError(f"expected 128 tokens, got {input_ids.shape[1]}")
        return self.tok(input_ids)


class NeedsMaskedPositions(nn.Module):
    """A pre-training model whose forward needs the masked positions (bertconv gives every
    position) and their weights (which it cannot give)."""

    def __init__(self, config):
        super().__init__()
        self.tok = nn.Embedding(config.vocab_size, config.hidden_size)

    def forward(self, input_ids, segment_ids, input_mask, masked_pos, masked_weights):
        return self.tok(input_ids)
