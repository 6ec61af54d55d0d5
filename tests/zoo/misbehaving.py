"""A BERT that computes BERT, and does what people's code does besides (issue 26): prints, exits,
raises, writes into its inputs, overrides torch's methods carelessly, is built on the meta
device, returns NaN. Each must be answered for what it is: a right model passes; a fault of the
model's own is exit 2, said as its own."""

import sys

import torch
from family_bert import PooledBert as Bert

print("model file imported")  # most from-scratch BERTs print something


class Prints(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        print("forward", input_ids.shape)
        return super().forward(input_ids, attention_mask, token_type_ids)


class WritesIntoItsMask(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        out = super().forward(input_ids, attention_mask, token_type_ids)
        attention_mask.zero_()  # "freeing" what it was given
        input_ids.fill_(0)
        return out


class CarelessOverrides(Bert):
    def train(self, mode=True):  # returns nothing, unlike torch's
        super().train(mode)

    def load_state_dict(self, state_dict, strict=True):  # returns nothing either
        super().load_state_dict(state_dict, strict)


class Exits(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        sys.exit(3)


class Stop(BaseException):
    """A control-flow exception of its own, as some training loops define."""


class RaisesBaseException(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        raise Stop("stop here")


class AlwaysRaises(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        raise RuntimeError("CUDA is required")


def on_meta(config):
    with torch.device("meta"):
        return Bert(config)


class ReturnsNaN(Bert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        x, pooled = super().forward(input_ids, attention_mask, token_type_ids)
        return x * float("nan"), pooled


class BuiltInHalf(Bert):
    """Built in half precision, as a model meant for a GPU often is: verified in float32, the
    weights as read."""

    def __init__(self, config):
        super().__init__(config)
        self.half()


class Braces(Bert):
    def __init__(self, config):
        super().__init__(config)
        self.add_module("{layer}", self.pooler)
        del self.pooler

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.bert(input_ids, attention_mask, token_type_ids)
        return x, torch.tanh(getattr(self, "{layer}")(x[:, 0]))
