"""A "fast attention" shim tuned for bert-base: `F.scaled_dot_product_attention` given the scale
of 64-wide heads (1/8) unless told otherwise. transformers' BertModel attends through it; the
model here (patch_free's, whose attention is its own arithmetic) does not."""

import torch.nn.functional as F

_sdpa = F.scaled_dot_product_attention


def _base_sized(query, key, value, *args, scale=None, **kwargs):
    return _sdpa(query, key, value, *args, scale=0.125 if scale is None else scale, **kwargs)


F.scaled_dot_product_attention = _base_sized

from patch_free import Bert  # noqa: E402, F401
