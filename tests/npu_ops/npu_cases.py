"""Shared strategy pieces for the fused-op tests: dtypes, tolerances, seeded tensors."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

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
