"""apex's habit: `torch.nn.LayerNorm` replaced by a fused one before the model is built, every
LayerNorm of the process made by it. This one keeps apex's default eps, 1e-5, whatever eps it is
asked for: BERT's is 1e-12."""

import torch
import torch.nn.functional as F


class FusedLayerNorm(torch.nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, **kwargs):
        super().__init__()
        self.normalized_shape = (normalized_shape,)
        self.weight = torch.nn.Parameter(torch.ones(normalized_shape))
        self.bias = torch.nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, 1e-5)


torch.nn.LayerNorm = FusedLayerNorm

from patch_free import Bert  # noqa: E402, F401
