"""Tensor summaries of dump.json (spec §3.2): Max/Min/Mean/Norm with upstream 8.1.1's dtype rules, md5.

Pure functions of a tensor. :class:`SummaryCache` avoids summarising the same unchanged tensor twice
(an API's output is usually the next API's input): it is keyed by the tensor object and checked
against its version counter, which every in-place op bumps.
"""

from __future__ import annotations

import weakref
import zlib
from typing import Any

import numpy as np
import torch

Stats = tuple[Any, Any, Any, Any]
_NONE4: Stats = (None, None, None, None)
_CAST_TO_FLOAT = {torch.float64}
_NUMPY_MINMAX = (torch.float32, torch.float16)


def tensor_stats(t: torch.Tensor) -> Stats:
    """(Max, Min, Mean, Norm) as upstream 8.1.1 computes them (values via ``.item()`` semantics)."""
    d = t.detach()
    if d.is_meta or d.numel() == 0 or (d.device.type != "meta" and d.data_ptr() == 0 and not d.is_sparse):
        return _NONE4
    if d.dtype == torch.bool:
        return (bool(d.any()), bool(d.all()), None, None)
    if d.dim() == 0:
        v = d.item()
        if isinstance(v, complex):
            v = abs(v)
            return (v, v, v, None)
        return (v, v, v, v)
    if d.is_complex():
        a = np.abs(d.cpu().numpy())
        return (float(a.max()), float(a.min()), float(a.mean()), None)
    if not d.is_floating_point() or d.dtype in _CAST_TO_FLOAT:
        d = d.float()
    elif d.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        d = d.float()  # float8 and other exotic floats
    if d.device.type == "cpu" and d.dtype in _NUMPY_MINMAX:
        # Max/Min are exact whatever the reduction order; numpy's are ~4x faster than torch's on CPU.
        try:
            a = d.numpy()
        except (RuntimeError, TypeError):
            a = None
        if a is not None:
            return (a.max().item(), a.min().item(), d.mean().item(), torch.linalg.vector_norm(d).item())
    mn, mx = torch.aminmax(d)
    vals = torch.stack((mx, mn, d.mean(), torch.linalg.vector_norm(d))).tolist()
    return (vals[0], vals[1], vals[2], vals[3])


def tensor_md5(t: torch.Tensor) -> str:
    """Upstream's "md5": CRC-32 of the tensor's bytes (bf16 and other non-numpy dtypes as float32)."""
    d = t.detach()
    if d.device.type != "cpu":
        d = d.cpu()
    if d.dtype in (torch.bfloat16,) or (d.dtype.itemsize == 1 and d.dtype.is_floating_point):
        d = d.float()
    arr = d.contiguous().numpy()
    return f"{zlib.crc32(arr.reshape(-1).view(np.uint8)):08x}"  # type: ignore[arg-type]


class SummaryCache:
    """Memo of (stats, md5) per live tensor object and version."""

    __slots__ = ("_entries", "limit")

    def __init__(self, limit: int = 20000) -> None:
        self._entries: dict[int, tuple[weakref.ref[torch.Tensor], int, Stats, str | None]] = {}
        self.limit = limit

    def get(self, t: torch.Tensor, md5: bool) -> tuple[Stats, str | None]:
        key = id(t)
        version = t._version
        hit = self._entries.get(key)
        if hit is not None and hit[0]() is t and hit[1] == version and (hit[3] is not None or not md5):
            return hit[2], hit[3]
        stats = tensor_stats(t)
        digest = tensor_md5(t) if md5 else None
        if len(self._entries) >= self.limit:
            self._entries.clear()
        try:
            self._entries[key] = (weakref.ref(t), version, stats, digest)
        except TypeError:
            pass
        return stats, digest

    def clear(self) -> None:
        self._entries.clear()
