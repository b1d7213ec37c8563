"""Which details columns each precision standard fills, and with what.

One function per standard, registered in :data:`STANDARD_COLUMNS`; each takes a :class:`Pair` (the
prepared bench/device arrays of one output) and returns ``{column: value}``. Numbers come from
``thresholds.THRESHOLDS``, formulas from ``metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from msprobe.run_ut.api_info import Standard
from msprobe.run_ut.standards import metrics as m
from msprobe.run_ut.standards import rows
from msprobe.run_ut.standards.thresholds import (
    AbsoluteThreshold,
    Accumulative,
    Benchmark,
    Thousandth,
    Ulp,
    thresholds,
)

FP16_MAX = float(np.finfo(np.float16).max)
FP32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Pair:
    """One float output ready for comparison.

    ``bench``/``device``: numpy arrays of equal shape (bf16 widened to fp32). ``device_dtype``: the
    torch dtype string of the device output. ``same_nonfinite``: positions where both sides hold the
    same inf or NaN (ours: these never count as errors, docs/standards.md "Deviations from 8.1.1");
    ``mismatch_nonfinite``: positions where either side is inf/NaN and the other differs.
    ``tolerances``: the API's changes to its standard's numbers (``ApiInfo.tolerances``).
    """

    bench: m.Array
    device: m.Array
    device_dtype: str
    same_nonfinite: m.Array
    mismatch_nonfinite: m.Array
    tolerances: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def thresholds(self, standard: Standard) -> Any:
        return thresholds(standard, self.device_dtype, self.tolerances)

    @cached_property
    def eps(self) -> Any:
        return m.eps_for(self.bench, self.device_dtype)

    @cached_property
    def ae(self) -> m.Array:
        return m.abs_err(self.bench, self.device)

    @cached_property
    def abs_b_eps(self) -> m.Array:
        with np.errstate(all="ignore"):
            return np.abs(self.bench) + self.eps

    @cached_property
    def rel(self) -> m.Array:
        """Unmasked relative error; same-placement inf/nan positions count as 0 (agree)."""
        rel = m.rel_err(self.bench, self.device, self.eps)
        if self.same_nonfinite.any():
            rel = np.where(self.same_nonfinite, rel.dtype.type(0), rel)
        return rel

    @cached_property
    def finite(self) -> m.Array:
        return m.finite_mask(self.bench, self.device)

    @property
    def finite_max(self) -> float:
        return {"torch.float16": FP16_MAX, "torch.bfloat16": m.BF16_MAX}.get(self.device_dtype, FP32_MAX)


def benchmark(p: Pair) -> dict[str, Any]:
    """Benchmark standard: 误差均衡性, 均方根误差, 小值域错误占比, 相对误差最大值, 相对误差平均值."""
    t: Benchmark = p.thresholds(Standard.BENCHMARK)
    infnan = ~p.finite
    small = m.small_value_mask(p.bench, p.finite, t.small_value)
    rel = m.masked_rel(p.ae, p.abs_b_eps, small | infnan)
    return {
        rows.ERROR_BALANCE: m.error_balance(p.bench, p.device),
        rows.RMSE: m.rmse(p.ae, infnan | small),
        rows.SMALL_VALUE_ERR_RATIO: m.small_value_err_ratio(p.ae, small, t.small_value_atol),
        rows.MAX_REL_ERR: m.max_rel_err(rel),
        rows.MEAN_REL_ERR: m.mean_rel_err(rel),
    }


def _absolute_rates(p: Pair, small_value: float, atol: float, rtol: float) -> dict[str, Any]:
    infnan = ~p.finite
    small = m.small_value_mask(p.bench, p.finite, small_value)
    normal = p.finite & ~small
    with np.errstate(all="ignore"):
        rel = p.ae / p.abs_b_eps
    return {
        rows.INF_NAN_ERR_RATE: m.inf_nan_err_rate(p.bench, p.device, p.abs_b_eps, infnan, rtol, p.finite_max),
        rows.REL_ERR_RATE: m.rel_err_rate(rel, normal, rtol),
        rows.ABS_ERR_RATE: m.abs_err_rate(p.ae, small, atol),
    }


def absolute_threshold(p: Pair) -> dict[str, Any]:
    """Absolute threshold: inf/nan错误率, 相对误差错误率, 绝对误差错误率."""
    t: AbsoluteThreshold = p.thresholds(Standard.ABSOLUTE_THRESHOLD)
    return _absolute_rates(p, t.small_value, t.small_value_atol, t.rtol)


def accumulative(p: Pair) -> dict[str, Any]:
    """Accumulative: the absolute rates with rtol = atol = bound and small value 1, plus 误差均衡性."""
    t: Accumulative = p.thresholds(Standard.ACCUMULATIVE)
    cols = _absolute_rates(p, t.small_value, t.bound, t.bound)
    cols[rows.ERROR_BALANCE] = m.error_balance(p.bench, p.device)
    return cols


def binary(p: Pair) -> dict[str, Any]:
    """二进制一致错误率 of a float output: the bench rounded to the device dtype vs the device (exact)."""
    with np.errstate(all="ignore"):  # overflow to inf is the rounding's honest result
        bench = p.bench.astype(p.device.dtype)  # fp16 / fp32 device: numpy rounds to nearest even
    if p.device_dtype == "torch.bfloat16":  # widened to fp32: round through bf16 (numpy has none)
        import torch

        bench = torch.from_numpy(np.ascontiguousarray(p.bench)).to(torch.bfloat16).float().numpy()
    return {rows.BINARY_ERR_RATE: m.binary_error_rate(bench, p.device, p.same_nonfinite)}


def ulp(p: Pair) -> dict[str, Any]:
    """ULP standard: ULP误差最大值, ULP误差平均值, ULP误差大于阈值占比.

    Ours: same-placement inf/nan → 0 ULP; any other inf/nan position → inf ULP (so it always counts).
    """
    t: Ulp = p.thresholds(Standard.ULP)
    errors = m.ulp_errors(p.bench, p.device, t.mantissa_bits, t.min_exp)
    if p.same_nonfinite.any() or p.mismatch_nonfinite.any():
        errors = np.where(p.same_nonfinite, errors.dtype.type(0), errors)
        errors = np.where(p.mismatch_nonfinite, errors.dtype.type(np.inf), errors)
    return {
        rows.ULP_MAX: m.ulp_max(errors),
        rows.ULP_MEAN: m.ulp_mean(errors),
        rows.ULP_PROPORTION: m.ulp_proportion(errors, t.element_threshold),
    }


def thousandth(p: Pair) -> dict[str, Any]:
    """Thousandth standard: 双千指标 = #(rel < 0.001)/N, filled even when max-abs passes."""
    t: Thousandth = p.thresholds(Standard.THOUSANDTH)
    return {rows.THOUSANDTH: m.rel_ratio(p.rel, t.rel_threshold)}


STANDARD_COLUMNS: dict[Standard, Callable[[Pair], dict[str, Any]]] = {
    Standard.BENCHMARK: benchmark,
    Standard.ABSOLUTE_THRESHOLD: absolute_threshold,
    Standard.BINARY: binary,
    Standard.ULP: ulp,
    Standard.THOUSANDTH: thousandth,
    Standard.ACCUMULATIVE: accumulative,
}
