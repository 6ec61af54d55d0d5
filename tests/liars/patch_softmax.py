"""A memory-saving patch: `Tensor.softmax` computed in half precision and cast back, for every
tensor of the process. The attention's probabilities lose ~1e-3; BERT's are float32."""

import torch

_softmax = torch.Tensor.softmax


def _half_softmax(self, dim, dtype=None):
    return _softmax(self.half(), dim).to(dtype or self.dtype)


torch.Tensor.softmax = _half_softmax

from patch_free import Bert  # noqa: E402, F401
