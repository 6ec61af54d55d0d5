"""RoBERTas that must never pass (tests/test_family_own.py): built on family_own.py's honest
HFRoberta (transformers' names, verified with no table, each way built), one returns what it
computed for the first batch of a shape for every later one, the other is wrong past 16 tokens."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "zoo"))

from family_own import HFRoberta  # noqa: E402


class CachesByShape(HFRoberta):
    def __init__(self, config):
        super().__init__(config)
        self.cache = {}

    def forward(self, input_ids, attention_mask, token_type_ids):
        key = tuple(input_ids.shape)
        if key not in self.cache:
            self.cache[key] = super().forward(input_ids, attention_mask, token_type_ids)
        return self.cache[key]


class WrongPastSixteen(HFRoberta):
    def forward(self, input_ids, attention_mask, token_type_ids):
        out = super().forward(input_ids, attention_mask, token_type_ids).clone()
        out[:, 16:] *= 1.001
        return out
