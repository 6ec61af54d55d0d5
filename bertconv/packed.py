"""Attention on the packed tokens, for GPUs that FlashAttention runs on. Opt-in:

    model = packed.enable(bertconv.load(path).to("cuda", torch.bfloat16))

bertconv's model runs its dense layers on the real tokens of a padded batch alone, packed into one
(N, hidden) matrix (model.Padding), and spreads them out to (B, T, hidden) for attention alone.
FlashAttention's variable-length kernel (torch.nn.attention.varlen, torch >= 2.10) takes each
sequence's tokens where they lie in the packing instead: no padding is made, and none attended
to, so the encoder stays packed from the embeddings to its last layer.

Not on by default until `make bench-gpu` has measured it on a GPU (its parity with the model's
own attention, and its speed): `enable` swaps it in where it can run, and says why where not.
"""

from functools import cache

import torch
import torch.nn.functional as F

from .config import BertConfig
from .errors import UsageError
from .model import BertModel, Padding, SelfAttention

HALF = (torch.float16, torch.bfloat16)  # FlashAttention computes in these alone


class PackedSelfAttention(SelfAttention):
    """SelfAttention, its parameters as they are, with each sequence's tokens attending to each
    other's in place in the packing (N, hidden). Scaled by 1 / sqrt(head_dim), as there. For
    inference: the kernel has no attention dropout."""

    def forward(self, x: torch.Tensor, padding: Padding, shared=None) -> torch.Tensor:
        # `shared` is None: a model with a shared bias (MPNet's) is never packed (why_not)
        if self.training and self.dropout_p:
            raise UsageError(
                "the packed attention has no attention dropout: call model.eval() before a "
                "forward, or train a model packed.enable was not applied to"
            )
        q, k, v = (
            W(x).view(-1, self.num_heads, self.head_dim) for W in (self.Wq, self.Wk, self.Wv)
        )
        offsets, longest = sequences(padding, x.device)
        out = varlen_kernel()(q, k, v, offsets, offsets, longest, longest)  # (N, heads, head_dim)
        return out.reshape(len(x), -1)


def sequences(padding: Padding, device: torch.device) -> tuple[torch.Tensor, int]:
    """Where each sequence starts among the packed tokens, and the longest: (B + 1,) int32
    offsets, as the variable-length kernel takes them. A sequence's tokens are side by side in
    the packing (a row's real tokens, in order)."""
    B, T = padding.shape
    if padding.key_mask is None:
        lengths = torch.full((B,), T, dtype=torch.int32, device=device)
    else:
        lengths = padding.key_mask.view(B, T).sum(1, dtype=torch.int32)
    offsets = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
    return offsets, int(lengths.max()) if B else 0


@cache
def varlen_kernel():
    """FlashAttention's variable-length kernel (torch >= 2.10), where this torch has it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def why_not(config: BertConfig, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the packed attention cannot run for a model of this config, on this device and in
    this dtype; None where it can."""
    head_dim = config.attention_head_size
    if config.relative:
        kind = config.position_embedding_type
        return f"position_embedding_type={kind!r} adds to the scores, which the kernel does not"
    if config.relative_bias:
        return "its relative attention bias adds to the scores, which the kernel does not"
    if config.rotary or config.local_attention:
        return "its rotary positions and local windows are not computed by the packed attention"
    if head_dim % 8 or head_dim > 256:
        return f"FlashAttention takes head sizes that are multiples of 8 up to 256, not {head_dim}"
    if device.type != "cuda":
        return f"the model is on {device}, not a CUDA GPU"
    if dtype not in HALF:
        return f"the model is in {dtype}, and FlashAttention computes in float16 or bfloat16"
    capability = torch.cuda.get_device_capability(device)
    if capability < (8, 0):  # Ampere; a T4 or a V100 would have the kernel raise
        major, minor = capability
        return f"FlashAttention needs a GPU of compute capability 8.0 or later, not {major}.{minor}"
    if varlen_kernel() is None:
        return f"torch {torch.__version__} has no variable-length kernel (torch >= 2.10 has)"
    return None


def enable(model: BertModel) -> BertModel:
    """The model, its attention computed on the packed tokens from now on (in place: the same
    parameters, under the same names). Raises UsageError, saying why, where that cannot run:
    move the model to its GPU and dtype first."""
    parameter = next(model.parameters())
    reason = why_not(model.config, parameter.device, parameter.dtype)
    if reason is not None:
        raise UsageError(f"the packed attention cannot run for this model: {reason}")
    for module in model.modules():
        if type(module) is SelfAttention:
            module.__class__ = PackedSelfAttention
    return model
