"""A BERT whose module patches torch as it is imported: `F.gelu` becomes the tanh approximation,
as speed-minded code once did by hand, and the model computes with it. What it computes is not
BERT (its GELU is off by up to ~1e-3), whatever a reference built after the import says."""

import torch.nn.functional as F
from returns import Bert

_exact_gelu = F.gelu


def _fast_gelu(x, approximate="none"):
    return _exact_gelu(x, approximate="tanh")


F.gelu = _fast_gelu


class PatchedGeluBert(Bert):
    """The tutorial BERT of returns.py, its GELU the patched one."""
