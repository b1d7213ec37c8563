"""Pairing the rows of the NPU and GPU details tables by ``API Name``, with a status for every key.

Upstream looks each NPU row up in the GPU table, drops NPU rows the GPU file lacks, ignores GPU-only
rows and stops at the first duplicated GPU row. Here every name of the union appears
exactly once in the result, with its ``presence``:

* ``both`` — one row on each side;
* ``npu_only`` / ``gpu_only`` — present on one side only (reported, never dropped);

and ``duplicated_in`` says on which side(s) a name occurs more than once (the first occurrence is kept
as the row's values; :func:`duplicates` lists all of them so the caller can refuse the input).

:func:`different_runs` says when the two files do not look like details of one dump (few shared
names, or paired outputs whose shapes differ): run_ut on two devices replays the same records, so the
names are the same and every paired output has one shape.

Order: NPU rows in file order, then GPU-only rows in GPU file order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprobe.compare.cells import text_frame
from msprobe.compare.table import COLUMNS, LINE, NAME, DetailsTable, lines_of
from msprobe.formats.accuracy_csv import SHAPE

BOTH, NPU_ONLY, GPU_ONLY = "both", "npu_only", "gpu_only"

MIN_SHARED = 0.5
"""Fewer names in both files than this share of the smaller file's names: different runs."""
MAX_SHAPE_DIFFERENCES = 0.05
"""More paired outputs whose shapes differ than this share of the paired outputs: different runs."""


@dataclass(frozen=True)
class Duplicate:
    side: str  # "npu" or "gpu"
    name: str
    lines: tuple[int, ...]


def _take(values: np.ndarray, rows: np.ndarray, fill: str | int | bool) -> np.ndarray:
    """``values[rows]`` with ``fill`` where ``rows`` is -1."""
    absent = rows < 0
    if not absent.any():
        return values[rows]
    out = values[np.maximum(rows, 0)] if len(values) else np.full(len(rows), fill, dtype=values.dtype)
    return np.where(absent, np.asarray(fill, dtype=values.dtype), out)


def _first_rows(codes: np.ndarray, n_codes: int) -> np.ndarray:
    """For each name code, the first row holding it (-1 where none does)."""
    first = np.full(n_codes, -1)
    present, at = np.unique(codes, return_index=True)
    first[present] = at
    return first


def merge(npu: DetailsTable, gpu: DetailsTable) -> pd.DataFrame:
    """One row per API Name of the union: ``name``, ``presence``, ``duplicated_in``, ``npu:*``, ``gpu:*``.

    The ``npu:*``/``gpu:*`` cells of an absent side are ``""`` (never read: such rows are not evaluated).
    Names are hashed once (one code per distinct name of either file); the rest is integer work.
    """
    n_names = npu.frame[NAME].to_numpy(dtype=object)
    g_names = gpu.frame[NAME].to_numpy(dtype=object)
    codes, distinct = pd.factorize(np.concatenate([n_names, g_names]), use_na_sentinel=False)
    n_codes, g_codes = codes[: len(n_names)], codes[len(n_names) :]
    n_first, g_first = _first_rows(n_codes, len(distinct)), _first_rows(g_codes, len(distinct))
    n_rows = np.sort(n_first[n_first >= 0])  # first occurrences, file order
    g_only_rows = np.sort(g_first[(g_first >= 0) & (n_first < 0)])
    npu_row = np.concatenate([n_rows, np.full(len(g_only_rows), -1)])
    gpu_row = np.concatenate([g_first[n_codes[n_rows]], g_only_rows])
    code = np.concatenate([n_codes[n_rows], g_codes[g_only_rows]])
    names = np.concatenate([n_names[n_rows], g_names[g_only_rows]]).astype(object)
    presence = np.where(npu_row < 0, GPU_ONLY, np.where(gpu_row < 0, NPU_ONLY, BOTH)).astype(object)
    n_dup = np.bincount(n_codes, minlength=len(distinct))[code] > 1
    g_dup = np.bincount(g_codes, minlength=len(distinct))[code] > 1
    dup = np.full(len(names), "", dtype=object)
    dup[n_dup] = "npu"
    dup[g_dup] = "gpu"
    dup[n_dup & g_dup] = "both"
    columns: dict[str, np.ndarray] = {"name": names, "presence": presence, "duplicated_in": dup}
    for side, table, rows in (("npu", npu, npu_row), ("gpu", gpu, gpu_row)):
        for c in COLUMNS:
            columns[f"{side}:{c}"] = _take(table.frame[c].to_numpy(dtype=object), rows, "")
    return text_frame(columns)


def duplicates(table: DetailsTable, side: str) -> list[Duplicate]:
    """Every API Name that occurs more than once in ``table``, with all its lines, in file order."""
    frame = table.frame
    mask = frame[NAME].duplicated(keep=False).to_numpy()
    if not mask.any():
        return []
    dup = pd.DataFrame({NAME: frame[NAME].to_numpy()[mask], LINE: np.asarray(lines_of(table))[mask]})
    return [
        Duplicate(side=side, name=str(name), lines=tuple(int(x) for x in group[LINE]))
        for name, group in dup.groupby(NAME, sort=False)
    ]


def shapes_differ(m: pd.DataFrame) -> np.ndarray:
    """Paired rows whose ``Shape`` texts differ (outputs that cannot be compared)."""
    return (m["presence"].to_numpy() == BOTH) & stated_texts_differ(m[f"npu:{SHAPE}"], m[f"gpu:{SHAPE}"])


def stated_texts_differ(a: pd.Series, b: pd.Series) -> np.ndarray:
    """Cells that state a value on both sides and differ. A blank is no value: a replay's SKIP row (an
    API that raised or was skipped on one device only) has no dtype or shape, which 8.1.1's SKIP rules
    judge, not a difference."""
    out = texts_differ(a, b)
    idx = np.flatnonzero(out)
    if len(idx):
        x, y = a.to_numpy(dtype=object)[idx].tolist(), b.to_numpy(dtype=object)[idx].tolist()
        out[idx] = [bool(p.strip()) and bool(q.strip()) for p, q in zip(x, y)]
    return out


def texts_differ(a: pd.Series, b: pd.Series) -> np.ndarray:
    """Cells whose texts differ once stripped (only the cells that differ as written are stripped)."""
    x, y = a.to_numpy(dtype=object), b.to_numpy(dtype=object)
    out = x != y
    idx = np.flatnonzero(out)
    if len(idx):
        out[idx] = [p.strip() != q.strip() for p, q in zip(x[idx].tolist(), y[idx].tolist())]
    return out


def different_runs(m: pd.DataFrame) -> str:
    """Why the merged files look like details of different runs ("" when they look like one run)."""
    presence = m["presence"].to_numpy()
    shared = int((presence == BOTH).sum())
    n_npu, n_gpu = int((presence != GPU_ONLY).sum()), int((presence != NPU_ONLY).sum())
    reasons = []
    if min(n_npu, n_gpu) and shared < MIN_SHARED * min(n_npu, n_gpu):
        reasons.append(f"only {shared} of {n_npu} NPU and {n_gpu} GPU output names are in both files")
    differ = int(shapes_differ(m).sum())
    if differ and differ > MAX_SHAPE_DIFFERENCES * shared:
        reasons.append(f"{differ} of {shared} paired outputs differ in shape")
    return "; ".join(reasons)
