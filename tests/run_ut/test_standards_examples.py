"""Explicit examples: every message of the details CSV and every threshold boundary
of upstream 8.1.1. Each case names the rule it checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from msprobe.formats.accuracy_csv import format_cell
from msprobe.run_ut.standards import ERROR, PASS, WARNING, compare_outputs
from msprobe.run_ut.standards import messages as msg
from msprobe.run_ut.standards import rows as c


def one(api: str, bench: torch.Tensor, device: torch.Tensor) -> c.DetailsRow:
    rows = compare_outputs(api, "forward", bench, device)
    assert len(rows) == 1
    return rows[0]


def texts(row: c.DetailsRow) -> list[str]:
    return [format_cell(v) for v in row.cells()]


# --- cosine ---------------------------------------------------------------


def test_scalar_output_has_blank_cosine_and_scalar_note() -> None:
    row = one("Torch.sum.0", torch.tensor(2.0, dtype=torch.float64), torch.tensor(2.0))
    assert row.status == PASS
    assert row.metrics[c.COSINE] is None
    assert row.message == msg.COSINE_SCALAR + "\n" + msg.MAX_ABS_PASS
    assert texts(row)[3] == "()"


@pytest.mark.parametrize(
    ("bench", "device", "status", "note"),
    [
        ([0.0, 0.0], [0.0, 0.0], PASS, msg.COSINE_BOTH_ZERO),
        ([1.0, 2.0], [0.0, 0.0], ERROR, msg.COSINE_DEVICE_ZERO),
        ([0.0, 0.0], [1.0, 2.0], ERROR, msg.COSINE_BENCH_ZERO),
    ],
)
def test_zero_outputs(bench: list[float], device: list[float], status: str, note: str) -> None:
    row = one("Torch.exp.0", torch.tensor(bench, dtype=torch.float64), torch.tensor(device))
    assert row.status == status
    assert row.metrics[c.COSINE] is None
    if status == ERROR:
        assert row.message == note + "\n" + msg.COSINE_ERROR
        assert c.MAX_ABS_ERR not in row.metrics  # cells after a cosine failure stay blank
    else:
        assert row.message == note + "\n" + msg.MAX_ABS_PASS


def test_nan_cosine_is_an_error_like_8_1_1() -> None:
    """8.1.1's NaN rule and masked_fill row — here with NaN on one side only."""
    row = one("Torch.exp.0", torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([1.0, float("nan")]))
    assert row.status == ERROR
    assert format_cell(row.metrics[c.COSINE]) == "nan"
    assert row.message == msg.COSINE_NAN + "\n" + msg.COSINE_ERROR
    assert "inf/nan on one side only" in row.reason


def test_cosine_below_limit_is_an_error() -> None:
    row = one("Torch.exp.0", torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0.0, 1.0]))
    assert (row.status, row.metrics[c.COSINE]) == (ERROR, 0.0)
    assert row.message == "\n" + msg.COSINE_ERROR
    assert "cosine similarity 0" in row.reason


def test_masked_fill_with_minus_inf_is_not_an_error() -> None:
    """Deviation from 8.1.1 (masked_fill row: 8.1.1 says error): same -inf placement agrees."""
    x = torch.tensor([[1.0, -float("inf")], [0.5, -float("inf")]])
    row = one("Tensor.masked_fill.0", x.double(), x)
    assert row.status == PASS
    assert texts(row)[4:10] == ["1.00000000000000", "0.00000000000000", " ", " ", " ", "0.00000000000000"]
    assert row.message == "\n" + msg.MAX_ABS_PASS


def test_all_positions_same_inf_nan() -> None:
    x = torch.tensor([float("nan"), float("inf")])
    row = one("Torch.exp.0", x.double(), x)
    assert row.status == PASS
    assert row.message == msg.COSINE_ALL_SAME_NONFINITE + "\n" + msg.MAX_ABS_PASS


# --- the legacy ratio chain ---------------------------------------------------


