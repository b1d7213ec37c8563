"""Element-wise activation kernels: ``npu_fast_gelu``, ``npu_mish``, ``npu_swiglu``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from msprobe.run_ut.npu_ops.precision import compute_dtype, upcast

FAST_GELU_ALPHA = 1.702  # torch_npu FastGelu constant: y = x * sigmoid(1.702 x)


def npu_fast_gelu(input: torch.Tensor) -> torch.Tensor:
    """``x / (1 + exp(-1.702|x|)) * exp(0.851 (x - |x|))``: the overflow-free form of x·σ(1.702x)."""
    x = upcast(input)
    ax = x.abs()
    y = x * torch.exp((FAST_GELU_ALPHA / 2) * (x - ax)) / (1 + torch.exp(-FAST_GELU_ALPHA * ax))
    return y.to(input.dtype)


def npu_mish(input: torch.Tensor) -> torch.Tensor:
    """``x * tanh(softplus(x))``."""
    x = upcast(input)
    return (x * torch.tanh(F.softplus(x))).to(input.dtype)


def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Split ``input`` in two halves ``a, b`` along ``dim`` and return ``silu(a) * b``.

    For fp16/bf16 the kernel rounds ``silu(a)`` to the input dtype before the product,
    the product itself is taken in fp32 and rounded once.
    """
    if input.shape[dim] % 2:
        raise ValueError(f"npu_swiglu: size {input.shape[dim]} of dim {dim} is not even")
    a, b = input.chunk(2, dim=dim)
    cd = compute_dtype(input.dtype)
    gate = F.silu(a.to(cd)).to(input.dtype).to(cd)
    return (gate * b.to(cd)).to(input.dtype)
