"""The one (standard, dtype) → thresholds table, with upstream 8.1.1's numbers.

Both stages read it: the replay's columns (small-value bounds, tolerances, ULP parameters) and the
compare's verdict limits (``msprobe.compare.rules``: ratio limits, rates that must be 0, the ULP
escapes, the error-balance bound; ``msprobe.compare.standards``: the per-dtype ratio floor). The
numbers are upstream's ``StandardConfig`` and api_precision_compare limits (no operator levels in
8.1.1) plus run_ut's legacy status chain. Dtype keys are torch dtype strings (``"torch.float16"``);
an unknown dtype uses the ``"default"`` entry. An API table entry may change the fields of its own
standard per dtype (``ApiInfo.tolerances``). Changing a number here changes a test in
``tests/run_ut/test_standards_thresholds.py`` that names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from msprobe.run_ut.api_info import Standard

FP16 = "torch.float16"
BF16 = "torch.bfloat16"
FP32 = "torch.float32"
DEFAULT = "default"


@dataclass(frozen=True)
class Benchmark:
    """Benchmark standard thresholds; 8.1.1's ratio limits (error if NPU/GPU ratio > limit)."""

    small_value: float
    small_value_atol: float
    min_err: float  # floor of the GPU value in api_precision_compare ratios
    small_value_ratio_limit: float = 2.0
    rmse_ratio_limit: float = 2.0
    max_rel_ratio_limit: float = 10.0
    mean_rel_ratio_limit: float = 2.0
    eb_ratio_limit: float = 2.0  # reported, never counted


@dataclass(frozen=True)
class AbsoluteThreshold:
    """Absolute-threshold bounds; the compare verdict wants each rate exactly 0."""

    small_value: float
    small_value_atol: float
    rtol: float
    max_error_rate: float = 0.0  # compare: each of the three rates must not exceed this (0: none)


@dataclass(frozen=True)
class Ulp:
    """ULP thresholds; 8.1.1's verdict limits (``mean_limit`` only for fp32)."""

    mantissa_bits: int
    min_exp: int
    element_threshold: float  # an element "fails" when its ULP error is > this
    proportion_limit: float
    ratio_limit: float = 1.0
    mean_limit: float | None = None
    min_err: float = 2.0**-14


@dataclass(frozen=True)
class Thousandth:
    """双千 = #(rel < 0.001)/N, pass iff ≥ 0.999 (docs say > 0.999; code ≥)."""

    rel_threshold: float = 0.001
    ratio_limit: float = 0.999


@dataclass(frozen=True)
class Binary:
    """Binary standard: pass iff the error rate is 0."""

    max_error_rate: float = 0.0


@dataclass(frozen=True)
class Accumulative:
    """Accumulative standard: absolute-threshold rates with rtol = atol = bound and small value 1, plus EB."""

    bound: float
    eb_threshold: float  # compare: the NPU error balance must be at most this
    small_value: float = 1.0
    max_error_rate: float = 0.0  # compare: each of the three rates must not exceed this (0: none)


@dataclass(frozen=True)
class Legacy:
    """run_ut's status chain: cosine > 0.99, max-abs < 0.001, then two ratio steps.

    ``error_t``/``warning_t``: the ratio ``#(rel < t)/N`` must exceed ``1 − t``; fp16/bf16 use
    双百 (error) and 双千 (warning), fp32/fp64 双千 (error) and 双万 (warning).
    """

    error_t: float
    warning_t: float
    cosine_limit: float = 0.99
    max_abs_limit: float = 0.001


COMPARE_LIMITS = frozenset(
    {
        "small_value_ratio_limit",
        "rmse_ratio_limit",
        "max_rel_ratio_limit",
        "mean_rel_ratio_limit",
        "eb_ratio_limit",
        "min_err",
        "max_error_rate",
        "proportion_limit",
        "ratio_limit",
        "mean_limit",
        "eb_threshold",
    }
)
"""Fields only ``msprobe compare`` reads: one value per (standard, dtype) for every API, so no API's
``tolerances`` may change them (the compare stage reads no per-API table entry)."""


@dataclass(frozen=True)
class NoiseFloor:
    """Ours (docs/standards.md "Deviations from 8.1.1"): an output whose benchmark is no larger than
    ``near_zero`` times its noise floor (how much the bench moves when every input is perturbed by
    one ulp of its dtype, the largest of ``draws`` random-sign perturbations) is judged by
    ``max |d - b| <= atol * floor`` instead of the chain that failed it."""

    near_zero: float = 16.0
    atol: float = 8.0
    draws: int = 2
    max_ulps: float = 1024.0  # a larger floor (in ulps of the largest input) is a jump: no floor