def _scaled(rel: list[float], n: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    """Bench of 100s (so max-abs ≥ 0.001 fails) and a device with the given relative errors first."""
    b = np.full(n, 100.0)
    d = b.copy()
    d[: len(rel)] = b[: len(rel)] * (1 + np.array(rel))
    return torch.from_numpy(b), torch.from_numpy(d)


def test_max_abs_error_boundary() -> None:
    b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    below = one("Torch.exp.0", b, torch.tensor([1.0, 2.0 + 0.0009]))
    assert below.status == PASS and below.message.endswith(msg.MAX_ABS_PASS)
    at = one("Torch.exp.0", b, torch.tensor([1.0, 2.0 + 0.0011]))
    assert not at.message.endswith(msg.MAX_ABS_PASS)
    assert c.THOUSANDTH in at.metrics  # went on to the ratio steps


@pytest.mark.parametrize(
    ("n_bad", "rel", "status", "sentence", "filled"),
    [
        # fp32/fp64: thousandth must exceed 0.999, then ten-thousandth 0.9999
        (0, 5e-5, PASS, msg.REL_LESS_TEN_THOUSANDTH_PASS, {c.THOUSANDTH: 1.0, c.TEN_THOUSANDTH: 1.0}),
        (
            1,
            5e-4,
            WARNING,
            msg.REL_GREATER_TEN_THOUSANDTH_WARNING,
            {c.THOUSANDTH: 1.0, c.TEN_THOUSANDTH: 0.999},
        ),
        (1, 2e-3, ERROR, msg.REL_GREATER_THOUSANDTH_ERROR, {c.THOUSANDTH: 0.999}),  # 0.999 is not > 0.999
    ],
)
def test_fp32_ratio_chain(
    n_bad: int, rel: float, status: str, sentence: str, filled: dict[str, float]
) -> None:
    b, d = _scaled([rel] * max(n_bad, 1))
    if n_bad == 0:
        d = b * (1 + rel)  # every element has rel = rel < 1e-4
    row = one("Torch.exp.0", b, d.float())
    assert row.status == status
    assert row.message == "\n" + sentence
    for col, value in filled.items():
        assert row.metrics[col] == value
    assert (c.TEN_THOUSANDTH in row.metrics) == (status != ERROR)
    assert c.HUNDREDTH not in row.metrics
    if status != PASS:
        assert row.reason.startswith("Torch.exp.0.forward.output.0: max abs error")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("rel", "n_bad", "status", "sentence", "filled"),
    [
        (0.0, 0, PASS, msg.REL_LESS_THOUSANDTH_PASS, (c.HUNDREDTH, c.THOUSANDTH)),
        (0.005, 1, WARNING, msg.REL_GREATER_THOUSANDTH_WARNING, (c.HUNDREDTH, c.THOUSANDTH)),
        (0.05, 10, ERROR, msg.REL_GREATER_HUNDREDTH_ERROR, (c.HUNDREDTH,)),  # 双百 0.99 is not > 0.99
    ],
)
def test_fp16_bf16_ratio_chain(
    dtype: torch.dtype, rel: float, n_bad: int, status: str, sentence: str, filled: tuple[str, ...]
) -> None:
    b = torch.full((1000,), 64.03)  # fp32 bench; rounding it to fp16/bf16 costs rel < 0.001, ae ≥ 0.001
    d = b.clone()
    d[:n_bad] = 64.03 * (1 + rel)
    row = one("Torch.exp.0", b, d.to(dtype))
    assert row.status == status, row.metrics
    assert row.message == "\n" + sentence
    assert tuple(k for k in (c.HUNDREDTH, c.THOUSANDTH, c.TEN_THOUSANDTH) if k in row.metrics) == filled
    mae = row.metrics[c.MAX_ABS_ERR]
    assert isinstance(mae, np.float32)  # fp32 working dtype → written with str(), not %.14f
    assert texts(row)[5] == str(mae)


def test_float64_device_gets_no_standard_columns() -> None:
    """8.1.1: fp64 outputs: the message, then the legacy chain only."""
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    row = one("Functional.linear.0", x, x)
    assert row.status == PASS
    assert row.message == msg.dtype_not_new_standard("torch.float64") + "\n" + msg.MAX_ABS_PASS
    assert set(row.metrics) == {c.COSINE, c.MAX_ABS_ERR}


