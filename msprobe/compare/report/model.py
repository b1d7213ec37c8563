"""What the reports show, as plain data built from a finished :class:`~msprobe.compare.analysis.Analysis`.

Renderers (``html.py``, ``markdown.py``) only format this; nothing here formats HTML or Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from msprobe.compare import rules as R
from msprobe.compare.cells import parse
from msprobe.compare.report.explain import row_reason
from msprobe.compare.report.stack import load_stacks, user_frames
from msprobe.compare.results import VERDICT
from msprobe.compare.standards import Standard
from msprobe.formats.accuracy_csv import (
    API_NAME,
    BACKWARD_SUCCESS,
    COMPARE_RESULT,
    FORWARD_SUCCESS,
    MESSAGE,
    ULP_MEAN,
    ULP_PROPORTION,
    ULP_PROPORTION_RATIO,
    ULP_STATUS,
)

if TYPE_CHECKING:
    from msprobe.compare.analysis import Analysis

IMMEDIATE = ("invalid", "exception")
"""Row kinds that give their own result row (never part of an API's rows)."""
VERDICT_ORDER = ("error", "missing", "pass", "SKIP", " ")
MAX_FAILING = 200
"""Failing APIs shown in full in the HTML (all of them are in the CSVs)."""
MAX_LISTED = 1000
"""One-sided and mismatched rows listed in the HTML (all are counted, and flagged in the CSV)."""

# standard → (value column, status column or None) shown per row
METRICS: dict[str, tuple[tuple[str, str | None], ...]] = {
    Standard.BENCHMARK.value: tuple((r.value, r.status) for _, r in R.BENCHMARK),
    Standard.ABSOLUTE_THRESHOLD.value: tuple((r.value, r.status) for _, r in R.ABSOLUTE),
    Standard.ACCUMULATIVE.value: tuple((r.value, r.status) for _, r in R.ACCUMULATIVE),
    Standard.BINARY.value: ((R.BINARY.value, R.BINARY.status),),
    Standard.THOUSANDTH.value: ((R.THOUSANDTH.value, R.THOUSANDTH.status),),
    Standard.ULP.value: ((ULP_MEAN, None), (ULP_PROPORTION, None), (ULP_PROPORTION_RATIO, ULP_STATUS)),
}  # fmt: skip


# metrics whose NPU/GPU ratio distribution is plotted, with the bound drawn on the plot
RATIO_PLOTS: tuple[tuple[str, float], ...] = (
    *((r.value, float(r.bound or 0)) for _, r in R.BENCHMARK),
    (ULP_PROPORTION_RATIO, 1.0),
)

# the counted ratios (EB is not counted in 8.1.1): an API's worst ratio / bound is plotted per family
COUNTED_RATIOS: tuple[tuple[str, float], ...] = (
    *((r.value, float(r.bound or 0)) for _, r in R.BENCHMARK if r.counted),
    (ULP_PROPORTION_RATIO, 1.0),
)
MAX_FAMILIES = 25


@dataclass(frozen=True)
class Metric:
    name: str
    value: str
    status: str


@dataclass(frozen=True)
class RowInfo:
    name: str
    standard: str
    status: str
    npu_dtype: str
    gpu_dtype: str
    npu_shape: str
    gpu_shape: str
    metrics: tuple[Metric, ...]
    message: str
    why: str = ""  # one line: why this row got its verdict (:func:`explain.row_reason`)
    severity: float = math.nan  # how far past its bound the row's worst failing metric is (NaN: none)


@dataclass(frozen=True)
class FailingApi:
    name: str
    forward: str
    backward: str
    severity: float  # how far past its bound the worst failing metric is (> 1; inf for inf/nan mismatches)
    worst: str  # that metric against its bound: "RMSE ratio (均方根误差比值) 50 > 2"
    rows: tuple[RowInfo, ...]
    stack: tuple[str, ...] | None  # the user's frames; None: no dump given or API not in stack.json
    hidden_frames: int = 0  # frames of torch / torch_npu left out of ``stack``


@dataclass(frozen=True)
class Report:
    npu_csv: str
    gpu_csv: str
    dump_dir: str | None
    api_counts: tuple[tuple[str, int], ...]
    row_counts: tuple[tuple[str, int], ...]
    failing: tuple[FailingApi, ...]
    failing_total: int
    missing: tuple[tuple[str, str], ...]  # (row name, "NPU only" / "GPU only"), the first MAX_LISTED
    missing_total: int
    flagged: tuple[tuple[str, str], ...]  # (row name, what differs), the first MAX_LISTED
    flagged_total: int
    ratios: dict[str, np.ndarray] = field(default_factory=dict)  # metric → finite ratios (plots)
    bounds: dict[str, float] = field(default_factory=dict)
    # API family (first segment of the name: Functional, Tensor, Torch, NPU, ...) → each API's worst
    # counted NPU/GPU ratio divided by its error bound (> 1 fails that bound)
    family_ratios: tuple[tuple[str, np.ndarray], ...] = ()
    warning: str = ""  # no rows, different runs, a --dump naming no compared API (said first), or ""


def _ordered(counts: dict[str, int]) -> tuple[tuple[str, int], ...]:
    known = [(k, counts[k]) for k in VERDICT_ORDER if k in counts]
    return tuple(known + sorted((k, v) for k, v in counts.items() if k not in VERDICT_ORDER))


# status columns of rules 8.1.1 writes but never counts (the benchmark error balance): a row's verdict
# does not follow them, which the report says beside their "error"
UNCOUNTED = frozenset(r.status for _, r in R.BENCHMARK if not r.counted)


def _status(d: Mapping[Hashable, object], status: str | None) -> str:
    if not status:
        return ""
    text = str(d[status]).strip()
    return f"{text}, not counted" if status in UNCOUNTED and text else text


def _row_info(d: Mapping[Hashable, object]) -> RowInfo:
    std = str(d["_standard"])
    metrics = tuple(
        Metric(name, str(d[name]).strip(), _status(d, status)) for name, status in METRICS.get(std, ())
    )
    return RowInfo(
        name=str(d[API_NAME]),
        standard=std,
        status=str(d[COMPARE_RESULT]),
        npu_dtype=str(d["_npu_dtype"]).strip(),
        gpu_dtype=str(d["_gpu_dtype"]).strip(),
        npu_shape=str(d["_npu_shape"]).strip(),
        gpu_shape=str(d["_gpu_shape"]).strip(),
        metrics=metrics,
        message=str(d[MESSAGE]).strip(),
        why=row_reason(str(d[COMPARE_RESULT]), std, str(d["_worst"]), str(d["_plain_message"])),
        severity=float(d["_severity"]),  # type: ignore[arg-type]
    )


def severity_text(value: float) -> str:
    """``25×``, ``∞`` (an inf/nan mismatch) or ``""`` (not failing)."""
    return "∞" if math.isinf(value) else ("" if math.isnan(value) else f"{value:.3g}×")


def _sort_key(sev: float) -> float:
    return -sev if not math.isnan(sev) else math.inf


def _family_ratios(apis: pd.Series, ratios: Mapping[str, np.ndarray]) -> tuple[tuple[str, np.ndarray], ...]:
    """Per API family, each API's worst counted ratio / bound (APIs with no finite ratio left out).

    ``apis``: each evaluated row's API (``_full``); ``ratios``: each plotted metric's values, one per row.
    """
    if not len(apis):
        return ()
    scaled = [ratios[metric] / bound for metric, bound in COUNTED_RATIOS if bound > 0]
    stacked = np.vstack(scaled)
    finite = np.where(np.isfinite(stacked), stacked, -np.inf)
    per_row = pd.Series(finite.max(axis=0), index=apis.index)
    worst = per_row.groupby(apis.astype(str).to_numpy()).max()
    worst = worst[np.isfinite(worst.to_numpy())]
    family = pd.Series([name.split(".", 1)[0] for name in worst.index.tolist()], index=worst.index)
    groups = sorted(worst.groupby(family.to_numpy()), key=lambda kv: (-len(kv[1]), kv[0]))[:MAX_FAMILIES]
    return tuple((str(name), values.to_numpy(dtype=np.float64)) for name, values in groups)


def build_report(analysis: Analysis, dump_dir: Path | None = None) -> Report:
    details, results = analysis.details, analysis.results
    stacks = load_stacks(dump_dir, analysis.npu.path.parent) if dump_dir is not None else {}
    failing_rows = results[results[VERDICT] == "error"]
    severities = failing_rows["_severity"].to_numpy(dtype=float)
    order = sorted(range(len(failing_rows)), key=lambda i: _sort_key(float(severities[i])))[:MAX_FAILING]
    shown = set(failing_rows["_full"].iloc[order])
    judged = details[details["_full"].isin(shown) & ~details["_kind"].isin(IMMEDIATE)]
    records = judged.to_dict("records")  # one conversion for every row shown
    rows_of: dict[str, list[Mapping[Hashable, object]]] = {}
    for rec in records:
        rows_of.setdefault(str(rec["_full"]), []).append(rec)
    failing = []
    for r in failing_rows.iloc[order].to_dict("records"):
        mine = rows_of.get(str(r["_full"]), [])
        rows = tuple(_row_info(rec) for rec in mine)
        worst = [str(rec["_worst"]) for rec in mine if rec["_severity"] == r["_severity"]]
        frames, hidden = user_frames(stacks[str(r["_full"])]) if str(r["_full"]) in stacks else (None, 0)
        failing.append(
            FailingApi(
                name=str(r[API_NAME]),
                forward=str(r[FORWARD_SUCCESS]),
                backward=str(r[BACKWARD_SUCCESS]),
                severity=float(r["_severity"]),
                # an API judged without details rows (a dropout): its result row's Message says why
                worst=str(worst[0]) if worst else ("" if mine else str(r[MESSAGE])),
                rows=rows,
                stack=tuple(frames) if frames is not None else None,
                hidden_frames=hidden,
            )
        )
    missing_all = details.loc[details["_kind"] == "missing", [API_NAME, "_presence"]]
    flagged_all = details.loc[details["_flag"] != "", [API_NAME, "_flag"]]
    missing, flagged = missing_all.iloc[:MAX_LISTED], flagged_all.iloc[:MAX_LISTED]
    evaluated = details.loc[details["_kind"] == "evaluated", [*(m for m, _ in RATIO_PLOTS), "_full"]]
    # text -> float, NaN where no number (blanks); every plotted metric parsed once
    per_row = {metric: parse(evaluated[metric])[0] for metric, _ in RATIO_PLOTS}
    ratios = {metric: v[np.isfinite(v)] for metric, v in per_row.items() if np.isfinite(v).any()}
    family_ratios = _family_ratios(evaluated["_full"], per_row)
    return Report(
        npu_csv=str(analysis.npu.path),
        gpu_csv=str(analysis.gpu.path),
        dump_dir=str(dump_dir) if dump_dir is not None else None,
        api_counts=_ordered(analysis.api_counts()),
        row_counts=_ordered(analysis.row_counts()),
        failing=tuple(failing),
        failing_total=len(failing_rows),
        missing=tuple(
            (str(n), "GPU only" if p == "gpu_only" else "NPU only")
            for n, p in zip(missing[API_NAME], missing["_presence"])
        ),
        missing_total=len(missing_all),
        flagged_total=len(flagged_all),
        flagged=tuple((str(n), str(f)) for n, f in zip(flagged[API_NAME], flagged["_flag"])),
        ratios=ratios,
        bounds=dict(RATIO_PLOTS),
        family_ratios=family_ratios,
        warning="; ".join(w for w in (analysis.warning(), _unrelated_dump(dump_dir, stacks, results)) if w),
    )


def _unrelated_dump(dump_dir: Path | None, stacks: Mapping[str, object], results: pd.DataFrame) -> str:
    """The warning for a ``--dump`` whose stack.json names none of the compared APIs ("" if it names one):
    most likely the dump of another run, so the report shows no call stack."""
    if dump_dir is None or not len(results) or any(str(api) in stacks for api in results["_full"]):
        return ""
    return f"{dump_dir}: its stack.json names none of the {len(results)} compared APIs (another run?)"
