"""Details-row verdicts of 8.1.1's api_precision_compare, computed for the whole table at once.

Input: the merged frame of :func:`msprobe.compare.merge.merge`. Output: one row per merged row with the
28 columns of ``api_precision_compare_details`` as text, plus analysis columns for the result rows and
the report (``kind``, ``standard``, ``severity``, ...). The logic is upstream 8.1.1's
(routing, then one rule per standard); each standard is a function over the rows it judges, reading its
numbers from :mod:`msprobe.compare.rules` and :mod:`msprobe.compare.standards`. No row loop.

Row kinds: ``invalid`` (name not ``Type[.prefix].api.N.dir.output.k``), ``missing`` (one side only),
``mismatch`` (paired, but the shapes differ: not comparable, status ``mismatch``, not judged),
``exception`` (a cell the standard needs is blank or not a number: upstream's SKIP row carrying the
error text), ``evaluated`` (SKIP rows included).

Length (a little over 500 lines): one function per standard over whole columns, in one place so the rules
can be read side by side. Which routing a replay's file was scored with is :mod:`.routing`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprobe.compare import rules as R
from msprobe.compare.cells import (
    EMPTY,
    ERROR_TEXT,
    OK,
    as_read,
    first_error,
    format_floats,
    is_na,
    parse,
    text_frame,
    text_test,
)
from msprobe.compare.merge import BOTH, GPU_ONLY, shapes_differ, stated_texts_differ
from msprobe.compare.standards import (
    FLOAT_DTYPES,
    UNSUPPORTED_DTYPES,
    Standard,
    empty_shapes,
    per_row,
    route,
    scored_standards,
)
from msprobe.formats.accuracy_csv import (
    API_NAME,
    BINARY_ERR_RATE,
    BLANK,
    COMPARE_ALGORITHM,
    COMPARE_DETAILS_HEADER,
    COMPARE_RESULT,
    DEVICE_DTYPE,
    MESSAGE,
    SHAPE,
    STATUS,
    THOUSANDTH,
    ULP_MEAN,
    ULP_PROPORTION,
    ULP_PROPORTION_RATIO,
    ULP_STATUS,
)
from msprobe.formats.record_names import output_rows_columns

PASS, ERROR, SKIP, MISSING, MISMATCH = "pass", "error", "SKIP", "missing", "mismatch"
DTYPE_ERROR = "'float' object has no attribute 'isspace'"
"""upstream's text for a row whose DEVICE Dtype cell is empty."""


@dataclass(frozen=True)
class _View:
    """The rows one standard judges (positions in the merged frame): parsed NPU/GPU cells on demand."""

    merged: pd.DataFrame
    rows: np.ndarray
    dtype: np.ndarray
    npu_numeric: frozenset[str]
    npu_alone: bool = False  # judge NPU-only metrics on the NPU value alone, exactly as 8.1.1

    def _cells(self, column: str) -> pd.Series:
        """Only the column read is taken (not every column of the rows)."""
        return pd.Series(self.merged[column].to_numpy(dtype=object)[self.rows], dtype=object, copy=False)

    def npu(self, col: str) -> tuple[np.ndarray, np.ndarray]:
        return parse(self._cells(f"npu:{col}"))

    def gpu(self, col: str) -> tuple[np.ndarray, np.ndarray]:
        return parse(self._cells(f"gpu:{col}"))

    def npu_as_read(self, col: str) -> np.ndarray:
        return as_read(self._cells(f"npu:{col}"), col in self.npu_numeric)


@dataclass
class _Judged:
    cells: dict[str, np.ndarray]  # output column → text
    failed: np.ndarray  # bool
    message: np.ndarray  # object (str)
    codes: list[np.ndarray]  # parse error codes, in upstream's evaluation order
    severity: np.ndarray  # float, > 1 where a counted rule failed (NaN where none failed)
    worst: np.ndarray  # str: the failing rule furthest past its bound, against that bound ("" if none)
    skipped: np.ndarray | None = None  # bool: rows not judged (SKIP, their reason in ``message``)


def _per_dtype(dtypes: np.ndarray, field: str) -> np.ndarray:
    """``standards.per_row``, looked up once per distinct dtype."""
    codes, uniques = pd.factorize(dtypes)
    return per_row(np.asarray(uniques, dtype=object), field)[codes] if len(dtypes) else np.zeros(0)


