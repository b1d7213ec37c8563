"""Internal compute precision of the fused references.

Ascend fused kernels take fp16/bf16 operands but accumulate in fp32 and round once on output. The
references do the same: half-precision inputs are computed in fp32 and the result is cast back, while
fp32 and fp64 inputs are computed in their own dtype. So the benchmark side (inputs already upcast by
the replay stage) gets a genuinely more precise result, and the device side run on CUDA/CPU in the
dumped dtype models the kernel's rounding, not a naive half-precision chain.
"""

from __future__ import annotations

import torch

_HALF = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """dtype used inside a reference for operands of ``dtype``."""
    if dtype in _HALF:
        return torch.float32
    if dtype.is_floating_point:
        return dtype
    return torch.float32


def upcast(x: torch.Tensor) -> torch.Tensor:
    """``x`` in its compute dtype (differentiable; a no-op for fp32/fp64)."""
    return x.to(compute_dtype(x.dtype))