# --- integer, bool, dtype class, empty, shape --------------------------------


def test_int64_output_judged_by_error_rate() -> None:
    row = one("Torch.argmax.0", torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 3, 5]))
    assert row.status == ERROR
    assert row.metrics == {c.BINARY_ERR_RATE: 0.25}
    assert row.message == "Compare algorithm is not supported for int64 data. Only judged by Error Rate.\n"
    assert texts(row)[:4] == ["Torch.argmax.0.forward.output.0", "torch.int64", "torch.int64", "(4,)"]
    assert "binary error rate" in row.reason


def test_bool_output_passes_when_equal() -> None:
    row = one("Tensor.gt.0", torch.tensor([True, False]), torch.tensor([True, False]))
    assert (row.status, texts(row)[9]) == (PASS, "0.00000000000000")
    assert row.message == msg.only_error_rate("bool")


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16])
def test_int8_int16_cannot_compare(dtype: torch.dtype) -> None:
    x = torch.tensor([1, 2], dtype=dtype)
    row = one("Torch.add.0", x, x)
    name = str(dtype).removeprefix("torch.")
    assert row.status == ERROR
    assert row.message == f"Bench out dtype is {name} but npu output dtype is {name}, cannot compare."
    assert row.metrics == {}


def test_two_empty_outputs_of_one_shape_are_a_skip_row() -> None:
    """Nothing to compare, and nothing wrong (8.1.1: the error "There is not bench calculation
    result."); an ordinary SKIP row counts as pass for its direction."""
    row = one("Torch.zeros.0", torch.zeros(0, 4, dtype=torch.float64), torch.zeros(0, 4))
    assert (row.status, row.message) == (c.SKIP, msg.EMPTY_OUTPUT)
    assert texts(row)[3] == "(0, 4)"
    assert c.aggregate([row, one("Torch.zeros.0", torch.ones(3, dtype=torch.float64), torch.ones(3))]) == PASS
    mismatch = one("Torch.zeros.0", torch.zeros(0, 4, dtype=torch.float64), torch.zeros(4, 0))
    assert mismatch.status == ERROR


def test_shape_mismatch() -> None:
    row = one("Torch.exp.0", torch.zeros(2, 3, dtype=torch.float64), torch.zeros(3, 2))
    assert (row.status, row.message) == (ERROR, "The shape of bench(2, 3) and npu(3, 2) not equal.")


def test_float_vs_int_class_cannot_compare() -> None:
    row = one("Torch.exp.0", torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.int64))
    assert row.message == msg.cannot_compare("float64", "int64")


# --- standard columns and their value types (8.1.1's rows) --------------------------------------


def test_columns_filled_per_standard() -> None:
    b = torch.linspace(-3, 3, 64, dtype=torch.float64)
    d = b.float()
    filled = {api: set(one(api, b, d).metrics) - {c.COSINE, c.MAX_ABS_ERR} for api in (
        "Functional.softmax.0", "Tensor.__add__.0", "Torch.abs.0", "Torch.matmul.0",
        "Functional.conv1d.0", "Torch.test_api.0",
    )}  # fmt: skip
    assert filled == {
        "Functional.softmax.0": {
            c.ERROR_BALANCE,
            c.RMSE,
            c.SMALL_VALUE_ERR_RATIO,
            c.MAX_REL_ERR,
            c.MEAN_REL_ERR,
        },
        "Tensor.__add__.0": {c.INF_NAN_ERR_RATE, c.REL_ERR_RATE, c.ABS_ERR_RATE},
        "Torch.abs.0": {c.BINARY_ERR_RATE},
        "Torch.matmul.0": {c.ULP_MAX, c.ULP_MEAN, c.ULP_PROPORTION},
        "Functional.conv1d.0": {c.THOUSANDTH},
        "Torch.test_api.0": {c.INF_NAN_ERR_RATE, c.REL_ERR_RATE, c.ABS_ERR_RATE, c.ERROR_BALANCE},
    }


