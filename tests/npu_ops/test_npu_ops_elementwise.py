"""fast_gelu, mish, swiglu, rotary_mul, scaled_masked_softmax, linear, confusion_transpose against the
independent formulations of ``npu_oracles``; gradients by gradcheck in fp64."""

from __future__ import annotations

import npu_oracles as oracle
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_cases import assert_matches, dtypes, np64, seeds, tensor

from msprobe.run_ut.npu_ops.activation import npu_fast_gelu, npu_mish, npu_swiglu
from msprobe.run_ut.npu_ops.matmul import npu_linear
from msprobe.run_ut.npu_ops.reorder import npu_confusion_transpose
from msprobe.run_ut.npu_ops.rotary import npu_rotary_mul, npu_rotary_position_embedding
from msprobe.run_ut.npu_ops.softmax import npu_scaled_masked_softmax

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


@settings(max_examples=30)
@given(seed=seeds, shape=shapes, dtype=dtypes, scale=st.sampled_from([0.1, 1.0, 6.0]))
def test_fast_gelu_and_mish(seed: int, shape: tuple[int, ...], dtype: torch.dtype, scale: float) -> None:
    x = tensor(seed, shape, dtype, scale)
    assert_matches(npu_fast_gelu(x), oracle.fast_gelu(np64(x)), dtype)
    assert_matches(npu_mish(x), oracle.mish(np64(x)), dtype)


def test_fast_gelu_is_overflow_free() -> None:
    """The exp(-1.702|x|) form must give 0 and x (not NaN) far out in fp16."""
    x = torch.tensor([-60000.0, -30.0, 30.0, 60000.0], dtype=torch.float16)
    y = npu_fast_gelu(x)
    assert torch.isfinite(y).all()
    assert y[0] == 0 and y[3] == x[3]


@settings(max_examples=30)
@given(data=st.data(), seed=seeds, dtype=dtypes)
def test_swiglu(data: st.DataObject, seed: int, dtype: torch.dtype) -> None:
    shape = list(data.draw(shapes, label="shape"))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    shape[dim] *= 2
    x = tensor(seed, tuple(shape), dtype, 2.0)
    assert_matches(npu_swiglu(x, dim), oracle.swiglu(np64(x), dim % len(shape)), dtype)


def test_swiglu_rejects_odd_split() -> None:
    with pytest.raises(ValueError, match="not even"):
        npu_swiglu(torch.ones(2, 3))


@settings(max_examples=30)
@given(data=st.data(), seed=seeds, dtype=dtypes, mode=st.sampled_from(["half", "interleave"]))
def test_rotary_mul(data: st.DataObject, seed: int, dtype: torch.dtype, mode: str) -> None:
    b, n, s = (data.draw(st.integers(1, 3)) for _ in range(3))
    d = 2 * data.draw(st.integers(1, 4), label="d/2")
    x = tensor(seed, (b, n, s, d), dtype)
    # cos/sin broadcast as the kernel allows: 11SD or B1SD or full.
    r_shape = data.draw(st.sampled_from([(1, 1, s, d), (b, 1, s, d), (b, n, s, d)]), label="r shape")
    r1 = tensor(seed + 1, r_shape, dtype).clamp(-1, 1)
    r2 = tensor(seed + 2, r_shape, dtype).clamp(-1, 1)
    expected = oracle.rotary(np64(x), np64(r1), np64(r2), mode)
    assert_matches(npu_rotary_mul(x, r1, r2, rotary_mode=mode), expected, dtype)
    ms = npu_rotary_position_embedding(x, r1, r2, mode=["half", "interleave"].index(mode))
    assert_matches(ms, expected, dtype)


