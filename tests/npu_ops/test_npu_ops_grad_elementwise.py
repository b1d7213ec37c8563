"""Gradients of the element-wise, norm, rotary, softmax, linear and transpose references (autograd,
random upstream gradient) against closed-form vector-Jacobian products in fp64 (``grad_oracles``),
over shapes, dtypes and options. Each ``check_*`` is one comparison; the hypothesis tests draw its
arguments (``test_npu_ops_grad_sensitivity`` calls them with a deliberately wrong reference)."""

from __future__ import annotations

import grad_oracles as go
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_cases import seeds, tensor

from msprobe.run_ut.npu_ops.activation import npu_fast_gelu, npu_mish, npu_swiglu
from msprobe.run_ut.npu_ops.matmul import npu_linear
from msprobe.run_ut.npu_ops.normalization import npu_rms_norm
from msprobe.run_ut.npu_ops.reorder import npu_confusion_transpose
from msprobe.run_ut.npu_ops.rotary import npu_rotary_mul, npu_rotary_position_embedding
from msprobe.run_ut.npu_ops.softmax import npu_scaled_masked_softmax

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)
EXAMPLES = 30


def _with_zeros(x: torch.Tensor, seed: int) -> torch.Tensor:
    """Some entries set to exactly 0 (where |x| and friends have a kink)."""
    drop = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed)) < 0.3
    return x.masked_fill(drop, 0)


def check_activations(
    seed: int, shape: tuple[int, ...], dtype: torch.dtype, scale: float, zeros: bool
) -> None:
    x = tensor(seed, shape, dtype, scale)
    x = _with_zeros(x, seed) if zeros else x
    dy = tensor(seed + 1, shape, dtype)
    xd, dyd = x.double(), dy.double()
    go.assert_grads_close(
        go.reference_vjp(npu_fast_gelu, [x], [dy]), [go.fast_gelu_vjp(xd, dyd)], [dtype], "fast_gelu"
    )
    go.assert_grads_close(go.reference_vjp(npu_mish, [x], [dy]), [go.mish_vjp(xd, dyd)], [dtype], "mish")


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    seed=seeds,
    shape=shapes,
    dtype=go.grad_dtypes,
    scale=st.sampled_from([0.1, 1.0, 6.0]),
    zeros=st.booleans(),
)
def test_fast_gelu_and_mish_grad(
    seed: int, shape: tuple[int, ...], dtype: torch.dtype, scale: float, zeros: bool
) -> None:
    check_activations(seed, shape, dtype, scale, zeros)


def check_swiglu(seed: int, in_shape: tuple[int, ...], dim: int, dtype: torch.dtype) -> None:
    """``in_shape[dim]`` is even; the output has half of it."""
    out_shape = list(in_shape)
    out_shape[dim] //= 2
    x = tensor(seed, in_shape, dtype, 2.0)
    dy = tensor(seed + 1, tuple(out_shape), dtype)
    got = go.reference_vjp(lambda t: npu_swiglu(t, dim), [x], [dy])
    go.assert_grads_close(got, [go.swiglu_vjp(x.double(), dim, dy.double())], [dtype], "swiglu")


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data(), seed=seeds, dtype=go.grad_dtypes)
def test_swiglu_grad(data: st.DataObject, seed: int, dtype: torch.dtype) -> None:
    shape = list(data.draw(shapes, label="shape"))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    shape[dim] *= 2
    check_swiglu(seed, tuple(shape), dim, dtype)


def check_rms_norm(
    seed: int, shape: tuple[int, ...], k: int, dtype: torch.dtype, eps: float, rstd_grad: bool
) -> None:
    """gamma covers the last ``k`` axes; ``rstd_grad``: the rstd output gets an upstream gradient too."""
    x, gamma = tensor(seed, shape, dtype, 3.0), tensor(seed + 1, shape[len(shape) - k :], dtype)
    stat_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    dy = tensor(seed + 2, shape, dtype)
    drstd = tensor(seed + 3, shape[: len(shape) - k] + (1,) * k, stat_dtype) if rstd_grad else None
    got = go.reference_vjp(lambda a, g: npu_rms_norm(a, g, epsilon=eps), [x, gamma], [dy, drstd])
    want = go.rms_norm_vjp(
        x.double(), gamma.double(), eps, dy.double(), None if drstd is None else drstd.double()
    )
    sizes = go.rms_norm_term_sizes(x.double(), gamma.double(), eps, dy.double())
    go.assert_grads_close(got, want, [dtype, dtype], "rms_norm", floors=sizes)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    data=st.data(),
    seed=seeds,
    dtype=go.grad_dtypes,
    eps=st.sampled_from([1e-6, 1e-5, 0.5]),
    rstd_grad=st.booleans(),
)
def test_rms_norm_grad(
    data: st.DataObject, seed: int, dtype: torch.dtype, eps: float, rstd_grad: bool
) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4), label="shape"))
    k = data.draw(st.integers(1, len(shape)), label="gamma dims")
    check_rms_norm(seed, shape, k, dtype, eps, rstd_grad)


def test_rms_norm_grad_over_one_element() -> None:
    """Regression (found by a wider random run): normalising a single element, dx = r·h·ε/(x²+ε)
    cancels to ~1e-6 of its terms; fp32's noise on those terms must not count as an error."""
    check_rms_norm(14594131, (1,), 1, torch.float32, 1e-6, False)
    check_rms_norm(14594131, (3, 1), 1, torch.float64, 1e-6, True)


