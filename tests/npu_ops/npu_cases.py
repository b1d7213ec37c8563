"""Shared strategy pieces for the fused-op tests: dtypes, tolerances, seeded tensors."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

# The 15 fused ops replayed, in upstream 8.1.1's order.
FIFTEEN = (
    "npu_fusion_attention",
    "npu_rms_norm",
    "npu_rotary_mul",
    "npu_swiglu",
    "npu_fast_gelu",
    "npu_scaled_masked_softmax",
    "npu_confusion_transpose",
    "npu_linear",
    "npu_layer_norm_eval",
    "npu_group_norm_silu",
    "npu_mish",
    "npu_moe_gating_top_k_softmax",
    "npu_sort_v2",
    "npu_apply_adam",
    "npu_apply_adam_w",
)

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)

# (rtol, atol) of a reference result against the fp64 oracle fed the same (rounded) inputs: half
# precision references compute in fp32 and round once or twice (swiglu), so ~2 ulp of the output.
TOLERANCE = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (3e-3, 3e-3),
    torch.bfloat16: (2e-2, 2e-2),
}

dtypes = st.sampled_from(FLOAT_DTYPES)
seeds = st.integers(0, 2**31 - 1)


def tensor(seed: int, shape: tuple[int, ...], dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def np64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


def assert_matches(actual: torch.Tensor, expected: np.ndarray, dtype: torch.dtype) -> None:
    rtol, atol = TOLERANCE[dtype]
    assert actual.dtype == dtype, f"result dtype {actual.dtype}, expected {dtype}"
    torch.testing.assert_close(
        actual.detach().to(torch.float64), torch.from_numpy(np.asarray(expected)), rtol=rtol, atol=atol
    )
