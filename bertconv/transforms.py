"""The transforms a mapping-table row may declare, each written once, with its inverse.

A row holds one of the layout's tensors and the official tensors it is made of. Most rows only
rename; some layouts store a weight transposed (a raw parameter used as `x @ W`, shaped
(in, out)), or fuse the query, key and value projections into one tensor (a `Linear(h, 3h)`),
or both. In a table:

    "attn.qkv.weight" = { concat = ["...query.weight", "...key.weight", "...value.weight"] }
    "attn.W_o" = { transpose = "...attention.output.dense.weight" }
    "attn.W_qkv" = { concat_transposed = ["...query.weight", "...key.weight", "...value.weight"] }
    "pos_embedding" = { unsqueeze = "embeddings.position_embeddings.weight" }  # (1, max_len, h)
    "ffn.conv1.weight" = { conv1d = "...intermediate.dense.weight" }  # (out, in, 1)

Transforms work on storage references (storage.py): a transposed or fused tensor is computed when
it is written or loaded, never held whole before.
"""

from collections.abc import Callable
from typing import NamedTuple

from . import storage

Shape = tuple[int, ...]


class Transform(NamedTuple):
    """How a layout's tensor is made of official ones, and how they are taken back out of it."""

    name: str
    fuses: bool  # the row names several official tensors (a list), else one (a string)
    to_layout: Callable[[list[storage.Tensor]], storage.Tensor]
    to_official: Callable[[storage.Tensor, list[Shape]], list[storage.Tensor]]
    ranks: tuple[int, ...]  # the official tensors' ranks it applies to


def _split(t: storage.Tensor, shapes: list[Shape]) -> list[storage.Tensor]:
    sizes = [s[0] for s in shapes]
    if not t.shape or t.shape[0] != sum(sizes) or tuple(t.shape[1:]) != tuple(shapes[0][1:]):
        return [t] * len(shapes)  # the wrong size: handed on whole, for the shape check to name
    return storage.split_rows(t, sizes)


def _squeeze(t: storage.Tensor) -> storage.Tensor:
    """A leading dimension of 1 taken off (where there is one: else the shape check names it)."""
    return storage.reshape(t, t.shape[1:]) if len(t.shape) > 1 and t.shape[0] == 1 else t


def _untranspose(t: storage.Tensor) -> storage.Tensor | None:
    return storage.transpose(t) if len(t.shape) == 2 else None


def _unconv(t: storage.Tensor, shapes: list[Shape]) -> list[storage.Tensor]:
    return [storage.reshape(t, shapes[0]) if tuple(t.shape) == (*shapes[0], 1) else t]


# A leading 1 (unsqueeze): a table kept as (1, n, h), broadcast over the batch. concat stacks
# along the first dimension, as nn.Linear(h, 3h) holds them; concat_transposed is a fused
# (in, 3 x out) parameter; conv1d, Conv1d(kernel_size=1)'s weight (out, in, 1).
REGISTRY = {t.name: t for t in [
    Transform("rename", False, lambda parts: parts[0], lambda t, shapes: [t], (1, 2)),
    Transform("transpose", False, lambda parts: storage.transpose(parts[0]),
              lambda t, shapes: [_untranspose(t) or t], (2,)),
    Transform("concat", True, storage.join_rows, _split, (1, 2)),
    Transform("concat_transposed", True, lambda parts: storage.transpose(storage.join_rows(parts)),
              lambda t, shapes: _split(_untranspose(t) or t, shapes), (2,)),
    Transform("unsqueeze", False, lambda parts: storage.reshape(parts[0], (1, *parts[0].shape)),
              lambda t, shapes: [_squeeze(t)], (1, 2)),
    Transform("conv1d", False, lambda parts: storage.reshape(parts[0], (*parts[0].shape, 1)),
              _unconv, (2,)),
]}  # fmt: skip
