"""``npu_linear``: a matrix product with fp32 accumulation for half-precision operands."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from msprobe.run_ut.npu_ops.precision import upcast


def npu_linear(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``input @ weight.T + bias``; weight is ``(out_features, in_features)``."""
    x = upcast(input)
    b = None if bias is None else bias.to(x.dtype)
    return F.linear(x, weight.to(x.dtype), b).to(input.dtype)
