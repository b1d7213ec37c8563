"""moe_gating_top_k_softmax, sort_v2, apply_adam, apply_adam_w against loops / element formulas."""

from __future__ import annotations

import npu_oracles as oracle
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_cases import FLOAT_DTYPES, assert_matches, dtypes, np64, seeds, tensor

from msprobe.run_ut.npu_ops.optimizer import npu_apply_adam, npu_apply_adam_w
from msprobe.run_ut.npu_ops.reorder import npu_sort_v2
from msprobe.run_ut.npu_ops.softmax import npu_moe_gating_top_k_softmax


@settings(max_examples=40)
@given(data=st.data(), seed=seeds, dtype=dtypes, three_d=st.booleans(), with_finished=st.booleans())
def test_moe_gating_top_k_softmax(
    data: st.DataObject, seed: int, dtype: torch.dtype, three_d: bool, with_finished: bool
) -> None:
    experts = data.draw(st.integers(1, 8), label="experts")
    k = data.draw(st.integers(0, experts), label="k")
    lead = (
        (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
        if three_d
        else (data.draw(st.integers(1, 5)),)
    )
    # distinct fp64 probabilities so that the top-k order is the same in every dtype
    x = torch.randperm(int(np.prod(lead)) * experts, generator=torch.Generator().manual_seed(seed)) * 0.25
    x = x.reshape(*lead, experts).to(dtype)
    finished = (
        torch.rand(lead, generator=torch.Generator().manual_seed(seed)) < 0.4 if with_finished else None
    )
    y, idx, row_idx = npu_moe_gating_top_k_softmax(x, finished, k)
    y_ref, idx_ref, row_ref = oracle.moe_gating(np64(x), None if finished is None else finished.numpy(), k)
    assert_matches(y, y_ref, dtype)
    assert idx.dtype == row_idx.dtype == torch.int32
    assert np.array_equal(idx.numpy(), idx_ref) and np.array_equal(row_idx.numpy(), row_ref)


def test_moe_gating_ties_go_to_lower_expert() -> None:
    y, idx, _ = npu_moe_gating_top_k_softmax(torch.zeros(2, 4), None, 3)
    assert idx.tolist() == [[0, 1, 2], [0, 1, 2]]
    assert torch.allclose(y, torch.full((2, 3), 0.25))


@settings(max_examples=30)
@given(data=st.data(), seed=seeds, dtype=dtypes, descending=st.booleans())
def test_sort_v2(data: st.DataObject, seed: int, dtype: torch.dtype, descending: bool) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3), label="shape"))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    x = tensor(seed, shape, dtype)
    expected = np.sort(np64(x), axis=dim)
    if descending:
        expected = np.flip(expected, axis=dim)
    result = npu_sort_v2(x, dim=dim, descending=descending)
    assert result.dtype == dtype and torch.equal(result.double(), torch.from_numpy(expected.copy()))
    out = torch.empty(0, dtype=dtype)
    assert npu_sort_v2(x, dim, descending, out=out) is out and torch.equal(out, result)


def _state(seed: int, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    var, m, g = (tensor(seed + i, shape, dtype) for i in range(3))
    v = tensor(seed + 3, shape, dtype).abs()
    return var, m, v, g


# Elementwise results below go through sqrt and 1/(1-beta^t); fp16/bf16 states get a looser bound.
ADAM_TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


@settings(max_examples=30)
@given(seed=seeds, dtype=st.sampled_from(FLOAT_DTYPES), nesterov=st.booleans(), step=st.integers(1, 50))
def test_apply_adam(seed: int, dtype: torch.dtype, nesterov: bool, step: int) -> None:
    var, m, v, g = _state(seed, (3, 4), dtype)
    b1, b2, lr, eps = 0.9, 0.999, 0.01, 1e-8
    ref = oracle.apply_adam(
        np64(var), np64(m), np64(v), b1**step, b2**step, lr, b1, b2, eps, np64(g), nesterov
    )
    out = (var.clone(), m.clone(), v.clone())
    result = npu_apply_adam(b1**step, b2**step, lr, b1, b2, eps, g, False, nesterov, out=out)
    assert all(r is o for r, o in zip(result, out)), "results must be the out tensors, updated in place"
    for r, e in zip(result, ref):
        assert r.dtype == dtype
        torch.testing.assert_close(
            r.double(), torch.from_numpy(e), rtol=ADAM_TOL[dtype], atol=ADAM_TOL[dtype]
        )


@settings(max_examples=30)
@given(seed=seeds, dtype=dtypes, amsgrad=st.booleans(), maximize=st.booleans(), step=st.integers(0, 50))
def test_apply_adam_w(seed: int, dtype: torch.dtype, amsgrad: bool, maximize: bool, step: int) -> None:
    var, m, v, g = _state(seed, (5,), dtype)
    max_v = tensor(seed + 9, (5,), dtype).abs()
    b1, b2, lr, wd, eps = 0.9, 0.99, 0.02, 0.1, 1e-6
    ref = oracle.apply_adam_w(
        np64(var),
        np64(m),
        np64(v),
        b1**step,
        b2**step,
        lr,
        wd,
        b1,
        b2,
        eps,
        np64(g),
        np64(max_v),
        amsgrad,
        maximize,
    )
    out = (var.clone(), m.clone(), v.clone())
    result = npu_apply_adam_w(b1**step, b2**step, lr, wd, b1, b2, eps, g, max_v, amsgrad, maximize, out=out)
    for r, e in zip(result, ref):
        torch.testing.assert_close(
            r.double(), torch.from_numpy(e), rtol=ADAM_TOL[dtype], atol=ADAM_TOL[dtype]
        )


def test_adam_needs_out() -> None:
    with pytest.raises(ValueError, match="out="):
        npu_apply_adam(0.9, 0.99, 0.1, 0.9, 0.99, 1e-8, torch.ones(2), False, False)


def test_gradcheck_moe_and_sort() -> None:
    x = torch.tensor([[0.1, 0.5, -0.3, 0.9], [1.0, -1.0, 0.2, 0.4]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: npu_moe_gating_top_k_softmax(t, None, 2)[0], (x,))
    assert torch.autograd.gradcheck(lambda t: npu_sort_v2(t, 0, True), (x,))
