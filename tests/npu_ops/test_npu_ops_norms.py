"""rms_norm, layer_norm_eval, group_norm_silu against per-row / per-group loops in fp64."""

from __future__ import annotations

import npu_oracles as oracle
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_cases import assert_matches, dtypes, np64, seeds, tensor

from msprobe.run_ut.npu_ops.normalization import npu_group_norm_silu, npu_layer_norm_eval, npu_rms_norm


@settings(max_examples=30)
@given(data=st.data(), seed=seeds, dtype=dtypes, eps=st.sampled_from([1e-6, 1e-5, 0.5]))
def test_rms_norm(data: st.DataObject, seed: int, dtype: torch.dtype, eps: float) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4), label="shape"))
    k = data.draw(st.integers(1, len(shape)), label="gamma dims")
    x, gamma = tensor(seed, shape, dtype, 3.0), tensor(seed + 1, shape[len(shape) - k :], dtype)
    y, rstd = npu_rms_norm(x, gamma, epsilon=eps)
    y_ref, rstd_ref = oracle.rms_norm(np64(x), np64(gamma), eps)
    assert_matches(y, y_ref, dtype)
    stat_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    assert_matches(rstd, rstd_ref, stat_dtype)


def test_rms_norm_rejects_misfit_gamma() -> None:
    with pytest.raises(ValueError, match="gamma shape"):
        npu_rms_norm(torch.ones(2, 3), torch.ones(2))


@settings(max_examples=30)
@given(data=st.data(), seed=seeds, dtype=dtypes, affine=st.booleans(), eps=st.sampled_from([1e-5, 0.1]))
def test_layer_norm_eval_applies_weight_bias_eps(
    data: st.DataObject, seed: int, dtype: torch.dtype, affine: bool, eps: float
) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), label="shape"))
    k = data.draw(st.integers(1, len(shape)), label="normalized dims")
    norm_shape = shape[len(shape) - k :]
    x = tensor(seed, shape, dtype, 2.0)
    w = tensor(seed + 1, norm_shape, dtype) if affine else None
    b = tensor(seed + 2, norm_shape, dtype) if affine else None
    expected = oracle.layer_norm(
        np64(x), k, None if w is None else np64(w), None if b is None else np64(b), eps
    )
    assert_matches(npu_layer_norm_eval(x, norm_shape, w, b, eps), expected, dtype)


@settings(max_examples=30)
@given(data=st.data(), seed=seeds, dtype=dtypes, affine=st.booleans())
def test_group_norm_silu(data: st.DataObject, seed: int, dtype: torch.dtype, affine: bool) -> None:
    groups = data.draw(st.integers(1, 3), label="groups")
    n, c = data.draw(st.integers(1, 3)), groups * data.draw(st.integers(1, 3))
    spatial = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2), label="spatial"))
    x = tensor(seed, (n, c, *spatial), dtype, 2.0)
    w = tensor(seed + 1, (c,), dtype) if affine else None
    b = tensor(seed + 2, (c,), dtype) if affine else None
    out, mean, rstd = npu_group_norm_silu(x, w, b, groups, 1e-5)
    o_ref, m_ref, r_ref = oracle.group_norm_silu(
        np64(x), None if w is None else np64(w), None if b is None else np64(b), groups, 1e-5
    )
    assert_matches(out, o_ref, dtype)
    assert_matches(mean, m_ref, dtype)
    # rstd of a group of equal values is ~1/sqrt(eps): compare relative to its size
    rtol = {torch.float16: 3e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-5)
    torch.testing.assert_close(rstd.double(), torch.from_numpy(r_ref), rtol=rtol, atol=rtol)


def test_layer_norm_eval_takes_an_int_shape() -> None:
    x = tensor(0, (3, 5), torch.float64)
    assert torch.equal(npu_layer_norm_eval(x, 5), npu_layer_norm_eval(x, [5]))


def test_group_norm_silu_rejects_bad_group() -> None:
    with pytest.raises(ValueError, match="cannot be split"):
        npu_group_norm_silu(torch.ones(1, 6, 2), None, None, 4)


def _dbl(*shape: int, seed: int = 0) -> torch.Tensor:
    return tensor(seed, shape, torch.float64).requires_grad_()


@pytest.mark.parametrize(
    ("fn", "inputs"),
    [
        (lambda x, g: npu_rms_norm(x, g, 1e-3), lambda: (_dbl(3, 4), _dbl(4, seed=1))),
        (lambda x, g: npu_rms_norm(x, g), lambda: (_dbl(2, 3, 2), _dbl(3, 2, seed=1))),
        (
            lambda x, w, b: npu_layer_norm_eval(x, [4], w, b, 1e-3),
            lambda: (_dbl(3, 4), _dbl(4, seed=1), _dbl(4, seed=2)),
        ),
        (
            lambda x, w, b: npu_group_norm_silu(x, w, b, 2),
            lambda: (_dbl(2, 4, 3), _dbl(4, seed=1), _dbl(4, seed=2)),
        ),
    ],
    ids=["rms_norm", "rms_norm_2d_gamma", "layer_norm_eval", "group_norm_silu"],
)
def test_gradcheck(fn, inputs) -> None:  # type: ignore[no-untyped-def]
    assert torch.autograd.gradcheck(fn, inputs())
