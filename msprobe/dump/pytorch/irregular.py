"""Tensors whose elements are not one strided block: sparse, nested, quantized and mkldnn tensors.

The statistics and md5 of such a tensor are taken from what it holds (:func:`held_elements`): a
sparse gradient (``nn.Embedding(sparse=True)``) has exact statistics from its stored values and the
count of the zeros it leaves implicit, without ever being made dense; a nested tensor (the fast path
of ``nn.TransformerEncoder`` in eval) from its components; a quantized tensor from its dequantized
values. A nested tensor's ``shape`` is :func:`nested_shape`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

# compressed sparse layouts -> their index tensors
_COMPRESSED = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_bsr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
    torch.sparse_bsc: ("ccol_indices", "row_indices"),
}


class Held(NamedTuple):
    """What an irregular tensor holds: where its values sit (sparse indices; part of its identity,
    so of its md5), the values as one strided tensor, and how many elements it leaves implicit (0)."""

    indices: list[torch.Tensor]
    values: torch.Tensor
    implicit_zeros: int


def is_irregular(t: torch.Tensor) -> bool:
    return t.is_nested or t.layout != torch.strided or t.is_quantized


def held_elements(t: torch.Tensor) -> Held:
    if t.is_nested:
        parts = [c.reshape(-1) for c in t.unbind()]
        values = torch.cat(parts) if parts else torch.empty(0, dtype=t.dtype, device=t.device)
        return Held([], values, 0)
    if t.layout == torch.sparse_coo:
        c = t.coalesce()  # one value per position
        return Held([c.indices()], c.values(), t.numel() - c.values().numel())
    if t.layout in _COMPRESSED:
        indices = [getattr(t, name)() for name in _COMPRESSED[t.layout]]
        return Held(indices, t.values(), t.numel() - t.values().numel())
    if t.is_quantized:
        return Held([], t.dequantize(), 0)
    return Held([], t.to_dense(), 0)  # mkldnn and other opaque layouts


def nested_shape(t: torch.Tensor) -> list[Any]:
    """A nested tensor's ``shape`` in dump.json: its component count, then each dimension the
    components share, None where they differ (replay reports such a record as not replayable)."""
    shapes = [tuple(c.shape) for c in t.unbind()]
    if not shapes:
        return [0]
    return [len(shapes)] + [dims[0] if len(set(dims)) == 1 else None for dims in zip(*shapes)]


def savable(t: torch.Tensor) -> torch.Tensor:
    """``t`` as torch.save writes it and ``torch.load(weights_only=True)`` reads it back: sparse,
    nested and quantized tensors as they are, opaque layouts (mkldnn) made dense."""
    if t.is_nested or t.is_quantized or t.layout == torch.sparse_coo or t.layout in _COMPRESSED:
        return t
    return t.to_dense()