@settings(max_examples=30)
@given(data=st.data(), seed=seeds, dtype=dtypes, scale=st.sampled_from([0.125, 1.0, 3.0]))
def test_scaled_masked_softmax(data: st.DataObject, seed: int, dtype: torch.dtype, scale: float) -> None:
    b, n, sq, sk = (data.draw(st.integers(1, 4)) for _ in range(4))
    x = tensor(seed, (b, n, sq, sk), dtype, 2.0)
    fixed = data.draw(st.booleans(), label="fixed_triu_mask")
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand((b, 1, sq, sk), generator=g) < 0.3
    result = npu_scaled_masked_softmax(x, mask, scale, fixed)
    used = np.triu(np.ones((sq, sk), dtype=bool), 1) if fixed else mask.numpy()
    assert_matches(result, oracle.masked_softmax(np64(x), used, scale, -10000.0), dtype)


@settings(max_examples=30)
@given(data=st.data(), seed=seeds, dtype=dtypes, with_bias=st.booleans())
def test_linear(data: st.DataObject, seed: int, dtype: torch.dtype, with_bias: bool) -> None:
    m, k, n = (data.draw(st.integers(1, 6)) for _ in range(3))
    x, w = tensor(seed, (m, k), dtype), tensor(seed + 1, (n, k), dtype)
    bias = tensor(seed + 2, (n,), dtype) if with_bias else None
    expected = np64(x) @ np64(w).T + (0.0 if bias is None else np64(bias))
    assert_matches(npu_linear(x, w, bias), expected, dtype)


@settings(max_examples=30)
@given(data=st.data(), seed=seeds, transpose_first=st.booleans())
def test_confusion_transpose(data: st.DataObject, seed: int, transpose_first: bool) -> None:
    a, b, c = (data.draw(st.integers(1, 4)) for _ in range(3))
    perm = data.draw(st.permutations([0, 1, 2]), label="perm")
    x = tensor(seed, (a, b, c), torch.float32)
    if transpose_first:
        permuted = tuple((a, b, c)[p] for p in perm)
        shape = (permuted[0], permuted[1] * permuted[2])
        expected = np64(x).transpose(perm).reshape(shape)
        result = npu_confusion_transpose(x, perm, shape, True)
    else:
        shape = (a, b, c)
        expected = np64(x).reshape(shape).transpose(perm)
        result = npu_confusion_transpose(x.reshape(a * b, c), perm, shape, False)
    assert torch.equal(result.double(), torch.from_numpy(np.ascontiguousarray(expected)))


def _dbl(*shape: int, seed: int = 0) -> torch.Tensor:
    return tensor(seed, shape, torch.float64).requires_grad_()


@pytest.mark.parametrize(
    ("fn", "inputs"),
    [
        (npu_fast_gelu, lambda: (_dbl(3, 4),)),
        (npu_mish, lambda: (_dbl(3, 4),)),
        (lambda x: npu_swiglu(x, 0), lambda: (_dbl(4, 3),)),
        (
            lambda x, r1, r2: npu_rotary_mul(x, r1, r2),
            lambda: (_dbl(1, 2, 3, 4), _dbl(1, 1, 3, 4, seed=1), _dbl(1, 1, 3, 4, seed=2)),
        ),
        (
            lambda x, r1, r2: npu_rotary_mul(x, r1, r2, "interleave"),
            lambda: (_dbl(1, 2, 3, 4), _dbl(1, 1, 3, 4, seed=1), _dbl(1, 1, 3, 4, seed=2)),
        ),
        (
            lambda x: npu_scaled_masked_softmax(x, torch.eye(3, dtype=torch.bool), 0.5),
            lambda: (_dbl(1, 2, 3, 3),),
        ),
        (npu_linear, lambda: (_dbl(3, 4), _dbl(2, 4, seed=1), _dbl(2, seed=2))),
        (lambda x: npu_confusion_transpose(x, (1, 0, 2), (3, 8), True), lambda: (_dbl(2, 3, 4),)),
    ],
    ids=[
        "fast_gelu",
        "mish",
        "swiglu",
        "rotary_half",
        "rotary_interleave",
        "scaled_masked_softmax",
        "linear",
        "confusion_transpose",
    ],
)
def test_gradcheck(fn, inputs) -> None:  # type: ignore[no-untyped-def]
    assert torch.autograd.gradcheck(fn, inputs())
