"""More hypothesis laws of the replay's metric engine (not covered by
test_metrics_properties.py): identity over every dtype and layout (0-d, empty, non-contiguous,
subnormal, signed zero, huge, inf/NaN in the same places), 2^k scale invariance of the scale-free
columns at row level for fp16/bf16, monotonicity of the verdict in the size of the error, symmetry of
the symmetric metrics, and complex outputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_metrics_properties import API_OF, APIS  # one API per standard

from msprobe.formats.accuracy_csv import format_cell
from msprobe.run_ut.standards import ERROR, PASS, SKIP, WARNING, Standard, compare_outputs
from msprobe.run_ut.standards import metrics as m
from msprobe.run_ut.standards import rows as c

RANK = {PASS: 0, SKIP: 0, WARNING: 1, ERROR: 2}

# device dtype -> bench dtype (8.1.1's upcast: fp16/bf16 -> fp32, fp32 -> fp64; others unchanged)
FLOATS = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float64,
    torch.float64: torch.float64,
}
OTHERS = (torch.int32, torch.int64, torch.bool, torch.uint8)
COMPLEX = {torch.complex64: torch.complex128, torch.complex128: torch.complex128}

# special values worth drawing in every float dtype
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]


def _finfo(dtype: torch.dtype) -> torch.finfo:
    return torch.finfo(dtype)


@st.composite
def float_tensors(draw: st.DrawFn, dtype: torch.dtype, allow_nonfinite: bool = True) -> torch.Tensor:
    """Any values of ``dtype`` (subnormals, signed zeros, huge, inf/NaN), any shape incl. 0-d and empty."""
    fi = _finfo(dtype)
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5), label="shape")
    n = int(np.prod(shape)) if shape else 1
    elem = st.one_of(
        st.sampled_from([v for v in SPECIAL if allow_nonfinite or np.isfinite(v)]),
        st.floats(-float(fi.max), float(fi.max), allow_nan=False, allow_infinity=False),
        st.floats(-float(fi.smallest_normal) * 4, float(fi.smallest_normal) * 4),  # subnormal region
        st.sampled_from([float(fi.max), -float(fi.max), float(fi.tiny), float(fi.tiny) / 8]),
    )
    vals = draw(st.lists(elem, min_size=n, max_size=n), label="values")
    t = torch.tensor(vals, dtype=torch.float64).to(dtype).reshape(shape)
    return _relayout(draw, t)


def _relayout(draw: st.DrawFn, t: torch.Tensor) -> torch.Tensor:
    """The same values in another memory layout: transposed, strided slice or expanded view."""
    how = draw(st.sampled_from(["plain", "transpose", "stride", "expand"]), label="layout")
    if how == "transpose" and t.dim() >= 2:
        return t.transpose(0, -1).contiguous().transpose(0, -1)  # same values, non-contiguous
    if how == "stride" and t.dim() >= 1:
        big = torch.repeat_interleave(t, 2, dim=-1)
        return big[..., ::2]
    if how == "expand" and t.dim() >= 1 and t.shape[0] == 1:
        return t.expand(3, *t.shape[1:])
    return t


def _one(api: str, bench: Any, device: Any) -> c.DetailsRow:
    rows = compare_outputs(api, "forward", bench, device)
    assert len(rows) == 1
    return rows[0]


# --- identity over every dtype and layout --------------------------------------------------------------


@APIS
@pytest.mark.parametrize("dtype", list(FLOATS), ids=str)
@given(data=st.data())
def test_identical_float_outputs_pass_whatever_the_values(api: str, dtype: torch.dtype, data: Any) -> None:
    device = data.draw(float_tensors(dtype))
    bench = device.to(FLOATS[dtype])
    row = _one(api, bench, device)
    if device.numel() == 0:
        assert row.status == SKIP
        return
    assert row.status == PASS, (row.status, row.message, row.reason)
    cos = row.metrics.get(c.COSINE)
    assert cos is None or format_cell(cos) == "1.00000000000000", cos
    for col in (c.MAX_ABS_ERR, c.ERROR_BALANCE, c.SMALL_VALUE_ERR_RATIO, c.MAX_REL_ERR, c.MEAN_REL_ERR,
                c.INF_NAN_ERR_RATE, c.REL_ERR_RATE, c.ABS_ERR_RATE, c.BINARY_ERR_RATE,
                c.ULP_MAX, c.ULP_MEAN, c.ULP_PROPORTION):  # fmt: skip
        if col in row.metrics:
            assert float(row.metrics[col]) == 0.0, (col, row.metrics[col])
    if c.RMSE in row.metrics:
        assert float(row.metrics[c.RMSE]) == 0.0
    for col in (c.HUNDREDTH, c.THOUSANDTH, c.TEN_THOUSANDTH):
        if col in row.metrics:
            assert row.metrics[col] == 1.0, (col, row.metrics[col])


@pytest.mark.parametrize("dtype", OTHERS, ids=str)
@given(data=st.data())
def test_identical_integer_and_bool_outputs_pass(dtype: torch.dtype, data: Any) -> None:
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    if dtype is torch.bool:
        x = torch.from_numpy(data.draw(hnp.arrays(np.bool_, shape)))
    else:
        info = torch.iinfo(dtype)
        x = torch.from_numpy(
            data.draw(hnp.arrays(np.int64, shape, elements=st.integers(info.min, info.max)))
        ).to(dtype)
    x = _relayout(data.draw, x)
    row = _one("Torch.argmax.0", x.clone(), x)
    assert row.status == (SKIP if x.numel() == 0 else PASS), row.message


@pytest.mark.parametrize("dtype", list(COMPLEX), ids=str)
@given(data=st.data())
def test_identical_complex_outputs_pass(dtype: torch.dtype, data: Any) -> None:
    real_dtype = torch.float32 if dtype is torch.complex64 else torch.float64
    re = data.draw(float_tensors(real_dtype))
    im = data.draw(float_tensors(real_dtype))
    if im.shape != re.shape:
        im = torch.zeros_like(re)
    device = torch.complex(re.contiguous(), im.contiguous())
    if data.draw(st.booleans(), label="conj view"):
        device = device.conj()  # a lazy conjugate: the conj bit is set, values are the conjugates
    bench = device.to(COMPLEX[dtype])
    row = _one("Torch.matmul.0", bench, device)
    assert row.status == (SKIP if device.numel() == 0 else PASS), (row.status, row.message)


# --- scale invariance (2^k) at row level for fp16/bf16 ----------------------------------------------------

HALF = {torch.float16: (2.0**-14, 2.0**14), torch.bfloat16: (2.0**-100, 2.0**100)}


@pytest.mark.parametrize("dtype", list(HALF), ids=str)
@given(data=st.data(), k=st.integers(-4, 4))
def test_scale_free_columns_are_invariant_under_2k(dtype: torch.dtype, data: Any, k: int) -> None:
    """ULP errors (inside the normal range), binary rate, error balance and cosine do not change when
    both sides are multiplied by 2^k; neither does the relative error outside small values."""
    lo, hi = HALF[dtype]
    mag = st.floats(lo * 16, hi / 16)
    x = data.draw(
        hnp.arrays(
            np.float64,
            st.integers(2, 30),
            elements=st.builds(lambda v, s: v * s, mag, st.sampled_from([1, -1])),
        )
    )
    noise = data.draw(hnp.arrays(np.float64, x.shape, elements=st.floats(-0.01, 0.01)))
    bench = torch.from_numpy(x).float()
    device = (bench * torch.from_numpy(1 + noise).float()).to(dtype)
    s = 2.0**k
    for api in (API_OF[Standard.ULP], API_OF[Standard.BINARY], API_OF[Standard.BENCHMARK]):
        r1 = _one(api, bench, device)
        r2 = _one(api, bench * s, device * s)
        for col in (c.ULP_MAX, c.ULP_MEAN, c.ULP_PROPORTION, c.BINARY_ERR_RATE, c.ERROR_BALANCE, c.COSINE):
            if col in r1.metrics:
                assert r1.metrics[col] == r2.metrics[col], (api, col, r1.metrics[col], r2.metrics[col])


# --- monotonicity: a larger error never turns a fail into a pass ----------------------------------------


@APIS
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@given(data=st.data())
def test_a_larger_error_in_one_direction_is_never_better(api: str, dtype: torch.dtype, data: Any) -> None:
    """device_t = bench + t * e for t >= 1: the row status never improves with t."""
    x = data.draw(hnp.arrays(np.float64, st.integers(1, 40), elements=st.floats(-100, 100)), label="bench")
    e = data.draw(hnp.arrays(np.float64, x.shape, elements=st.floats(-1, 1)), label="error")
    scale = data.draw(st.sampled_from([1e-6, 1e-4, 1e-3, 1e-2, 1e-1]), label="scale")
    t = data.draw(st.floats(1, 100), label="t")
    bench_dtype = FLOATS[dtype]
    bench = torch.from_numpy(x).to(bench_dtype)
    d1 = torch.from_numpy(x + scale * e).to(dtype)
    d2 = torch.from_numpy(x + t * scale * e).to(dtype)
    r1, r2 = _one(api, bench, d1), _one(api, bench, d2)
    assert RANK[r2.status] >= RANK[r1.status], (r1.status, r1.message, r2.status, r2.message)


# --- symmetry --------------------------------------------------------------------------------------------


@given(data=st.data())
def test_cosine_and_max_abs_error_are_symmetric(data: Any) -> None:
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=2, max_side=6))
    el = st.floats(-1e6, 1e6)
    a = data.draw(hnp.arrays(np.float64, shape, elements=el))
    b = data.draw(hnp.arrays(np.float64, shape, elements=el))
    assert m.cosine(a, b)[:2] == m.cosine(b, a)[:2] or np.isclose(m.cosine(a, b)[0], m.cosine(b, a)[0])
    assert m.max_abs_error(a, b) == m.max_abs_error(b, a)
    assert m.binary_error_rate(a, b) == m.binary_error_rate(b, a)


# --- a bench correctly rounded to the device dtype, at any magnitude -------------------------------------


def test_bench_rounded_to_fp16_is_no_error_below_the_normal_range() -> None:
    """test_metrics_properties draws values >= 2**-14 only; below, the relative rounding error of fp16
    reaches 0.03 (1e-6 -> 1.0133e-6), and 8.1.1's chain fails the output once one value is off by
    >= 0.001 (|x| >= 4): yet the device holds the best values fp16 has."""
    bench = torch.tensor([5.0019] + [1.0e-6] * 9, dtype=torch.float32)
    row = _one("Functional.softmax.0", bench, bench.to(torch.float16))
    assert row.status == PASS, row.reason
    assert row.message.startswith("Device output equals the bench output rounded to float16")


@APIS
@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16], ids=str)
@given(
    x=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=8),
        elements=st.floats(-60000, 60000, width=32),  # subnormals, zeros and tiny values included
    ),
    scale=st.sampled_from([1.0, 1e-4, 1e-8, 1e-30]),
)
def test_a_device_output_that_is_the_bench_correctly_rounded_is_never_an_error(
    api: str, low: torch.dtype, x: np.ndarray, scale: float
) -> None:
    """AdamW's ``exp_avg_sq.addcmul_(grad, grad, value=1e-3)`` of a ``model.half()``: values below
    fp16's normal range, rounded to fp16 by a faultless device, failed cosine or the ratio chain."""
    bench = torch.from_numpy(x) * scale
    row = _one(api, bench, bench.to(low))
    assert row.status == PASS, row.reason


