"""Pure metric functions: numpy arrays in, numbers out (8.1.1 formulas).

Notation (upstream 8.1.1's): ``b`` bench array (fp32 for fp16/bf16 outputs, fp64 for
fp32 outputs), ``d`` device array (bf16 already widened to fp32), ``N = b.size``, ``ae = |d − b|``,
``abs_b_eps = |b| + eps``. Return types follow numpy's: reductions over ``ae``/``rel`` keep the array's
dtype (a numpy float32 for fp16/bf16 outputs, written with ``str()``), counts divided by counts are
Python floats (written ``%.14f``), and "nothing to count" is the int ``0`` — the mix upstream 8.1.1
writes. Exception: RMSE is always float64 (see :func:`rmse`). No function here reads files,
prints or looks at API names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]

BF16_EPS = 2.0**-8  # eps for bf16 outputs
BF16_MAX = 3.3895313892515355e38  # finite range of bf16


def _quiet() -> Any:
    return np.errstate(all="ignore")


def eps_for(bench: Array, device_dtype: str) -> Any:
    """``finfo(b.dtype).eps``, except bf16 device outputs → 2⁻⁸."""
    if device_dtype == "torch.bfloat16":
        return BF16_EPS
    return np.finfo(bench.dtype).eps


def abs_err(bench: Array, device: Array) -> Array:
    with _quiet():
        return np.abs(device - bench)


def rel_err(bench: Array, device: Array, eps: Any) -> Array:
    """Unmasked ``|ae / (|b| + eps)|``."""
    with _quiet():
        return np.abs(abs_err(bench, device) / (np.abs(bench) + eps))


def finite_mask(bench: Array, device: Array) -> Array:
    """``isfinite(d) & isfinite(b.astype(d.dtype))``."""
    with _quiet():
        return np.isfinite(device) & np.isfinite(bench.astype(device.dtype))


# --- legacy chain ---------------------------------------------------------------


def _dot(a: Array, b: Array) -> float:
    """``a . b`` summed in numpy's fixed pairwise order: the same on any number of BLAS threads."""
    return float(np.add.reduce(a * b))


def cosine(bench: Array, device: Array) -> tuple[float | None, bool, str]:
    """Cosine similarity on flattened, max-normalised arrays: (value or None = blank, ok, note).

    Upstream's rule with the 8.1.1 NaN rule (NaN fails). Notes are upstream's sentences; the
    caller (who knows the messages module) maps them; here they are returned as keys.
    """
    b = bench.reshape(-1).astype(np.float64)
    d = device.reshape(-1).astype(np.float64)
    if b.shape != d.shape:
        return -1.0, False, ""
    if d.size == 1:
        return None, True, "scalar"
    tiny = np.finfo(np.float64).eps
    with _quiet():
        m_d = np.max(np.abs(d)) if d.size else 0.0
        m_b = np.max(np.abs(b)) if b.size else 0.0
        if m_d <= tiny and m_b <= tiny:
            return None, True, "both_zero"
        if m_d <= tiny:
            return None, False, "device_zero"
        if m_b <= tiny:
            return None, False, "bench_zero"
        dn, bn = d / m_d, b / m_b
        # numpy's own pairwise sums, not np.dot: BLAS splits a dot product over its threads (as many
        # as the host has cores unless OMP_NUM_THREADS / OPENBLAS_NUM_THREADS say otherwise) and
        # rounds differently with each count, so the cell would depend on the host.
        value = float(_dot(dn, bn) / (np.sqrt(_dot(dn, dn)) * np.sqrt(_dot(bn, bn))))
    if np.isnan(value):
        return value, False, "nan"
    value = float(np.clip(value, -1.0, 1.0))
    return value, value > 0.99, ""


def max_abs_error(bench: Array, device: Array) -> Any:
    """``max(ae)`` as a numpy scalar of ``ae``'s dtype; empty → 0 of that dtype."""
    ae = abs_err(bench, device)
    if ae.size == 0:
        return ae.dtype.type(0)
    return np.max(ae)


def rel_ratio(rel: Array, threshold: float) -> float:
    """``#(rel < t) / N``; NaN positions count as failures; N = 0 → 1."""
    if rel.size == 0:
        return 1.0
    with _quiet():
        return float(np.sum(rel < threshold) / rel.size)


# --- binary ----------------------------------------------------


def binary_error_rate(bench: Array, device: Array, same_nonfinite: Array | None = None) -> float:
    """``#(b ≠ d) / N``; positions in ``same_nonfinite`` (both NaN) count as equal."""
    with _quiet():
        differ = bench != device
    if same_nonfinite is not None:
        differ = differ & ~same_nonfinite
    return float(np.sum(differ) / bench.size)


# --- benchmark ------------------------------------------------------------------------


def small_value_mask(bench: Array, finite: Array, small_value: float) -> Array:
    with _quiet():
        return (np.abs(bench) <= small_value) & finite


def small_value_err_ratio(ae: Array, small: Array, atol: float) -> float | int:
    """``#(small & ae > atol) / #small``; 0 (int) without small values."""
    n_small = int(np.sum(small))
    if n_small == 0:
        return 0
    with _quiet():
        return float(np.sum(small & (ae > atol)) / n_small)