def check_rotary(
    seed: int,
    x_shape: tuple[int, ...],
    r_shape: tuple[int, ...],
    dtype: torch.dtype,
    mode: str,
    mindspeed: bool,
) -> None:
    x = tensor(seed, x_shape, dtype)
    r1, r2 = tensor(seed + 1, r_shape, dtype).clamp(-1, 1), tensor(seed + 2, r_shape, dtype).clamp(-1, 1)
    dy = tensor(seed + 3, x_shape, dtype)
    if mindspeed:
        ms_mode = ["half", "interleave"].index(mode)
        got = go.reference_vjp(lambda *t: npu_rotary_position_embedding(*t, mode=ms_mode), [x, r1, r2], [dy])
    else:
        got = go.reference_vjp(lambda *t: npu_rotary_mul(*t, rotary_mode=mode), [x, r1, r2], [dy])
    want = go.rotary_vjp(x.double(), r1.double(), r2.double(), mode, dy.double())
    go.assert_grads_close(got, want, [dtype] * 3, f"rotary {mode} mindspeed={mindspeed}")


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    data=st.data(),
    seed=seeds,
    dtype=go.grad_dtypes,
    mode=st.sampled_from(["half", "interleave"]),
    mindspeed=st.booleans(),
)
def test_rotary_grad(data: st.DataObject, seed: int, dtype: torch.dtype, mode: str, mindspeed: bool) -> None:
    b, n, s = (data.draw(st.integers(1, 3)) for _ in range(3))
    d = 2 * data.draw(st.integers(1, 4), label="d/2")
    r_shape = data.draw(st.sampled_from([(1, 1, s, d), (b, 1, s, d), (1, n, 1, d), (b, n, s, d)]), label="r")
    check_rotary(seed, (b, n, s, d), r_shape, dtype, mode, mindspeed)


def check_scaled_masked_softmax(
    seed: int, shape: tuple[int, int, int, int], dtype: torch.dtype, scale: float, mask_kind: str
) -> None:
    b, _, sq, sk = shape
    x = tensor(seed, shape, dtype, 2.0)
    dy = tensor(seed + 1, shape, dtype)
    mask_shape = {"b1": (b, 1, sq, sk), "bn": shape, "2d": (sq, sk)}.get(mask_kind, (b, 1, sq, sk))
    given_mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(seed)) < 0.3
    mask = None if mask_kind == "none" else given_mask
    fixed = mask_kind == "fixed_triu"
    got = go.reference_vjp(lambda t: npu_scaled_masked_softmax(t, mask, scale, fixed), [x], [dy])
    if fixed:
        used = torch.from_numpy(np.triu(np.ones((sq, sk), dtype=bool), 1))
    else:
        used = torch.zeros(sq, sk, dtype=torch.bool) if mask is None else mask
    want = go.scaled_masked_softmax_vjp(x.double(), used.expand(shape), scale, dy.double())
    go.assert_grads_close(got, [want], [dtype], f"scaled_masked_softmax {mask_kind}")


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    data=st.data(),
    seed=seeds,
    dtype=go.grad_dtypes,
    scale=st.sampled_from([0.125, 1.0, 3.0]),
    mask_kind=st.sampled_from(["none", "b1", "bn", "2d", "fixed_triu"]),
)
def test_scaled_masked_softmax_grad(
    data: st.DataObject, seed: int, dtype: torch.dtype, scale: float, mask_kind: str
) -> None:
    b, n, sq, sk = (data.draw(st.integers(1, 4)) for _ in range(4))
    check_scaled_masked_softmax(seed, (b, n, sq, sk), dtype, scale, mask_kind)


def check_linear(
    seed: int, lead: tuple[int, ...], k: int, n: int, dtype: torch.dtype, with_bias: bool
) -> None:
    x, w = tensor(seed, (*lead, k), dtype), tensor(seed + 1, (n, k), dtype)
    bias = tensor(seed + 2, (n,), dtype) if with_bias else None
    dy = tensor(seed + 3, (*lead, n), dtype)
    got = go.reference_vjp(npu_linear, [x, w, bias], [dy])
    want = go.linear_vjp(x.double(), w.double(), None if bias is None else bias.double(), dy.double())
    go.assert_grads_close(got, list(want), [dtype] * 3, "linear")


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data(), seed=seeds, dtype=go.grad_dtypes, with_bias=st.booleans())
def test_linear_grad(data: st.DataObject, seed: int, dtype: torch.dtype, with_bias: bool) -> None:
    lead = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=2), label="leading dims"))
    k, n = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    check_linear(seed, lead, k, n, dtype, with_bias)


def check_confusion_transpose(
    seed: int, abc: tuple[int, int, int], perm: tuple[int, ...], dtype: torch.dtype, transpose_first: bool
) -> None:
    """Data movement only: the gradient is exact in every dtype."""
    a, b, c = abc
    if transpose_first:
        in_shape = abc
        permuted = tuple(in_shape[p] for p in perm)
        shape = out_shape = (permuted[0], permuted[1] * permuted[2])
    else:
        in_shape, shape = (a * b, c), abc
        out_shape = tuple(shape[p] for p in perm)
    x = tensor(seed, in_shape, dtype)
    dy = tensor(seed + 1, out_shape, dtype)
    (got,) = go.reference_vjp(lambda t: npu_confusion_transpose(t, perm, shape, transpose_first), [x], [dy])
    want = go.confusion_transpose_vjp(in_shape, perm, shape, transpose_first, dy.double())
    assert got is not None and got.dtype == dtype
    assert torch.equal(got.double(), want)


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data(), seed=seeds, dtype=go.grad_dtypes, transpose_first=st.booleans())
def test_confusion_transpose_grad(
    data: st.DataObject, seed: int, dtype: torch.dtype, transpose_first: bool
) -> None:
    abc = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))
    perm = tuple(data.draw(st.permutations([0, 1, 2]), label="perm"))
    check_confusion_transpose(seed, abc, perm, dtype, transpose_first)