def test_a_device_flushing_subnormals_to_zero_is_still_an_error() -> None:
    bench = torch.full((8,), 1e-6, dtype=torch.float32)  # an fp16 subnormal: 1.013e-6
    assert bench.to(torch.float16).ne(0).all()
    row = _one("Tensor.addcmul_.0", bench, torch.zeros(8, dtype=torch.float16))
    assert row.status == ERROR, row.message
    tiny = torch.full((8,), 1e-9, dtype=torch.float32)  # below fp16's least subnormal: rounds to 0
    assert _one("Tensor.addcmul_.0", tiny, torch.zeros(8, dtype=torch.float16)).status == PASS


def test_one_value_off_by_an_ulp_keeps_the_chains_verdict() -> None:
    bench = torch.tensor([5.0019] + [1.0e-6] * 9, dtype=torch.float32)
    device = bench.to(torch.float16)
    device[3] = torch.nextafter(device[3], torch.tensor(1.0, dtype=torch.float16))
    assert _one("Functional.softmax.0", bench, device).status == ERROR


def test_an_overflow_rounded_to_inf_stays_an_error() -> None:
    """The bench's 1e5 is beyond fp16: the device's inf is the rounding, yet an overflow stays an error
    (docs/standards.md, deviation 1), as 8.1.1 has it."""
    bench = torch.tensor([1.0, 1e5], dtype=torch.float32)
    assert _one("Torch.exp.0", bench, bench.to(torch.float16)).status == ERROR