def rmse(ae: Array, masked: Array) -> Any:
    """``√(mean(where(m, 0, ae)²) · (N / (N − #m + 1e-4) + 1e-4))`` with ``m = infnan | small``.

    Always a float64: upstream's numpy-1 promotion turns ``float32 scalar · Python float`` into float64
    (observed: fp32-vs-fp32 conv rows write RMSE ``%.14f`` but max-abs and relative errors ``str()``).
    """
    n = ae.size
    with _quiet():
        mse = float(np.mean(np.square(np.where(masked, ae.dtype.type(0), ae))))
        mse = mse * (n / (n - int(np.sum(masked)) + 0.0001) + 0.0001)
        return np.sqrt(np.float64(mse))


def error_balance(bench: Array, device: Array) -> float:
    """``|#(d − b' > 0) − #(d − b' < 0)| / N`` with ``b' = b.astype(d.dtype)`` (a sign imbalance)."""
    with _quiet():
        diff = device - bench.astype(device.dtype)
        larger = int(np.sum(diff > 0))
        smaller = int(np.sum(diff < 0))
    return abs(larger - smaller) / bench.size


def masked_rel(ae: Array, abs_b_eps: Array, excluded: Array) -> Array:
    """``where(small | infnan, −1, ae / abs_b_eps)``."""
    with _quiet():
        return np.where(excluded, ae.dtype.type(-1), ae / abs_b_eps)


def max_rel_err(rel: Array) -> Any:
    """``max(rel)``; a zero of ``rel``'s dtype when every position is masked (26.x fixture: conv bias
    grad of small values only → ``0.0``)."""
    top = np.max(rel) if rel.size else rel.dtype.type(-1)
    return top if top >= 0 else rel.dtype.type(0)


def mean_rel_err(rel: Array) -> Any:
    """``mean(rel[rel ≥ 0])``; a zero of ``rel``'s dtype when there is none."""
    kept = rel[rel >= 0]
    if kept.size == 0:
        return rel.dtype.type(0)
    return np.mean(kept)


# --- absolute threshold ---------------------------------------------------------------


def inf_nan_err_rate(
    bench: Array, device: Array, abs_b_eps: Array, infnan: Array, rtol: float, finite_max: float
) -> float | int:
    """Share of inf/nan positions that fail: after clipping both to the device dtype's finite range
    a position passes if ``|d − b| / abs_b_eps ≤ rtol`` or both are NaN. 0 (int) without inf/nan.
    """
    n = int(np.sum(infnan))
    if n == 0:
        return 0
    with _quiet():
        b_clip = np.clip(bench.astype(device.dtype), -finite_max, finite_max)
        d_clip = np.clip(device, -finite_max, finite_max)
        ok = (np.abs(d_clip - b_clip) / abs_b_eps <= rtol) | (np.isnan(b_clip) & np.isnan(d_clip))
    return float(np.sum(infnan & ~ok) / n)


def rel_err_rate(rel: Array, normal: Array, rtol: float) -> float | int:
    """``#(normal & rel > rtol) / #normal``; 0 (int) without normal values."""
    n = int(np.sum(normal))
    if n == 0:
        return 0
    with _quiet():
        return float(np.sum(normal & (rel > rtol)) / n)


def abs_err_rate(ae: Array, small: Array, atol: float) -> float | int:
    """``#(small & ae > atol) / #small``; 0 (int) without small values."""
    return small_value_err_ratio(ae, small, atol)


# --- ULP ------------------------------------------------------------------------------


def ulp_errors(bench: Array, device: Array, mantissa_bits: int, min_exp: int) -> Array:
    """Per-element ULP error ``|(d − b) · 2^(−e + mantissa_bits)|``, ``e = max(floor(log2|b|), min_exp)``
    (a zero bench value uses e = 0, upstream's quirk), computed in fp32 for fp16/bf16 outputs and in
    fp64 for fp32 outputs (the bench's dtype). ``ldexp`` keeps the scaling exact.
    """
    with _quiet():
        abs_b = np.abs(bench)
        e = np.where(abs_b == 0, 0, np.floor(np.log2(abs_b)))
        e = np.maximum(e, min_exp)
        e = np.where(np.isfinite(e), e, 0)
        diff = device.astype(bench.dtype) - bench
        return np.abs(np.ldexp(diff, (mantissa_bits - e).astype(np.int32)))


def ulp_max(ulp: Array) -> Any:
    return np.max(ulp)


def ulp_mean(ulp: Array) -> Any:
    return np.mean(ulp)


def ulp_proportion(ulp: Array, element_threshold: float) -> float:
    with _quiet():
        return float(np.sum(ulp > element_threshold) / ulp.size)


# --- noise floor (ours, docs/standards.md "Deviations from 8.1.1") --------------------------------


def noise_floor_verdict(
    bench: Array, device: Array, floor: Array, near_zero: float
) -> tuple[float, float, float] | None:
    """``(max|b|, max(floor), max|d - b|)`` when ``b`` is near zero: every value finite and
    ``max|b| <= near_zero * max(floor)``; None otherwise (the output is not at its noise floor)."""
    with _quiet():
        b = bench.astype(np.float64)
        d = device.astype(np.float64)
        f = np.abs(floor.astype(np.float64))
        if not (np.isfinite(b).all() and np.isfinite(d).all() and np.isfinite(f).all()):
            return None
        bench_max, floor_max = float(np.max(np.abs(b))), float(np.max(f))
        if bench_max > near_zero * floor_max:
            return None
        return bench_max, floor_max, float(np.max(np.abs(d - b)))


# --- dropout --------------------------------------------------------------------------


def dropout_zero_fraction_gap(bench: Array, device: Array) -> float:
    """``|#zeros(b) − #zeros(d)| / numel``."""
    return abs(int(np.sum(bench == 0)) - int(np.sum(device == 0))) / bench.size
