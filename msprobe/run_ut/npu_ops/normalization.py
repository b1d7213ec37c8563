"""Normalisation kernels: ``npu_rms_norm``, ``npu_layer_norm_eval``, ``npu_group_norm_silu``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from msprobe.run_ut.npu_ops.precision import upcast


def _stat_dtype(dtype: torch.dtype) -> torch.dtype:
    """rstd is fp32 on the NPU (RmsNorm IR); an fp64 benchmark keeps fp64 (it stays the precise side)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def npu_rms_norm(
    self: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06
) -> tuple[torch.Tensor, torch.Tensor]:
    """``rstd = 1/sqrt(mean(x², dims of gamma) + eps)``; returns ``(x * rstd * gamma, rstd)``.

    The reduction runs over the trailing ``gamma.dim()`` axes ("gamma matches the last dims of x"),
    ``rstd`` keeps those axes as size 1.
    """
    if tuple(self.shape[self.dim() - gamma.dim() :]) != tuple(gamma.shape):
        raise ValueError(
            f"npu_rms_norm: gamma shape {tuple(gamma.shape)} is not the tail of {tuple(self.shape)}"
        )
    x = upcast(self)
    dims = tuple(range(self.dim() - gamma.dim(), self.dim()))
    rstd = torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    y = x * rstd * gamma.to(x.dtype)
    return y.to(self.dtype), rstd.to(_stat_dtype(self.dtype))


def npu_layer_norm_eval(
    input: torch.Tensor,
    normalized_shape: Sequence[int] | int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-05,
) -> torch.Tensor:
    """Inference LayerNorm with ``weight``, ``bias`` and ``eps`` applied (8.1.1 drops all three)."""
    x = upcast(input)
    w = None if weight is None else weight.to(x.dtype)
    b = None if bias is None else bias.to(x.dtype)
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    return F.layer_norm(x, shape, w, b, eps).to(input.dtype)


def npu_group_norm_silu(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    group: int,
    eps: float = 1e-05,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GroupNorm over axis 1 split in ``group`` groups (biased variance), affine, then SiLU.

    Returns ``(silu(out), mean, rstd)``; ``mean``/``rstd`` have shape ``(N, group)`` and the input dtype.
    """
    n, c = input.shape[0], input.shape[1]
    if group <= 0 or c % group:
        raise ValueError(f"npu_group_norm_silu: {c} channels cannot be split in {group} groups")
    x = upcast(input)
    xg = x.reshape(n, group, -1)
    mean = xg.mean(dim=-1, keepdim=True)
    var = (xg - mean).pow(2).mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    y = ((xg - mean) * rstd).reshape(x.shape)
    affine_shape = (1, c) + (1,) * (input.dim() - 2)
    if weight is not None:
        y = y * weight.to(x.dtype).reshape(affine_shape)
    if bias is not None:
        y = y + bias.to(x.dtype).reshape(affine_shape)
    out = F.silu(y)
    return out.to(input.dtype), mean.reshape(n, group).to(input.dtype), rstd.reshape(n, group).to(input.dtype)
