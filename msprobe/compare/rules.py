"""Verdict rules as data: one ``Rule`` per judged value, vectorised over a column of rows.

A rule knows the column it writes, its bound, how a value fails it, the message a failing row gets,
and how far past its bound a value is (``severity``: above 1 exactly when the value fails), which
orders the report's failing APIs. Every bound is read from the one thresholds table
(:mod:`msprobe.run_ut.standards.thresholds`, upstream 8.1.1's numbers); none is written here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from msprobe.formats import accuracy_csv as ac
from msprobe.run_ut.api_info import Standard
from msprobe.run_ut.standards.thresholds import DEFAULT, FP16, FP32, thresholds

ENGLISH: dict[str, str] = {
    ac.SMALL_VALUE_RATIO: "small-value error ratio",
    ac.RMSE_RATIO: "RMSE ratio",
    ac.MAX_REL_ERR_RATIO: "max relative error ratio",
    ac.MEAN_REL_ERR_RATIO: "mean relative error ratio",
    ac.ERROR_BALANCE_RATIO: "error balance ratio",
    ac.INF_NAN_ERR_RATE: "inf/nan error rate",
    ac.REL_ERR_RATE: "relative error rate",
    ac.ABS_ERR_RATE: "absolute error rate",
    ac.BINARY_ERR_RATE: "binary mismatch rate",
    ac.THOUSANDTH: "thousandth ratio",
    ac.ULP_MEAN: "mean ULP error",
    ac.ULP_PROPORTION: "ULP proportion over bound",
    ac.ULP_PROPORTION_RATIO: "ULP proportion ratio",
    ac.COSINE: "NPU cosine similarity",
}
"""English names of the metric columns (the CSVs keep upstream's Chinese headers)."""

Kind = Literal["above", "nonzero", "below", "not_at_most", "not_below"]


@dataclass(frozen=True)
class Rule:
    """``value`` fails when it is ``above`` the bound, ``nonzero``, ``below`` it, ``not_at_most`` it or
    ``not_below`` it (8.1.1 writes its rules both ways: ``ratio > 2`` fails, ``mean < 64`` passes).

    NaN never fails ``above`` (upstream: a NaN ratio passes) and always fails the other kinds.
    ``bound=None`` means a per-row bound is passed in (the accumulative error-balance limit per dtype).
    """

    value: str  # the details output column holding the judged value
    status: str | None  # the output column of its pass/error (None: not written)
    kind: Kind
    bound: float | None
    message: str  # appended to a failing row's Message
    counted: bool = True  # False: reported only (the benchmark error balance)
    # the largest value the metric can take (a proportion: 1): there it says nothing of how far past
    # its bound the output is, and its severity is infinite (an escape rule's nearest escape is another)
    ceiling: float | None = None

    def _bound(self, bound: np.ndarray | float | None) -> np.ndarray | float:
        b = self.bound if bound is None else bound
        if b is None:
            raise ValueError(f"rule {self.value}: no bound")
        return b

    def fails(self, values: np.ndarray, bound: np.ndarray | float | None = None) -> np.ndarray:
        b = self._bound(bound)
        with np.errstate(invalid="ignore"):
            if self.kind == "above":
                return np.asarray(values > b)
            if self.kind == "nonzero":
                return np.asarray(~(values == 0))
            if self.kind == "below":
                return np.asarray(~(values >= b))
            if self.kind == "not_below":
                return np.asarray(~(values < b))
            return np.asarray(~(values <= b))

    def severity(self, values: np.ndarray, bound: np.ndarray | float | None = None) -> np.ndarray:
        """How far past the bound: ratio to the bound, or for rates that must be 0, 1 + rate in ‰."""
        b = self._bound(bound)
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.kind in ("above", "not_at_most", "not_below"):
                out = values / b
            elif self.kind == "nonzero":
                out = 1.0 + np.abs(values) * 1000.0
            else:
                out = (1.0 - values) / (1.0 - b)
        if self.ceiling is not None:
            with np.errstate(invalid="ignore"):
                out = np.where(values >= self.ceiling, np.inf, out)
        return np.where(np.isnan(values), np.inf, out)

    def describe(self, value: float, bound: float | None = None) -> str:
        """``RMSE ratio (均方根误差比值) 50 > 2``: the value against the bound it fails."""
        name = f"{ENGLISH.get(self.value, self.value)} ({self.value})"
        if math.isnan(value):
            return f"{name}: inf/nan on one side only"
        b = self.bound if bound is None else bound
        op = {"above": ">", "nonzero": "≠", "below": "<", "not_at_most": ">", "not_below": "≥"}[self.kind]
        return f"{name} {value:.6g} {op} {0 if self.kind == 'nonzero' else b:.6g}"


@dataclass(frozen=True)
class EscapeRule:
    """Passes when any of its rules passes (8.1.1's ULP verdict: mean, proportion or ratio small enough)."""

    rules: tuple[Rule, ...]
    message: str

    def fails(self, columns: Sequence[np.ndarray]) -> np.ndarray:
        out = np.ones(len(columns[0]), dtype=bool)
        for rule, values in zip(self.rules, columns):
            out &= rule.fails(values)
        return out

    def severity(self, columns: Sequence[np.ndarray]) -> np.ndarray:
        """The nearest escape: the smallest of the rules' severities."""
        return np.minimum.reduce([r.severity(v) for r, v in zip(self.rules, columns)])


# --- 8.1.1's rules (upstream's messages; bounds from the thresholds table) -----------------------------

_BENCH = thresholds(Standard.BENCHMARK, DEFAULT)
_ABS = thresholds(Standard.ABSOLUTE_THRESHOLD, DEFAULT)
_ACC = thresholds(Standard.ACCUMULATIVE, DEFAULT)
_ULP32 = thresholds(Standard.ULP, FP32)
_ULP16 = thresholds(Standard.ULP, FP16)  # bf16 has the same limits (a test checks it)

# Ours, not 8.1.1's (a deviation): every benchmark metric leaves inf/NaN positions out, so an inf/NaN the
# NPU alone produces passed. The replay's cosine is NaN exactly when the inf/NaN placement differs from the
# bench's; NaN on the NPU row and a number on the GPU row fails the row (read by _judge_benchmark).
# Its kind and bound only word the report ("inf/nan on one side only"); the test is on the two cells.
NPU_ONLY_NONFINITE = Rule(
    ac.COSINE,
    None,
    "above",
    1.0,
    "ERROR: inf/nan on the NPU only (余弦相似度 nan, a number on the GPU)\n",
)

# Benchmark: (input column, rule on the NPU/GPU ratio). No operator levels in 8.1.1; EB is not counted.
BENCHMARK: tuple[tuple[str, Rule], ...] = (
    (ac.SMALL_VALUE_ERR_RATIO,
     Rule(ac.SMALL_VALUE_RATIO, ac.SMALL_VALUE_STATUS, "above", _BENCH.small_value_ratio_limit,
          "ERROR: 小值域错误比值超过阈值\n")),
    (ac.RMSE,
     Rule(ac.RMSE_RATIO, ac.RMSE_STATUS, "above", _BENCH.rmse_ratio_limit,
          "ERROR: 均方根误差比值超过阈值\n")),
    (ac.MAX_REL_ERR,
     Rule(ac.MAX_REL_ERR_RATIO, ac.MAX_REL_ERR_STATUS, "above", _BENCH.max_rel_ratio_limit,
          "ERROR: 相对误差最大值比值超过阈值\n")),
    (ac.MEAN_REL_ERR,
     Rule(ac.MEAN_REL_ERR_RATIO, ac.MEAN_REL_ERR_STATUS, "above", _BENCH.mean_rel_ratio_limit,
          "ERROR: 相对误差平均值比值超过阈值\n")),
    (ac.ERROR_BALANCE,
     Rule(ac.ERROR_BALANCE_RATIO, ac.ERROR_BALANCE_STATUS, "above", _BENCH.eb_ratio_limit, "",
          counted=False)),
)  # fmt: skip

# Absolute threshold: each NPU rate must be exactly 0; messages are joined without separators.
_RATE = _ABS.max_error_rate
ABSOLUTE: tuple[tuple[str, Rule], ...] = (
    (ac.INF_NAN_ERR_RATE,
     Rule(ac.INF_NAN_ERR_RATE, ac.INF_NAN_STATUS, "nonzero", _RATE, "ERROR: inf/nan错误率超过阈值")),
    (ac.REL_ERR_RATE,
     Rule(ac.REL_ERR_RATE, ac.REL_ERR_STATUS, "nonzero", _RATE, "ERROR: 相对误差错误率超过阈值")),
    (ac.ABS_ERR_RATE,
     Rule(ac.ABS_ERR_RATE, ac.ABS_ERR_STATUS, "nonzero", _RATE, "ERROR: 绝对误差错误率超过阈值")),
)  # fmt: skip

# Accumulative: the same rates (messages end in a newline and are joined with one) plus NPU error balance
# (its bound per row: ``Accumulative.eb_threshold`` of the row's dtype).
ACCUMULATIVE: tuple[tuple[str, Rule], ...] = (
    *((col, Rule(r.value, r.status, r.kind, _ACC.max_error_rate, r.message + "\n")) for col, r in ABSOLUTE),
    (ac.ERROR_BALANCE,
     Rule(ac.ERROR_BALANCE_RATIO, ac.ERROR_BALANCE_STATUS, "not_at_most", None,
          "ERROR: 误差均衡性超过阈值\n")),
)  # fmt: skip

_BINARY = thresholds(Standard.BINARY, DEFAULT)
BINARY = Rule(
    ac.BINARY_ERR_RATE, ac.BINARY_STATUS, "nonzero", _BINARY.max_error_rate,
    "ERROR: 二进制一致错误率超过阈值\n",
)  # fmt: skip
THOUSANDTH = Rule(
    ac.THOUSANDTH, ac.THOUSANDTH_STATUS, "below", thresholds(Standard.THOUSANDTH, DEFAULT).ratio_limit,
    "ERROR: 双千指标不达标\n",
)  # fmt: skip

ULP_MESSAGE = "ERROR: ULP误差不满足标准\n"
_ULP_MEAN = Rule(ac.ULP_MEAN, None, "not_below", _ULP32.mean_limit, ULP_MESSAGE)
_ULP_RATIO = Rule(ac.ULP_PROPORTION_RATIO, None, "not_below", _ULP32.ratio_limit, ULP_MESSAGE)
ULP_MISMATCH = Rule(ac.ULP_PROPORTION_RATIO, None, "not_below", _ULP32.ratio_limit, ULP_MESSAGE)
"""Stands for an inf/nan mismatch of the ULP proportion columns in the report (its value is NaN)."""
ULP_MEAN_MISMATCH = Rule(ac.ULP_MEAN, None, "not_below", _ULP32.mean_limit, ULP_MESSAGE)
"""Stands for an inf/nan mismatch of the mean ULP error columns (an inf/NaN on one side only: the replay
gives such an output an infinite ULP error)."""
ULP_FP32 = EscapeRule(
    (
        _ULP_MEAN,
        Rule(ac.ULP_PROPORTION, None, "not_below", _ULP32.proportion_limit, ULP_MESSAGE, ceiling=1.0),
        _ULP_RATIO,
    ),
    ULP_MESSAGE,
)
"""fp32: pass if the mean, the proportion or the NPU/GPU proportion ratio is below its limit."""
ULP_HALF = EscapeRule(
    (
        Rule(ac.ULP_PROPORTION, None, "not_below", _ULP16.proportion_limit, ULP_MESSAGE, ceiling=1.0),
        _ULP_RATIO,
    ),
    ULP_MESSAGE,
)
"""fp16/bf16: pass if the proportion or the NPU/GPU proportion ratio is below its limit."""
