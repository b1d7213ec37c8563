"""Exact re-ordering kernels: ``npu_confusion_transpose`` (axes) and ``npu_sort_v2`` (values)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def npu_confusion_transpose(
    self: torch.Tensor, perm: Sequence[int], shape: Sequence[int], transpose_first: bool
) -> torch.Tensor:
    """``transpose_first``: permute by ``perm`` then reshape to ``shape``; else reshape then permute."""
    if transpose_first:
        return self.permute(*perm).reshape(*shape)
    return self.reshape(*shape).permute(*perm)


def npu_sort_v2(
    self: torch.Tensor, dim: int = -1, descending: bool = False, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Sorted values only (torch_npu's sort without indices); ``out`` is filled when given."""
    values = torch.sort(self, dim=dim, descending=descending, stable=True).values
    if out is None:
        return values
    with torch.no_grad():
        out.resize_(values.shape).copy_(values)
    return out
