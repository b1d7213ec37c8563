"""One output tensor → one :class:`DetailsRow`.

Order of checks (each short-circuits): shape, dtype class, empty (a SKIP row), integer/bool (binary
error rate), float: the routed standard's columns (fp16/bf16/fp32 only), then run_ut's legacy status chain
(cosine → max abs error → ratio steps), which alone decides the row's Status in 8.1.1; an ``error`` or
``Warning`` of a device output that is the bench correctly rounded to its dtype passes (ours).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from msprobe.run_ut.standards import messages as msg
from msprobe.run_ut.standards import metrics as m
from msprobe.run_ut.standards import rows
from msprobe.run_ut.standards.columns import STANDARD_COLUMNS, Pair
from msprobe.run_ut.standards.routing import Scoring
from msprobe.run_ut.standards.thresholds import NOISE_FLOOR, legacy

NEW_STANDARD_DTYPES = ("torch.float16", "torch.bfloat16", "torch.float32")  # 8.1.1's new standards

# numpy dtype classes that may be compared with each other (int8 is not in them)
_FLOAT = frozenset({"float16", "float32", "float64"})
_BOOL = frozenset({"bool", "uint8"})
_INT = frozenset({"int32", "int64"})

_COSINE_NOTES = {
    "": "",
    "scalar": msg.COSINE_SCALAR,
    "both_zero": msg.COSINE_BOTH_ZERO,
    "device_zero": msg.COSINE_DEVICE_ZERO,
    "bench_zero": msg.COSINE_BENCH_ZERO,
    "nan": msg.COSINE_NAN,
    "all_same_nonfinite": msg.COSINE_ALL_SAME_NONFINITE,
}

# ratio threshold t → (column, sentence when it fails as error, as warning, sentence when it passes)
_RATIO_COLUMN = {0.01: rows.HUNDREDTH, 0.001: rows.THOUSANDTH, 0.0001: rows.TEN_THOUSANDTH}
_RATIO_ERROR = {0.01: msg.REL_GREATER_HUNDREDTH_ERROR, 0.001: msg.REL_GREATER_THOUSANDTH_ERROR}
_RATIO_WARNING = {0.001: msg.REL_GREATER_THOUSANDTH_WARNING, 0.0001: msg.REL_GREATER_TEN_THOUSANDTH_WARNING}
_RATIO_PASS = {0.001: msg.REL_LESS_THOUSANDTH_PASS, 0.0001: msg.REL_LESS_TEN_THOUSANDTH_PASS}
_RATIO_NAME = {0.01: "hundredth ratio (双百指标)", 0.001: "thousandth ratio (双千指标)",
               0.0001: "ten-thousandth ratio (双万指标)"}  # fmt: skip


def _class(dtype_name: str) -> frozenset[str] | None:
    for cls in (_FLOAT, _BOOL, _INT):
        if dtype_name in cls:
            return cls
    return None


def _to_numpy(t: Any) -> m.Array | None:
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    try:
        return t.resolve_conj().resolve_neg().numpy()
    except (TypeError, RuntimeError):
        return None  # dtypes numpy lacks (fp8, ...): reported as "cannot compare"


def _torch_dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def compare_tensor(row_name: str, bench: Any, device: Any, scoring: Scoring) -> rows.DetailsRow:
    """Compare one bench tensor (CPU, upcast) with one device tensor (CPU, own dtype). Complex
    tensors are compared as their real and imaginary parts, by the standard of the parts' dtype
    (8.1.1: "cannot compare"); the row names the complex dtypes and shape."""
    if bench.is_complex() and device.is_complex() and bench.shape == device.shape:
        import torch

        parts = compare_tensor(
            row_name,
            torch.view_as_real(bench.detach().cpu().resolve_conj()),
            torch.view_as_real(device.detach().cpu().resolve_conj()),
            scoring,
        )
        shape = str(tuple(device.shape))
        return replace(parts, bench_dtype=str(bench.dtype), device_dtype=str(device.dtype), shape=shape)
    base: dict[str, Any] = {
        "name": row_name,
        "bench_dtype": str(bench.dtype),
        "device_dtype": str(device.dtype),
        "shape": str(tuple(device.shape)),
    }

    def fail(message: str) -> rows.DetailsRow:
        return rows.DetailsRow(status=rows.ERROR, message=message, reason=f"{row_name}: {message}", **base)

    b = _to_numpy(bench)
    d = _to_numpy(device)
    if b is not None and d is not None and b.shape != d.shape:
        return fail(msg.shape_not_equal(b.shape, d.shape))
    b_cls = _class(b.dtype.name) if b is not None else None
    if b is None or d is None or b_cls is None or b_cls is not _class(d.dtype.name):
        b_name = b.dtype.name if b is not None else _torch_dtype_name(bench)
        d_name = d.dtype.name if d is not None else _torch_dtype_name(device)
        return fail(msg.cannot_compare(b_name, d_name))
    if b.size == 0:  # two empty outputs of one shape: equal, nothing to score (8.1.1: an error)
        return rows.DetailsRow(status=rows.SKIP, message=msg.EMPTY_OUTPUT, **base)
    if b_cls is not _FLOAT:
        rate = m.binary_error_rate(b, d)
        status = rows.PASS if rate == 0 else rows.ERROR
        reason = "" if rate == 0 else f"{row_name}: binary error rate (二进制一致错误率) {rate:.6g} != 0"
        return rows.DetailsRow(
            status=status,
            message=msg.only_error_rate(b.dtype.name),
            reason=reason,
            metrics={rows.BINARY_ERR_RATE: rate},
            **base,
        )
    row = _compare_float(row_name, b, d, base, scoring)
    if row.status in (rows.ERROR, rows.WARNING) and correctly_rounded(bench, device):
        return replace(row, status=rows.PASS, message=msg.correctly_rounded(base["device_dtype"]), reason="")
    return row


def correctly_rounded(bench: Any, device: Any) -> bool:
    """The device output of a narrower float dtype than the bench's is, element by element, the bench
    rounded to that dtype (NaN where NaN): the best answer the dtype holds, whatever the chain's
    relative metrics make of values below its normal range (ours). A bench value that overflows the
    dtype where the device holds its inf is not excused: that stays the error it is (deviation 1)."""
    if not (bench.is_floating_point() and device.is_floating_point()):
        return False
    if device.dtype.itemsize >= bench.dtype.itemsize or bench.shape != device.shape:
        return False
    b, d = bench.detach().cpu(), device.detach().cpu()
    rounded = b.to(d.dtype)
    if bool((rounded.isinf() & b.isfinite()).any()):
        return False
    return bool(((rounded == d) | (rounded.isnan() & d.isnan())).all())


def _nonfinite_masks(b: m.Array, d: m.Array) -> tuple[m.Array, m.Array]:
    with np.errstate(all="ignore"):
        b_bad = ~np.isfinite(b)
        d_bad = ~np.isfinite(d)
        same = b_bad & d_bad & ((np.isnan(b) & np.isnan(d)) | (b == d))
    return same, (b_bad | d_bad) & ~same


def _compare_float(
    row_name: str, b: m.Array, d: m.Array, base: dict[str, Any], scoring: Scoring
) -> rows.DetailsRow:
    device_dtype = base["device_dtype"]
    same, mismatch = _nonfinite_masks(b, d)
    pair = Pair(b, d, device_dtype, same, mismatch, scoring.tolerances)
    cols: dict[str, Any] = {}
    prefix = ""
    if device_dtype in NEW_STANDARD_DTYPES:
        cols.update(STANDARD_COLUMNS[scoring.standard](pair))
    else:
        # concatenated as is, the cosine note and "\n" follow
        prefix = msg.dtype_not_new_standard(device_dtype)

    # Same-placement inf/nan positions agree by definition (ours): leave them out of cosine/max-abs.
    kb, kd = (b[~same], d[~same]) if same.any() else (b, d)
    cos: float | None
    if mismatch.any():
        # a different inf/nan placement: cosine NaN -> error, also where 8.1.1's scalar / all-zero rules
        # would leave the cell blank (its status is error there too), so that msprobe compare's
        # "inf/nan on the NPU only" rule, which reads this cell, sees every such row
        cos, cos_ok, note = float("nan"), False, "nan"
    elif b.size == 1:
        cos, cos_ok, note = m.cosine(b, d)
    elif kb.size == 0:
        cos, cos_ok, note = None, True, "all_same_nonfinite"
    else:
        cos, cos_ok, note = m.cosine(kb, kd)
    cols[rows.COSINE] = cos
    head = prefix + _COSINE_NOTES[note] + "\n"

    def row(status: str, sentence: str, reason: str = "") -> rows.DetailsRow:
        return rows.DetailsRow(status=status, message=head + sentence, reason=reason, metrics=cols, **base)

    if not cos_ok:
        what = _COSINE_NOTES[note] or "not > 0.99"
        reason = f"{row_name}: cosine similarity {_fmt(cos)} ({what})"
        if mismatch.any():
            reason += _nonfinite_detail(b, d, mismatch)
        return row(rows.ERROR, msg.COSINE_ERROR, reason)
    mae = m.max_abs_error(kb, kd)
    cols[rows.MAX_ABS_ERR] = mae
    if mae < 0.001:
        return row(rows.PASS, msg.MAX_ABS_PASS)
    steps = legacy(device_dtype)
    if steps is None:
        return row(rows.PASS, "")
    ratio = m.rel_ratio(pair.rel, steps.error_t)
    cols[_RATIO_COLUMN[steps.error_t]] = ratio
    if not ratio > 1 - steps.error_t:
        return row(
            rows.ERROR, _RATIO_ERROR[steps.error_t], _ratio_reason(row_name, mae, steps.error_t, ratio)
        )
    ratio = m.rel_ratio(pair.rel, steps.warning_t)
    cols[_RATIO_COLUMN[steps.warning_t]] = ratio
    if not ratio > 1 - steps.warning_t:
        reason = _ratio_reason(row_name, mae, steps.warning_t, ratio)
        return row(rows.WARNING, _RATIO_WARNING[steps.warning_t], reason)
    return row(rows.PASS, _RATIO_PASS[steps.warning_t])


def _nonfinite_detail(b: m.Array, d: m.Array, mismatch: m.Array) -> str:
    flat = np.flatnonzero(mismatch.reshape(-1))
    i = int(flat[0])
    return (
        f"; {flat.size} element(s) inf/nan on one side only, first at flat index {i}: "
        f"bench {float(b.reshape(-1)[i])} vs device {float(d.reshape(-1)[i])}"
    )


def _fmt(value: Any) -> str:
    return "blank" if value is None else f"{float(value):.6g}"


def _ratio_reason(row_name: str, mae: Any, t: float, ratio: float) -> str:
    return (
        f"{row_name}: max abs error {_fmt(mae)} >= 0.001 and {_RATIO_NAME[t]} {ratio:.6g} "
        f"<= {1 - t:g} (share of elements with relative error < {t:g})"
    )


def overflows_alone(bench: Any, device: Any) -> bool:
    """Some element of a float output is inf or NaN on the device and finite in the benchmark, and at
    every such element the benchmark's value lies beyond the device dtype's finite range."""
    if not all(hasattr(x, "detach") for x in (bench, device)):
        return False
    b, d = _to_numpy(bench), _to_numpy(device)
    if b is None or d is None or b.shape != d.shape:
        return False
    if _class(b.dtype.name) is not _FLOAT or _class(d.dtype.name) is not _FLOAT:
        return False
    alone = ~np.isfinite(d) & np.isfinite(b)
    if not alone.any():
        return False
    # only a true result that rounds to inf in the device's dtype excuses the device's inf/NaN; where
    # the benchmark's value is representable, the kernel overflowed (or failed) on its own
    import torch

    return bool(torch.from_numpy(b[alone].astype(np.float64)).to(device.dtype).isinf().all())


def at_noise_floor(row: rows.DetailsRow, bench: Any, device: Any, floor: Any) -> rows.DetailsRow:
    """Re-judge an ``error`` row of a near-zero output by its noise floor (ours, see NoiseFloor).

    ``floor``: ``|bench' - bench|`` for a benchmark ``bench'`` run on inputs perturbed by one ulp
    (the largest over the draws), same shape as ``bench``. A row that is not an error, an output
    with inf/NaN or a bench larger than ``near_zero`` floors keeps its verdict; otherwise it passes
    iff ``max |d - b| <= atol * max(floor)``, and still fails (with the floor in its reason) if not.
    """
    if row.status != rows.ERROR or not all(hasattr(x, "detach") for x in (bench, device, floor)):
        return row
    b, d, f = _to_numpy(bench), _to_numpy(device), _to_numpy(floor)
    if b is None or d is None or f is None or not (b.shape == d.shape == f.shape) or b.size == 0:
        return row
    if _class(b.dtype.name) is not _FLOAT or _class(d.dtype.name) is not _FLOAT:
        return row
    verdict = m.noise_floor_verdict(b, d, f, NOISE_FLOOR.near_zero)
    if verdict is None:
        return row
    bench_max, floor_max, error = verdict
    if error <= NOISE_FLOOR.atol * floor_max:
        message = msg.noise_floor_pass(bench_max, floor_max, error, NOISE_FLOOR.atol)
        return replace(row, status=rows.PASS, message=message, reason="")
    extra = (
        f"; bench at its noise floor {floor_max:.3g} but max abs error {error:.3g} "
        f"> {NOISE_FLOOR.atol:g} floors"
    )
    return replace(row, reason=row.reason + extra)