NOISE_FLOOR = NoiseFloor()

THRESHOLDS: MappingProxyType[tuple[Standard | str, str], Any] = MappingProxyType(
    {
        (Standard.BENCHMARK, FP16): Benchmark(2.0**-10, 1e-16, 2.0**-11),
        (Standard.BENCHMARK, BF16): Benchmark(2.0**-10, 1e-16, 2.0**-8),
        (Standard.BENCHMARK, FP32): Benchmark(2.0**-20, 2.0**-30, 2.0**-14),
        (Standard.BENCHMARK, DEFAULT): Benchmark(2.0**-20, 2.0**-30, 2.0**-14),
        (Standard.ABSOLUTE_THRESHOLD, FP16): AbsoluteThreshold(2.0**-10, 2.0**-16, 2.0**-10),
        (Standard.ABSOLUTE_THRESHOLD, BF16): AbsoluteThreshold(2.0**-10, 1e-16, 2.0**-8),
        (Standard.ABSOLUTE_THRESHOLD, FP32): AbsoluteThreshold(2.0**-20, 2.0**-30, 2.0**-20),
        (Standard.ABSOLUTE_THRESHOLD, DEFAULT): AbsoluteThreshold(2.0**-20, 2.0**-30, 2.0**-20),
        (Standard.ULP, FP16): Ulp(10, -14, 1.0, 0.001, min_err=2.0**-11),
        (Standard.ULP, BF16): Ulp(7, -126, 1.0, 0.001, min_err=2.0**-8),
        (Standard.ULP, FP32): Ulp(23, -126, 32.0, 0.05, mean_limit=64.0, min_err=2.0**-14),
        (Standard.ULP, DEFAULT): Ulp(23, -126, 32.0, 0.05, mean_limit=64.0, min_err=2.0**-14),
        (Standard.THOUSANDTH, DEFAULT): Thousandth(),
        (Standard.BINARY, DEFAULT): Binary(),
        (Standard.ACCUMULATIVE, FP16): Accumulative(2.0**-8, 2.0**-20),
        (Standard.ACCUMULATIVE, BF16): Accumulative(2.0**-7, 2.0**-7),
        (Standard.ACCUMULATIVE, FP32): Accumulative(2.0**-11, 2.0**-14),
        (Standard.ACCUMULATIVE, DEFAULT): Accumulative(2.0**-11, 2.0**-14),
        ("legacy", FP16): Legacy(error_t=0.01, warning_t=0.001),
        ("legacy", BF16): Legacy(error_t=0.01, warning_t=0.001),
        ("legacy", FP32): Legacy(error_t=0.001, warning_t=0.0001),
        ("legacy", "torch.float64"): Legacy(error_t=0.001, warning_t=0.0001),
    }
)


def thresholds(
    standard: Standard | str, dtype: str, tolerances: Mapping[str, Mapping[str, float]] | None = None
) -> Any:
    """Entry for ``(standard, dtype)``, falling back to the standard's ``"default"`` entry.

    ``standard`` is a :class:`Standard` or ``"legacy"`` (run_ut's chain; no default: other float
    dtypes skip the ratio steps and pass). ``tolerances``: an API's changes (``ApiInfo.tolerances``),
    dtype (or ``"default"``) -> field -> value; a field the entry does not have, or one of
    :data:`COMPARE_LIMITS`, is a ``ValueError``.
    """
    found = THRESHOLDS.get((standard, dtype))
    if found is None:
        found = THRESHOLDS.get((standard, DEFAULT))
    if found is None:
        raise KeyError(f"no thresholds for {standard!r} and {dtype}")
    changes = (tolerances or {}).get(dtype, (tolerances or {}).get(DEFAULT))
    if changes:
        if COMPARE_LIMITS & set(changes):
            limits = sorted(COMPARE_LIMITS & set(changes))
            raise ValueError(f"tolerances for {standard} {dtype}: {limits} are compare limits, not per API")
        try:
            found = dataclasses.replace(found, **changes)
        except TypeError:
            fields = sorted(f.name for f in dataclasses.fields(found))
            raise ValueError(
                f"tolerances {dict(changes)} for {standard} {dtype}: fields are {fields}"
            ) from None
    return found


def legacy(dtype: str) -> Legacy | None:
    """The chain's ratio steps for a device dtype, or None (other float dtypes pass)."""
    return THRESHOLDS.get(("legacy", dtype))