def _strings(n: int, text: str = "") -> np.ndarray:
    out = np.empty(n, dtype=object)
    out.fill(text)  # quicker than np.full for object arrays
    return out


def _verdict_text(failed: np.ndarray) -> np.ndarray:
    return np.where(failed, ERROR, PASS).astype(object)


def _inf_nan_ratio(
    x: np.ndarray, y: np.ndarray, floor: np.ndarray, column: str, npu_alone: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """8.1.1's NPU/GPU ratio ``|x| / max(|y|, floor)`` with its inf/nan rule.

    Returns (ratio, consistent, note): an inf/nan on either side gives ratio NaN, consistent only when
    both are NaN or both inf of one sign, and a note naming the input column. Unless ``npu_alone``
    (8.1.1), an inf/nan on the GPU only, a number on the NPU, is consistent too: the failure is the
    GPU's, and the NPU's value is judged by the rules that read it alone.
    """
    special = ~np.isfinite(x) | ~np.isfinite(y)
    same = (np.isinf(x) & np.isinf(y) & (np.sign(x) == np.sign(y))) | (np.isnan(x) & np.isnan(y))
    gpu_only = np.zeros(len(x), dtype=bool) if npu_alone else np.isfinite(x) & ~np.isfinite(y)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.abs(x) / np.maximum(np.abs(y), floor)
    ratio = np.where(special, np.nan, ratio)
    note = _strings(len(x))
    note[special & same] = f"{column}同为同号inf或nan\n"
    note[special & ~same & ~gpu_only] = f"{column}inf或nan不一致\n"
    note[gpu_only] = f"NOTE: {column} inf/nan on the GPU only, a number on the NPU: not counted against it\n"
    return ratio, ~special | same | gpu_only, note


def _excused(
    v: _View,
    rule: R.Rule,
    over: np.ndarray,
    x: np.ndarray,
    column: str,
    bound: np.ndarray | float | None = None,
) -> np.ndarray:
    """Rows ``over`` the bound of an NPU-only metric whose GPU value is at least as far past it.

    The rule that makes compare(X, X) clean: a metric judged on the NPU value alone (absolute threshold,
    binary, thousandth, accumulative, the ULP escapes) does not fail a row whose GPU row is no better on
    that metric, because compare judges the NPU against the GPU. The GPU cell must be a number, finite
    where the NPU's is (or NaN where the NPU's is NaN too); otherwise the NPU value is judged alone,
    as upstream 8.1.1 always does (``npu_alone``).
    """
    if v.npu_alone:
        return np.zeros(len(x), dtype=bool)
    y, y_code = v.gpu(column)
    x_nan, y_nan = np.isnan(x), np.isnan(y)
    with np.errstate(invalid="ignore", over="ignore"):
        farther = rule.severity(y, bound) >= rule.severity(x, bound)
    # an inf on the GPU where the NPU has a number (a mean ULP error made infinite by an inf/NaN in the
    # GPU's output) is the GPU's failure, not a precision loss as large: it excuses nothing
    gpu_inf_alone = np.isinf(y) & np.isfinite(x)
    # an inf/NaN in the NPU's output where the GPU's has none (replay cosine NaN on the NPU only) is no
    # precision loss the GPU shares, however saturated the metric is on both (binary rate 1, 双千 0)
    npu_only = _npu_only_nonfinite(v)
    return over & (y_code == OK) & (x_nan == y_nan) & (farther | x_nan) & ~gpu_inf_alone & ~npu_only


def _excuse_note(rule: R.Rule, excused: np.ndarray) -> np.ndarray:
    return np.where(
        excused, f"NOTE: {rule.value} past its bound on the GPU too, NPU no worse: pass\n", ""
    ).astype(object)


class _Worst:
    """Per row, the failing rule with the largest severity (``nearest``: the smallest, for escapes)."""

    def __init__(self, n: int, nearest: bool = False) -> None:
        self.severity = np.full(n, np.nan)
        self.rule = np.full(n, None, dtype=object)
        self.value = np.full(n, np.nan)
        self.bound = np.full(n, np.nan)
        self.nearest = nearest

    def add(
        self,
        rule: R.Rule,
        failed: np.ndarray,
        severity: np.ndarray,
        value: np.ndarray,
        bound: np.ndarray | float | None = None,
    ) -> None:
        with np.errstate(invalid="ignore"):
            beaten = (severity >= self.severity) if self.nearest else (severity <= self.severity)
        take = failed & ~beaten  # a NaN current value is always replaced
        self.severity = np.where(take, severity, self.severity)
        self.value = np.where(take, value, self.value)
        self.bound = np.where(
            take, np.nan if bound is None else np.asarray(bound, dtype=np.float64), self.bound
        )
        self.rule[take] = rule

    def texts(self) -> np.ndarray:
        out = _strings(len(self.rule))
        for i in np.flatnonzero(self.rule != None):  # noqa: E711 - elementwise on an object array
            b = None if np.isnan(self.bound[i]) else float(self.bound[i])
            out[i] = self.rule[i].describe(float(self.value[i]), b)
        return out


def _judge_benchmark(v: _View) -> _Judged:
    n = len(v.dtype)
    floor = _per_dtype(v.dtype, "min_error")
    parsed = [(v.npu(col), v.gpu(col)) for col, _ in R.BENCHMARK]
    cells: dict[str, np.ndarray] = {}
    notes, errors = _strings(n), _strings(n)
    failed = np.zeros(n, dtype=bool)
    worst = _Worst(n)
    for (col, rule), ((x, _), (y, _)) in zip(R.BENCHMARK, parsed):
        # a metric inf/nan on the GPU only (RMSE squared past float32 in the GPU's replay, a finite
        # cosine): the NPU's number is no worse, and is not failed for the GPU's overflow
        ratio, consistent, note = _inf_nan_ratio(x, y, floor, col, v.npu_alone)
        bad = ~consistent | rule.fails(ratio)
        cells[rule.value] = format_floats(ratio)
        assert rule.status is not None
        cells[rule.status] = _verdict_text(bad)
        notes = notes + note
        if rule.counted:
            failed |= bad
            errors = errors + np.where(bad, rule.message, "").astype(object)
            worst.add(rule, bad, np.where(consistent, rule.severity(ratio), np.inf), ratio)
    skipped = None
    if not v.npu_alone:
        npu_only = _npu_only_nonfinite(v)
        failed |= npu_only
        errors = errors + np.where(npu_only, R.NPU_ONLY_NONFINITE.message, "").astype(object)
        worst.add(R.NPU_ONLY_NONFINITE, npu_only, np.full(n, np.inf), np.full(n, np.nan))
        skipped = _gpu_only_nonfinite(v)
        failed &= ~skipped
        errors = np.where(skipped, GPU_ONLY_NONFINITE, errors).astype(object)
    codes = [c for (_, xc), (_, yc) in parsed for c in (xc, yc)]
    return _Judged(cells, failed, notes + errors, codes, worst.severity, worst.texts(), skipped)


GPU_ONLY_NONFINITE = (
    "NOTE: inf/nan on the GPU only (余弦相似度 nan on the GPU, a number on the NPU): the GPU is no baseline "
    "for the NPU/GPU error ratios of this output, which are not judged (the NPU row's own replay "
    "verdict against the bench is no error)\n"
)
"""Ours, not 8.1.1's: the benchmark metrics leave inf/NaN positions out, so a GPU that overflowed where
the NPU did not is measured on fewer elements, and the NPU, erring most where the values are largest,
failed ratios such as RMSE 250x against it."""


def _gpu_only_nonfinite(v: _View) -> np.ndarray:
    """Rows whose replay cosine is NaN on the GPU (an inf/NaN placement the bench does not have) and a
    number on the NPU, whose own replay verdict against the bench is no error: the mirror of
    :func:`_npu_only_nonfinite`. An NPU row its replay calls an error is judged by the ratios, as 8.1.1."""
    (cx, cx_code), (cy, cy_code) = v.npu(R.NPU_ONLY_NONFINITE.value), v.gpu(R.NPU_ONLY_NONFINITE.value)
    npu_no_error = v.npu_as_read(STATUS).astype(str) != ERROR
    gpu_only = np.isnan(cy) & (cy_code == OK) & np.isfinite(cx) & (cx_code == OK)
    return gpu_only & npu_no_error  # type: ignore[no-any-return]


def _npu_only_nonfinite(v: _View) -> np.ndarray:
    """Rows whose replay cosine is NaN on the NPU (an inf/NaN placement the bench does not have) and a
    number or a blank on the GPU (scalar / all-zero / inf-nan where the bench has them)."""
    (cx, cx_code), (cy, cy_code) = v.npu(R.NPU_ONLY_NONFINITE.value), v.gpu(R.NPU_ONLY_NONFINITE.value)
    gpu_not_nan = (np.isfinite(cy) & (cy_code == OK)) | (cy_code == EMPTY)
    return np.isnan(cx) & (cx_code == OK) & gpu_not_nan  # type: ignore[no-any-return]


def _judge_rates(v: _View, table: tuple[tuple[str, R.Rule], ...], joiner: str) -> _Judged:
    """Absolute threshold (joiner "") and accumulative (joiner "\\n"): NPU values only."""
    n = len(v.dtype)
    bound = _per_dtype(v.dtype, "accumulative_eb")
    parsed = [v.npu(col) for col, _ in table]
    cells: dict[str, np.ndarray] = {}
    failed = np.zeros(n, dtype=bool)
    worst = _Worst(n)
    parts: list[np.ndarray] = []
    notes = _strings(n)
    for (col, rule), (x, _) in zip(table, parsed):
        b = bound if rule.bound is None else rule.bound
        over = rule.fails(x, b)
        excused = _excused(v, rule, over, x, col, b)
        bad = over & ~excused
        cells[rule.value] = format_floats(x)
        assert rule.status is not None
        cells[rule.status] = _verdict_text(bad)
        failed |= bad
        parts.append(np.where(bad, rule.message, "").astype(object))
        notes = notes + _excuse_note(rule, excused)
        worst.add(rule, bad, rule.severity(x, b), x, b)
    if joiner:
        message = np.array([joiner.join(p for p in row if p) for row in zip(*parts)], dtype=object)
    else:
        message = np.sum(parts, axis=0) if parts else _strings(n)
    return _Judged(
        cells, failed, _joined(message, notes), [c for _, c in parsed], worst.severity, worst.texts()
    )


def _joined(first: np.ndarray, then: np.ndarray) -> np.ndarray:
    """Each text of ``first`` followed by that of ``then``, on a new line when it does not end one."""
    return np.array(
        [
            a + ("\n" if a and b and not a.endswith("\n") else "") + b
            for a, b in zip(first.tolist(), then.tolist())
        ],
        dtype=object,
    )


def _judge_one(v: _View, column: str, rule: R.Rule) -> _Judged:
    """Binary (rate must be 0) and thousandth (≥ 0.999): one NPU value, copied into the output as read."""
    x, code = v.npu(column)
    over = rule.fails(x)
    excused = _excused(v, rule, over, x, column)
    bad = over & ~excused
    assert rule.status is not None
    cells = {rule.value: v.npu_as_read(column), rule.status: _verdict_text(bad)}
    message = np.where(bad, rule.message, "").astype(object) + _excuse_note(rule, excused)
    worst = _Worst(len(x))
    worst.add(rule, bad, rule.severity(x), x)
    return _Judged(cells, bad, message, [code], worst.severity, worst.texts())


def _judge_ulp(v: _View) -> _Judged:
    floor = _per_dtype(v.dtype, "min_error")
    (mu, mu_c), (mu_g, mu_gc) = v.npu(ULP_MEAN), v.gpu(ULP_MEAN)
    (p, p_c), (q, q_c) = v.npu(ULP_PROPORTION), v.gpu(ULP_PROPORTION)
    _, mean_ok, mean_note = _inf_nan_ratio(mu, mu_g, floor, ULP_MEAN, v.npu_alone)
    r, ratio_ok, ratio_note = _inf_nan_ratio(p, q, floor, ULP_PROPORTION, v.npu_alone)
    consistent = mean_ok & ratio_ok
    fp32 = v.dtype == "torch.float32"
    over = np.where(fp32, R.ULP_FP32.fails([mu, p, r]), R.ULP_HALF.fails([p, r]))
    # the escapes read the NPU alone: one no worse than the GPU's lets the row pass (compare(X, X) clean)
    mean_rule, fp32_share, half_share = R.ULP_FP32.rules[0], R.ULP_FP32.rules[1], R.ULP_HALF.rules[0]
    # ... but only where the GPU row itself fails those escapes: judged per metric alone, a GPU that
    # passes outright on one escape (proportion 0.01 < 0.05) would excuse an NPU that is far worse on it
    # (proportion 0.5) through the other escape (means equally past 64)
    with np.errstate(invalid="ignore"):
        gpu_fails_too = (q_c == OK) & np.where(
            fp32, (mu_gc == OK) & mean_rule.fails(mu_g) & fp32_share.fails(q), half_share.fails(q)
        )
    by_share = (
        np.where(
            fp32,
            _excused(v, fp32_share, fp32_share.fails(p), p, ULP_PROPORTION),
            _excused(v, half_share, half_share.fails(p), p, ULP_PROPORTION),
        )
        & over
        & consistent
        & gpu_fails_too
    )
    by_mean = (
        fp32 & _excused(v, mean_rule, mean_rule.fails(mu), mu, ULP_MEAN) & over & consistent & gpu_fails_too
    )
    excused = by_share | by_mean
    bad_check = over & ~excused
    failed = ~consistent | bad_check
    verdict = _verdict_text(bad_check)
    verdict[~consistent] = BLANK  # upstream leaves ULP误差判定结果 blank on an inf/nan mismatch
    cells = {
        ULP_MEAN: format_floats(mu),
        ULP_PROPORTION: format_floats(p),
        ULP_PROPORTION_RATIO: format_floats(r),
        ULP_STATUS: verdict,
    }
    message = mean_note + ratio_note + np.where(failed, R.ULP_MESSAGE, "").astype(object)
    message = message + _excuse_note(fp32_share, by_share) + _excuse_note(mean_rule, by_mean & ~by_share)
    worst = _Worst(len(p), nearest=True)  # the escape closest to passing
    for escape, rows, values in ((R.ULP_FP32, fp32, (mu, p, r)), (R.ULP_HALF, ~fp32, (p, r))):
        for rule, value in zip(escape.rules, values):
            worst.add(rule, bad_check & consistent & rows, rule.severity(value), value)
    nan = np.full(len(p), np.nan)
    # name the column whose inf/nan differs (the mean: an inf/NaN in the output; the proportion otherwise)
    worst.add(R.ULP_MEAN_MISMATCH, ~mean_ok, np.full(len(p), np.inf), nan)
    worst.add(R.ULP_MISMATCH, mean_ok & ~ratio_ok, np.full(len(p), np.inf), nan)
    return _Judged(cells, failed, message, [mu_c, mu_gc, p_c, q_c], worst.severity, worst.texts())


JUDGES: dict[Standard, Callable[[_View], _Judged]] = {
    Standard.BENCHMARK: _judge_benchmark,
    Standard.ABSOLUTE_THRESHOLD: lambda v: _judge_rates(v, R.ABSOLUTE, ""),
    Standard.ACCUMULATIVE: lambda v: _judge_rates(v, R.ACCUMULATIVE, "\n"),
    Standard.BINARY: lambda v: _judge_one(v, BINARY_ERR_RATE, R.BINARY),
    Standard.THOUSANDTH: lambda v: _judge_one(v, THOUSANDTH, R.THOUSANDTH),
    Standard.ULP: _judge_ulp,
}
"""standard → the function judging its rows (the only dispatch on standards)."""


def _side_text(m: pd.DataFrame, col: str) -> np.ndarray:
    """A column of the row's own side: the GPU cell for GPU-only rows, else the NPU cell."""
    npu = m[f"npu:{col}"].to_numpy(dtype=object)
    gpu = m[f"gpu:{col}"].to_numpy(dtype=object)
    return np.where(m["presence"].to_numpy() == GPU_ONLY, gpu, npu)


def api_names(names: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(valid, full API name, API type, bare API name, direction) from ``Type[.prefix].api.N.dir.output.k``
    (grammar: :func:`~msprobe.formats.record_names.output_rows_columns`)."""
    valid, *parts = output_rows_columns(names.tolist())
    full, api_type, bare, direction = (np.array(p, dtype=object) for p in parts)
    return np.array(valid, dtype=bool), full, api_type, bare, direction


def evaluate(
    m: pd.DataFrame,
    npu_numeric: frozenset[str] = frozenset(),
    npu_alone: bool = False,
    routing: str = "8.1.1",
) -> pd.DataFrame:
    """Verdicts of every merged row (see module docstring; ``npu_alone``: see :func:`_excused`;
    ``routing``: see :func:`~msprobe.compare.standards.route`)."""
    n = len(m)
    name = m["name"].astype(str)
    valid, full, api_type, bare, direction = api_names(name)
    presence = m["presence"].to_numpy(dtype=object)
    dtype = _side_text(m, DEVICE_DTYPE)
    shape = _side_text(m, SHAPE)
    out = {c: _strings(n, BLANK) for c in COMPARE_DETAILS_HEADER}
    out[API_NAME] = name.to_numpy(dtype=object)
    message = _strings(n)
    kind = _strings(n, "evaluated")
    status = _strings(n, SKIP)
    standard = _strings(n)
    severity = np.full(n, np.nan)
    worst = _strings(n)

    kind[~valid] = "invalid"
    message[~valid] = np.array([f"The API name {x} is invalid." for x in out[API_NAME][~valid]], dtype=object)
    one_side = valid & (presence != BOTH)
    kind[one_side] = "missing"
    status[one_side] = MISSING
    message[one_side & (presence == GPU_ONLY)] = (
        "missing: only in the GPU details file, no NPU row has this name."
    )
    message[one_side & (presence != GPU_ONLY)] = (
        "missing: only in the NPU details file, no GPU row has this name."
    )

    mismatch = valid & shapes_differ(m)
    kind[mismatch] = "mismatch"
    status[mismatch] = MISMATCH
    if mismatch.any():
        message[mismatch] = np.array(
            [
                f"mismatch: shapes differ (NPU {a.strip()}, GPU {b.strip()}), not compared: "
                "are both files from one run?"
                for a, b in zip(
                    m[f"npu:{SHAPE}"].to_numpy()[mismatch], m[f"gpu:{SHAPE}"].to_numpy()[mismatch]
                )
            ],
            dtype=object,
        )

    cand = valid & (presence == BOTH) & ~mismatch
    dtype_series = pd.Series(dtype)
    dtype_na = is_na(dtype_series)
    kind[cand & dtype_na] = "exception"
    message[cand & dtype_na] = DTYPE_ERROR
    blank_dtype = text_test(dtype, str.isspace)
    skip = cand & ~dtype_na & (blank_dtype | np.isin(dtype, list(UNSUPPORTED_DTYPES)) | empty_shapes(shape))
    message[skip] = as_read(m.loc[skip, f"npu:{MESSAGE}"], MESSAGE in npu_numeric)

    judged = cand & ~dtype_na & ~skip
    judged_skip = np.zeros(n, dtype=bool)  # rows a standard did not judge (their reason in message)
    idx = np.flatnonzero(judged)
    stds = route(api_type[idx], bare[idx], dtype[idx], routing)
    rerouted = _rerouted(m, idx, stds, np.isin(dtype[idx], list(FLOAT_DTYPES)), npu_alone)
    for std, judge in JUDGES.items():
        rows = idx[stds == std]
        if not len(rows):
            continue
        with np.errstate(over="ignore"):  # severities of huge values are inf, as meant
            res = judge(_View(m, rows, dtype[rows], npu_numeric, npu_alone))
        code = first_error(res.codes)
        good, bad = rows[code == OK], rows[code != OK]
        kind[bad] = "exception"
        message[bad] = np.array([ERROR_TEXT[int(c)] for c in code[code != OK]], dtype=object)
        keep = code == OK
        for col, values in res.cells.items():
            out[col][good] = values[keep]
        status[good] = _verdict_text(res.failed[keep])
        message[good] = res.message[keep]
        standard[good] = std.value
        out[COMPARE_ALGORITHM][good] = std.value
        severity[good] = np.where(res.failed, res.severity, np.nan)[keep]
        worst[good] = res.worst[keep]
        if res.skipped is not None:
            skipped = good[res.skipped[keep]]
            status[skipped], judged_skip[skipped], worst[skipped] = SKIP, True, ""

    _rank_npu_only_nonfinite(m, idx[status[idx] == ERROR], dtype, npu_numeric, npu_alone, severity, worst)

    plain_message = message.copy()
    flag = _flags(m, presence)  # dtype/shape differences only: counted and listed as such
    noted = _with_notes(flag, rerouted) if rerouted else flag  # the Message also names a rerouting
    has_note = noted != ""
    notes = np.array([f"NOTE: {f}\n" for f in noted[has_note]], dtype=object)
    message[has_note] = _joined(message[has_note], notes)
    out[COMPARE_RESULT] = status
    out[MESSAGE] = message
    analysis = {
        "kind": kind,
        "standard": standard,
        "severity": severity,
        "worst": worst,  # the failing metric furthest past its bound, against that bound
        "full": full,
        "api": bare,
        "direction": direction,
        "dtype": dtype,
        "npu_dtype": m[f"npu:{DEVICE_DTYPE}"].to_numpy(dtype=object),
        "gpu_dtype": m[f"gpu:{DEVICE_DTYPE}"].to_numpy(dtype=object),
        "npu_shape": m[f"npu:{SHAPE}"].to_numpy(dtype=object),
        "gpu_shape": m[f"gpu:{SHAPE}"].to_numpy(dtype=object),
        "flag": flag,
        "plain_message": plain_message,
        # a SKIP's reason for the result row: the replay's message, or the standard's own reason
        "skip_message": np.where(
            judged_skip, plain_message, as_read(pd.Series(_side_text(m, MESSAGE)), MESSAGE in npu_numeric)
        ),
        "presence": presence,
        "duplicated_in": m["duplicated_in"].to_numpy(dtype=object),
    }
    return text_frame({**out, **{f"_{key}": values for key, values in analysis.items()}})


def _rerouted(
    m: pd.DataFrame, idx: np.ndarray, stds: np.ndarray, floats: np.ndarray, npu_alone: bool
) -> dict[int, str]:
    """Float rows (``floats``) both replays scored by another standard than compare's table routes
    their API to (a ``pytest_msprobe_api_info`` answer routed a project's own op): judged by that
    standard (``stds`` changed in place) instead of turning SKIP over blank columns; row -> the note
    saying so. 8.1.1's verdicts (``npu_alone``) keep the table's routing."""
    if npu_alone or not len(idx):
        return {}
    npu = scored_standards(lambda column: m[f"npu:{column}"].to_numpy(dtype=object)[idx], len(idx))
    gpu = scored_standards(lambda column: m[f"gpu:{column}"].to_numpy(dtype=object)[idx], len(idx))
    scored = np.array([standard is not None for standard in npu], dtype=bool)
    other = floats & scored & (npu == gpu) & (npu != stds)
    notes = {
        int(row): f"judged by {by.value}, the standard both replays scored it by (compare's table "
        f"routes it to {routed.value})"
        for row, by, routed in zip(idx[other], npu[other], stds[other])
    }
    stds[other] = npu[other]
    return notes


def _with_notes(flag: np.ndarray, notes: dict[int, str]) -> np.ndarray:
    """``flag`` with each row's note of ``notes`` after its text ("; " between the two)."""
    out = flag.copy()
    for row, note in notes.items():
        out[row] = f"{flag[row]}; {note}" if flag[row] else note
    return out


def _rank_npu_only_nonfinite(
    m: pd.DataFrame,
    failing: np.ndarray,
    dtype: np.ndarray,
    npu_numeric: frozenset[str],
    npu_alone: bool,
    severity: np.ndarray,
    worst: np.ndarray,
) -> None:
    """An inf/NaN on the NPU only is an inf/nan mismatch whatever the standard judging the row: an
    ``error`` row whose replay cosine is NaN on the NPU and a number (or blank) on the GPU is ranked
    infinitely far past its bound and its worst metric says so. The benchmark and ULP standards already
    do; without this, a NaN from a binary-standard API (``transpose``) ranked as a 1/N mismatch rate (2x)
    and one from an absolute-threshold API (``add``) at 1001x, below finite precision losses. Only the
    ranking and the report's wording change, never a verdict."""
    if npu_alone or not len(failing):
        return
    npu_only = _npu_only_nonfinite(_View(m, failing, dtype[failing], npu_numeric))
    rows = failing[npu_only & np.isfinite(severity[failing])]
    severity[rows] = np.inf
    worst[rows] = R.NPU_ONLY_NONFINITE.describe(float("nan"))


def _flags(m: pd.DataFrame, presence: np.ndarray) -> np.ndarray:
    """Text naming a dtype or shape difference between the two sides of a paired row ("" if none)."""
    both = presence == BOTH
    out = _strings(len(m))
    for col, word in ((DEVICE_DTYPE, "dtype"), (SHAPE, "shape")):
        differ = both & stated_texts_differ(m[f"npu:{col}"], m[f"gpu:{col}"])
        if differ.any():
            a = m[f"npu:{col}"].to_numpy(dtype=object)[differ].tolist()
            b = m[f"gpu:{col}"].to_numpy(dtype=object)[differ].tolist()
            text = [f"{word} differs: NPU {x.strip()}, GPU {y.strip()}; " for x, y in zip(a, b)]
            out[differ] = out[differ] + np.array(text, dtype=object)
    flagged = np.flatnonzero(out != "")
    out[flagged] = [s.removesuffix("; ") for s in out[flagged].tolist()]
    return out
