"""Laws of the metric engine, checked with hypothesis.

Every law is run through the public :func:`compare_outputs` for one API of each standard, so the
routing, the columns and the status chain are exercised together. Values are bounded on purpose:
inside the normal range of the device dtype (no underflow to zero, no overflow) so that "rounding" is
the only error, and the 2^k scaling stays exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import example, given, target
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from msprobe.formats.accuracy_csv import format_cell
from msprobe.run_ut.standards import ERROR, PASS, Standard, compare_outputs, standard_for
from msprobe.run_ut.standards import metrics as m
from msprobe.run_ut.standards import rows as c

# one API per standard (routing table)
API_OF = {
    Standard.BENCHMARK: "Functional.softmax.0",
    Standard.ABSOLUTE_THRESHOLD: "Tensor.__add__.0",
    Standard.BINARY: "Functional.relu.0",
    Standard.ULP: "Functional.linear.0",
    Standard.THOUSANDTH: "Functional.conv2d.0",
    Standard.ACCUMULATIVE: "Torch.test_api.0",
}
assert {standard_for(a) for a in API_OF.values()} == set(Standard)
APIS = pytest.mark.parametrize("api", list(API_OF.values()), ids=[s.name for s in API_OF])

# The error columns of each standard and their value for a perfect match.
ZERO_COLUMNS = {
    Standard.BENCHMARK: (c.ERROR_BALANCE, c.RMSE, c.SMALL_VALUE_ERR_RATIO, c.MAX_REL_ERR, c.MEAN_REL_ERR),
    Standard.ABSOLUTE_THRESHOLD: (c.INF_NAN_ERR_RATE, c.REL_ERR_RATE, c.ABS_ERR_RATE),
    Standard.BINARY: (c.BINARY_ERR_RATE,),
    Standard.ULP: (c.ULP_MAX, c.ULP_MEAN, c.ULP_PROPORTION),
    Standard.THOUSANDTH: (),
    Standard.ACCUMULATIVE: (c.INF_NAN_ERR_RATE, c.REL_ERR_RATE, c.ABS_ERR_RATE, c.ERROR_BALANCE),
}


def fp32_arrays(min_magnitude: float = 2.0**-20, max_magnitude: float = 2.0**20, min_size: int = 2) -> Any:
    """fp32 arrays of normal numbers (sign free) with |x| in [min, max]; no zeros unless asked."""
    mag = st.floats(min_magnitude, max_magnitude, width=32)
    elem = st.builds(lambda x, s: x * s, mag, st.sampled_from([1.0, -1.0]))
    shape = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6).filter(
        lambda s: int(np.prod(s)) >= min_size
    )
    return hnp.arrays(np.float32, shape, elements=elem)


def _row(api: str, bench: np.ndarray, device: torch.Tensor) -> c.DetailsRow:
    rows = compare_outputs(api, "forward", torch.from_numpy(bench), device)
    assert len(rows) == 1
    return rows[0]


# --- identity ----------------------------------------------------------------------------------------


@APIS
@given(x=fp32_arrays())
def test_identical_outputs_have_no_error(api: str, x: np.ndarray) -> None:
    row = _row(api, x.astype(np.float64), torch.from_numpy(x))
    assert row.status == PASS, row.message
    assert format_cell(row.metrics[c.COSINE]) == "1.00000000000000"  # 1 up to the dot product's rounding
    assert float(row.metrics[c.MAX_ABS_ERR]) == 0.0
    for col in ZERO_COLUMNS[standard_for(api)]:
        assert float(row.metrics[col]) == 0.0, col
    if standard_for(api) is Standard.THOUSANDTH:
        assert row.metrics[c.THOUSANDTH] == 1.0


@given(x=fp32_arrays())
def test_identity_at_metric_level(x: np.ndarray) -> None:
    b = x.astype(np.float64)
    d = x
    value, ok, note = m.cosine(b, d)
    assert (value, ok, note) == (pytest.approx(1.0, abs=1e-12), True, "")
    assert m.ulp_proportion(m.ulp_errors(b, d, 23, -126), 32) == 0.0
    assert float(m.ulp_max(m.ulp_errors(b, d, 23, -126))) == 0.0
    assert m.binary_error_rate(b, d) == 0.0
    assert m.error_balance(b, d) == 0.0
    assert m.rel_ratio(m.rel_err(b, d, np.finfo(np.float64).eps), 0.0001) == 1.0


# --- scaling by 2^k ------------------------------------------------------------------------------------


@given(x=fp32_arrays(2.0**-10, 2.0**10), noise=st.floats(-1e-3, 1e-3), k=st.integers(-8, 8))
def test_scaling_by_power_of_two(x: np.ndarray, noise: float, k: int) -> None:
    """Exact: cosine, ULP, error balance, binary rate are unchanged; max-abs error and RMSE scale by 2^k.
    Relative metrics are unchanged up to the ``eps`` added to |b| (negligible for |b| ≥ 2⁻¹⁰)."""
    b = x.astype(np.float64)
    d = (b * (1 + noise)).astype(np.float32)
    s = 2.0**k
    bs, ds = b * s, (d * np.float32(s)).astype(np.float32)
    assert m.cosine(bs, ds) == m.cosine(b, d)
    u, us = m.ulp_errors(b, d, 23, -126), m.ulp_errors(bs, ds, 23, -126)
    np.testing.assert_array_equal(u, us)
    assert m.error_balance(bs, ds) == m.error_balance(b, d)
    assert m.binary_error_rate(bs, ds) == m.binary_error_rate(b, d)
    assert m.max_abs_error(bs, ds) == m.max_abs_error(b, d) * s
    no_mask = np.zeros(b.shape, dtype=bool)
    assert m.rmse(m.abs_err(bs, ds), no_mask) == m.rmse(m.abs_err(b, d), no_mask) * s
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(m.rel_err(bs, ds, eps), m.rel_err(b, d, eps), rtol=1e-9, atol=1e-12)


# --- error balance under swapping sides ------------------------------------------------------------------


@given(x=fp32_arrays(), y=st.data())
def test_error_balance_formula_and_swap(x: np.ndarray, y: st.DataObject) -> None:
    other = y.draw(hnp.arrays(np.float32, x.shape, elements=st.floats(-4, 4, width=32)))
    b, d = x.astype(np.float64), other
    larger, smaller = int(np.sum(d > b.astype(np.float32))), int(np.sum(d < b.astype(np.float32)))
    assert m.error_balance(b, d) == abs(larger - smaller) / b.size
    # the signed imbalance flips sign when the sides swap, so |.| is unchanged
    assert m.error_balance(d.astype(np.float64), b.astype(np.float32)) == m.error_balance(b, d)


def test_error_balance_all_one_sided() -> None:
    b = np.array([1.0, 2.0, 3.0, 4.0])
    assert m.error_balance(b, (b + 0.5).astype(np.float32)) == 1.0
    assert m.error_balance(b, (b - 0.5).astype(np.float32)) == 1.0
    assert m.error_balance(b, np.array([1.5, 1.5, 3.0, 4.0], dtype=np.float32)) == 0.0


# --- no false error: a bench rounded to the device dtype ----------------------------------------------

LOW = {
    # dtype: (torch dtype, min normal, safe max, ULP threshold per element)
    "fp16": (torch.float16, 2.0**-14, 60000.0),
    "bf16": (torch.bfloat16, 2.0**-126, 2.0**100),
}


@APIS
@pytest.mark.parametrize("low", list(LOW))
@given(data=st.data())
@example(data=None)  # placeholder replaced below
def test_bench_rounded_to_device_dtype_is_no_error(api: str, low: str, data: st.DataObject | None) -> None:
    torch_dtype, lo, hi = LOW[low]
    if data is None:  # pinned case: values straddling the fp16 small-value threshold 2^-10
        x = np.array([2.0**-10 * 1.0001, 2.0**-11 * 3.3, 1.0 / 3.0, 3.0e4], dtype=np.float32)
        if low == "bf16":
            x = x * np.float32(1e-30)
    else:
        x = data.draw(fp32_arrays(max(lo, 2.0**-30), hi))
    bench = torch.from_numpy(x)  # fp32 bench of a fp16/bf16 API
    device = bench.to(torch_dtype)
    row = _row(api, x, device)
    assert row.status != ERROR, (row.status, row.reason)
    standard = standard_for(api)
    if standard is Standard.ULP:
        target(float(row.metrics[c.ULP_MAX]), label="ULP max")
        assert float(row.metrics[c.ULP_MAX]) <= 0.5  # round to nearest: at most half an ULP
        assert row.metrics[c.ULP_PROPORTION] == 0.0
    if standard is Standard.ABSOLUTE_THRESHOLD:
        assert row.metrics[c.INF_NAN_ERR_RATE] == 0
        assert row.metrics[c.REL_ERR_RATE] == 0
        if low == "fp16":  # bf16's 8.1.1 atol for small values is 1e-16 (docs/standards.md)
            assert row.metrics[c.ABS_ERR_RATE] == 0
    if standard is Standard.BINARY:
        assert row.metrics[c.BINARY_ERR_RATE] == 0.0
    if standard is Standard.THOUSANDTH and low == "fp16":
        assert row.metrics[c.THOUSANDTH] >= 0.999


# --- inf/nan placement -------------------------------------------------------------------------------------

SPECIALS = st.sampled_from([np.inf, -np.inf, np.nan])


@APIS
@given(x=fp32_arrays(2.0**-10, 2.0**10, min_size=3), data=st.data())
def test_same_inf_nan_placement_adds_no_error(api: str, x: np.ndarray, data: st.DataObject) -> None:
    flat = x.reshape(-1).copy()
    idx = data.draw(st.sets(st.integers(0, flat.size - 1), min_size=1, max_size=flat.size - 1))
    for i in idx:
        flat[i] = data.draw(SPECIALS)
    x2 = flat.reshape(x.shape)
    row = _row(api, x2.astype(np.float64), torch.from_numpy(x2.copy()))
    assert row.status == PASS, row.message
    # blank when a single finite element is left (cosine of one element says nothing)
    assert format_cell(row.metrics[c.COSINE]) in ("1.00000000000000", " ")
    for col in ZERO_COLUMNS[standard_for(api)]:
        assert float(row.metrics[col]) == 0.0, col


@APIS
@given(x=fp32_arrays(2.0**-10, 2.0**10, min_size=1), data=st.data())
@example(x=np.array([1.0], dtype=np.float32), data=None)
def test_different_inf_nan_placement_is_an_error(api: str, x: np.ndarray, data: st.DataObject | None) -> None:
    flat_b = x.reshape(-1).astype(np.float64)
    flat_d = x.reshape(-1).copy()
    if data is None:
        i, side, special, other = 0, "device", np.inf, np.nan
    else:
        i = data.draw(st.integers(0, flat_b.size - 1))
        side = data.draw(st.sampled_from(["device", "bench", "both"]))
        special = data.draw(SPECIALS)
        other = data.draw(SPECIALS.filter(lambda v: not (np.isnan(v) and np.isnan(special)) and v != special))
    if side in ("device", "both"):
        flat_d[i] = special
    if side == "bench":
        flat_b[i] = special
    if side == "both":
        flat_b[i] = other
    row = _row(api, flat_b.reshape(x.shape), torch.from_numpy(flat_d.reshape(x.shape)))
    assert row.status == ERROR, (side, special, other, row.message)
    assert row.reason.startswith(row.name)


@APIS
@given(same=SPECIALS, mine=SPECIALS, at=st.integers(0, 19_999), data=st.data())
def test_a_mismatch_left_alone_among_same_placement_specials_is_an_error(
    api: str, same: float, mine: float, at: int, data: st.DataObject
) -> None:
    """Every element but one is the same inf/NaN on both sides; the last one is a mismatch (1.0 against
    a special). Left out of the cosine, the same pairs leave that one element, which is no scalar that
    passes: the placement differs, so the row is an error (with enough elements the ratio chain alone
    would pass it)."""
    b = np.full(20_000, same)
    b[at] = 1.0
    d = b.astype(np.float32)
    d[at] = mine
    if data.draw(st.booleans(), label="special on the bench"):
        b, d = d.astype(np.float64), b.astype(np.float32)
    row = _row(api, b, torch.from_numpy(d))
    assert row.status == ERROR, row.message


# --- robustness: any values, any float dtype ---------------------------------------------------------------

DEVICE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@APIS
@pytest.mark.parametrize("low", list(DEVICE_DTYPES))
@given(data=st.data())
def test_any_values_give_a_well_formed_row(api: str, low: str, data: st.DataObject) -> None:
    """Zeros, subnormals, huge values, inf and NaN anywhere: never an exception, always 23 cells."""
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=5), label="shape")
    wild = st.floats(allow_nan=True, allow_infinity=True, width=32)
    b = data.draw(hnp.arrays(np.float32, shape, elements=wild), label="bench")
    d = data.draw(hnp.arrays(np.float32, shape, elements=wild), label="device")
    torch_dtype = DEVICE_DTYPES[low]
    bench = torch.from_numpy(b).double() if low == "fp32" else torch.from_numpy(b)
    row = _row(api, bench.numpy(), torch.from_numpy(d).to(torch_dtype))
    assert row.status in (PASS, "Warning", ERROR)
    cells = [format_cell(v) for v in row.cells()]
    assert len(cells) == 23 and all(isinstance(x, str) for x in cells)
    assert (row.status == PASS) == (row.reason == "")
    assert "\n" not in row.reason  # one line for the failing pytest item
