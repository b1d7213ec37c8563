"""Rotary position embedding: ``npu_rotary_mul`` and MindSpeed's ``npu_rotary_position_embedding``."""

from __future__ import annotations

import torch

from msprobe.run_ut.npu_ops.precision import upcast

_MODES = ("half", "interleave")


def _rotate(x: torch.Tensor, mode: str) -> torch.Tensor:
    """``half``: ``cat(-x2, x1)`` of the two halves; ``interleave``: pairs ``(x0, x1) -> (-x1, x0)``."""
    if x.shape[-1] % 2:
        raise ValueError(f"rotary embedding: last dim {x.shape[-1]} is not even")
    if mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    if mode == "interleave":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)
    raise ValueError(f"rotary embedding: rotary_mode {mode!r} is not one of {_MODES}")


def npu_rotary_mul(
    input: torch.Tensor,
    r1: torch.Tensor,
    r2: torch.Tensor,
    rotary_mode: str = "half",
) -> torch.Tensor:
    """``r1 * x + r2 * rotate(x)`` (r1 = cos, r2 = sin, broadcast to ``x``)."""
    x = upcast(input)
    y = r1.to(x.dtype) * x + r2.to(x.dtype) * _rotate(x, rotary_mode)
    return y.to(input.dtype)


def npu_rotary_position_embedding(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mode: int = 0
) -> torch.Tensor:
    """MindSpeed spelling: ``mode`` 0 = half, 1 = interleave."""
    if mode not in (0, 1):
        raise ValueError(f"npu_rotary_position_embedding: mode {mode} is not 0 or 1")
    return npu_rotary_mul(x, cos, sin, _MODES[mode])