def test_int_zero_means_nothing_to_count() -> None:
    """8.1.1: ``0`` (int) when there is no inf/nan or no small value, ``0.00000000000000`` otherwise."""
    b = torch.tensor([1.0, 2.0, 2.0**-25], dtype=torch.float64)
    row = one("Tensor.__add__.0", b, b.float())
    assert texts(row)[15:18] == ["0", "0.00000000000000", "0.00000000000000"]
    b = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    assert texts(one("Tensor.__add__.0", b, b.float()))[15:18] == ["0", "0.00000000000000", "0"]
    assert texts(one("Functional.softmax.0", b, b.float()))[12] == "0"


def test_absolute_threshold_counts() -> None:
    """Absolute, fp16: rtol 2⁻¹⁰, small value 2⁻¹⁰, atol 2⁻¹⁶; inf/nan rate over the inf/nan count."""
    b = torch.tensor([1.0, 1.0, 2.0**-12, 2.0**-12, float("inf"), 4.0])
    d = torch.tensor([1.0 + 2.0**-9, 1.0, 2.0**-12 + 2.0**-15, 2.0**-12, 5.0, 4.0], dtype=torch.float16)
    cols = one("Tensor.mul.0", b, d).metrics
    assert cols[c.REL_ERR_RATE] == pytest.approx(1 / 3)  # normal: 1, 1, 4 → one over rtol
    assert cols[c.ABS_ERR_RATE] == 0.5  # small: two, one over atol
    assert cols[c.INF_NAN_ERR_RATE] == 0.0  # bench inf vs device 5: |Δ|/(|b|+eps) = 0 ≤ rtol (upstream rule)


def test_ulp_of_one_ulp_errors() -> None:
    """ULP, fp32: one ULP of 1.0 is 2⁻²³; the element threshold is > 32 ULP."""
    b = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    d = torch.tensor([1.0 + 2.0**-23, 1.0 + 40 * 2.0**-23, 1.0, 0.0], dtype=torch.float32)
    cols = one("Torch.mm.0", b, d).metrics
    assert (cols[c.ULP_MAX], cols[c.ULP_MEAN], cols[c.ULP_PROPORTION]) == (40.0, 41 / 4, 0.25)


def test_benchmark_metrics_by_formula() -> None:
    """Benchmark standard on fp32 (small value 2⁻²⁰, atol 2⁻³⁰)."""
    b = torch.tensor([1.0, 2.0, 2.0**-22, 4.0], dtype=torch.float64)
    d = torch.tensor([1.0 + 2.0**-10, 2.0, 2.0**-22 + 2.0**-28, 4.0 - 2.0**-8], dtype=torch.float32)
    cols = one("Torch.erf.0", b, d).metrics
    assert cols[c.SMALL_VALUE_ERR_RATIO] == 1.0
    assert cols[c.ERROR_BALANCE] == 0.25  # two above, one below
    eps = 2.0**-52
    rel = [2.0**-10 / (1 + eps), 0.0, 2.0**-8 / (4 + eps)]
    assert cols[c.MAX_REL_ERR] == pytest.approx(max(rel), rel=1e-12)
    assert cols[c.MEAN_REL_ERR] == pytest.approx(sum(rel) / 3, rel=1e-12)
    mse = (2.0**-20 + 2.0**-16) / 4 * (4 / (4 - 1 + 1e-4) + 1e-4)
    assert cols[c.RMSE] == pytest.approx(mse**0.5, rel=1e-12)


# --- overflow acceptance ----------------------------------------------------------------------


def test_fp16_exp_overflow_is_an_error_and_in_range_passes() -> None:
    g = torch.Generator().manual_seed(0)
    wide = (torch.rand(1000, generator=g) * 12).half()
    row = one("Torch.exp.0", torch.exp(wide.float()), torch.exp(wide))
    assert row.status == ERROR
    assert "inf/nan on one side only" in row.reason
    small = (torch.rand(1000, generator=g) * 2 - 1).half()
    assert one("Torch.exp.0", torch.exp(small.float()), torch.exp(small)).status == PASS


