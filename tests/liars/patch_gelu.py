"""A training script's preamble: GELU swapped for its tanh approximation everywhere in the
process ("gelu_new", faster on old GPUs), then the model built. The model computes tanh GELU,
which is not BERT's (off by up to ~1e-3); a reference built after this import would too."""

import torch.nn.functional as F

_erf_gelu = F.gelu


def _tanh_gelu(input, approximate="none"):
    return _erf_gelu(input, approximate="tanh")


F.gelu = _tanh_gelu

from patch_free import Bert  # noqa: E402, F401