# --- element-level threshold boundaries -------------------------------------------------------------------


@pytest.mark.parametrize(("ulps", "counted"), [(32, False), (33, True)])
def test_fp32_ulp_element_threshold_is_strictly_greater_than_32(ulps: int, counted: bool) -> None:
    b = torch.tensor([1.0, 1.0], dtype=torch.float64)
    d = torch.tensor([1.0 + ulps * 2.0**-23, 1.0])
    cols = one("Torch.bmm.0", b, d).metrics
    assert cols[c.ULP_MAX] == ulps
    assert cols[c.ULP_PROPORTION] == (0.5 if counted else 0.0)


@pytest.mark.parametrize(("ulps", "counted"), [(1, False), (2, True)])
def test_fp16_ulp_element_threshold_is_strictly_greater_than_1(ulps: int, counted: bool) -> None:
    b = torch.tensor([1.0, 1.0])
    d = torch.tensor([1.0 + ulps * 2.0**-10, 1.0], dtype=torch.float16)
    cols = one("Torch.bmm.0", b, d).metrics
    assert cols[c.ULP_MAX] == ulps
    assert cols[c.ULP_PROPORTION] == (0.5 if counted else 0.0)


def test_fp16_small_value_boundary_and_rtol() -> None:
    """Absolute threshold, fp16: |b| ≤ 2⁻¹⁰ is small (abs error vs 2⁻¹⁶), above it rel error vs 2⁻¹⁰."""
    small = one("Tensor.sub.0", torch.tensor([2.0**-10]), torch.tensor([2.0**-10 + 2.0**-15]).half()).metrics
    assert (small[c.ABS_ERR_RATE], small[c.REL_ERR_RATE]) == (1.0, 0)
    within = one("Tensor.sub.0", torch.tensor([1.0]), torch.tensor([1.0 + 2.0**-10]).half()).metrics
    assert (within[c.REL_ERR_RATE], within[c.ABS_ERR_RATE]) == (0.0, 0)  # 2⁻¹⁰/(1+eps) is not > rtol
    over = one("Tensor.sub.0", torch.tensor([1.0]), torch.tensor([1.0 + 2.0**-9]).half()).metrics
    assert over[c.REL_ERR_RATE] == 1.0


@pytest.mark.parametrize(("cos", "status"), [(0.9899, ERROR), (0.9901, PASS)])
def test_cosine_limit(cos: float, status: str) -> None:
    b = torch.tensor([1.0, 0.0], dtype=torch.float64)
    d = torch.tensor([cos, (1 - cos**2) ** 0.5])
    row = one("Torch.exp.0", b, d)
    assert row.metrics[c.COSINE] == pytest.approx(cos, abs=1e-7)
    # above the limit the chain goes on (to the ratio steps, which fail here: the error is large)
    assert row.message.endswith(msg.COSINE_ERROR) == (status == ERROR)
    assert (c.MAX_ABS_ERR in row.metrics) == (status == PASS)


@pytest.mark.parametrize(("zeros", "status"), [(99, PASS), (100, ERROR)])
def test_dropout_gap_boundary(zeros: int, status: str) -> None:
    """Dropout: pass iff the zero-count gap is < 0.1 of numel (1000 elements: 99 pass, 100 fail)."""
    b = torch.ones(1000, dtype=torch.float64)
    d = torch.ones(1000)
    d[:zeros] = 0
    (row,) = compare_outputs("Functional.dropout.0", "forward", b, d)
    assert row.status == status


def test_fp16_value_types() -> None:
    """Float32 working arrays: max abs / relative errors via ``str()``, RMSE float64 ``%.14f`` (the 26.x
    fixture's fp32-vs-fp32 conv2d rows: ``0.0`` max abs, ``0.00000000000000`` RMSE, ``0.0`` max rel)."""
    b = torch.tensor([1.0, 2.0, 3.0])
    row = one("Functional.softmax.0", b, b.half())
    cells = texts(row)
    assert (cells[5], cells[11], cells[13], cells[14]) == ("0.0", "0.00000000000000", "0.0", "0.0")
