"""From details verdicts to one result row per API: forward and backward combined.

Per API (its ``full`` name ``Type.api.N``): if the dtype of its last judged row is float64/complex the
API is ``SKIP`` with upstream's "does not support" message; otherwise forward and backward are each the
aggregate of their rows' statuses: none → ``" "``, all SKIP → ``SKIP``, any error → ``error``, any
row whose shapes differ → ``mismatch`` (ours), any missing row → ``missing`` (ours), else ``pass``.
Rows of unsupported dtypes are not counted. Message: the ``topk`` hint when forward fails, then the
last forward row's message when forward is SKIP.

Invalid-name and exception rows each give an immediate ``[name, SKIP, SKIP, text]`` row, and result rows
are ordered as upstream writes them: an API's row comes when the next judged row of another API is met,
so immediate rows between an API's last row and the next API's first row come before it.

Deviation: rows are grouped by API name wherever they are in the file (upstream groups consecutive rows
only, so a split API gets two result rows); identical for files written by run_ut.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprobe.compare.cells import text_frame
from msprobe.compare.standards import HINTS, UNSUPPORTED_DTYPES, UNSUPPORTED_MESSAGE
from msprobe.compare.verdicts import ERROR, MISMATCH, MISSING, PASS, SKIP
from msprobe.formats.accuracy_csv import (
    API_NAME,
    BACKWARD_SUCCESS,
    BLANK,
    COMPARE_RESULT,
    FORWARD_SUCCESS,
    MESSAGE,
)

FWD, BWD = FORWARD_SUCCESS, BACKWARD_SUCCESS
VERDICT = "_verdict"
"""Overall verdict of a result row: error > mismatch > missing > pass > SKIP (the report's counts)."""


def _aggregate(
    n: pd.Series, skip: pd.Series, err: pd.Series, missing: pd.Series, mism: pd.Series
) -> np.ndarray:
    out = np.full(len(n), PASS, dtype=object)
    out[(n > 0) & (skip == n)] = SKIP
    out[missing > 0] = MISSING
    out[mism > 0] = MISMATCH
    out[err > 0] = ERROR
    out[n == 0] = BLANK
    return out


def overall(fwd: np.ndarray, bwd: np.ndarray) -> np.ndarray:
    """One verdict for a result row from its forward and backward cells."""
    out = np.full(len(fwd), BLANK, dtype=object)
    for verdict in (SKIP, PASS, MISSING, MISMATCH, ERROR):  # later wins
        out[(fwd == verdict) | (bwd == verdict)] = verdict
    return out


def result_rows(details: pd.DataFrame) -> pd.DataFrame:
    """The result table (4 upstream columns) plus ``_verdict``, ``_severity`` and ``_full``."""
    n = len(details)
    kind = details["_kind"].to_numpy()
    pos = np.arange(n)
    immediate = np.isin(kind, ("invalid", "exception"))
    normal = ~immediate

    imm = text_frame(
        {
            API_NAME: details[API_NAME].to_numpy()[immediate],
            FWD: np.full(int(immediate.sum()), SKIP, dtype=object),
            BWD: np.full(int(immediate.sum()), SKIP, dtype=object),
            MESSAGE: details["_plain_message"].to_numpy()[immediate],
            VERDICT: np.full(int(immediate.sum()), SKIP, dtype=object),
            "_severity": np.full(int(immediate.sum()), np.nan),
            "_full": details["_full"].to_numpy()[immediate],
            "_e": pos[immediate].astype(float),
        }
    )

    read = [COMPARE_RESULT, "_kind", "_dtype", "_direction", "_full", "_skip_message", "_severity", "_api"]
    d = details.loc[normal, read]  # only the columns read here: a copy of every column would cost more
    status = d[COMPARE_RESULT].to_numpy()
    evaluated = d["_kind"].to_numpy() == "evaluated"
    missing = status == MISSING
    mism = status == MISMATCH
    counted = (evaluated & ~np.isin(d["_dtype"].to_numpy(), list(UNSUPPORTED_DTYPES))) | missing | mism
    direction = d["_direction"].to_numpy()
    columns: dict[str, np.ndarray] = {"full": d["_full"].to_numpy(dtype=object), "pos": pos[normal]}
    skip, err = status == SKIP, status == ERROR
    for tag, want in (("f", "forward"), ("b", "backward")):
        sel = counted & (direction == want)
        columns[f"{tag}n"] = sel
        columns[f"{tag}skip"] = sel & skip
        columns[f"{tag}err"] = sel & err
        columns[f"{tag}miss"] = sel & missing
        columns[f"{tag}mism"] = sel & mism
    fwd_rows = counted & (direction == "forward")
    none = np.array(None, dtype=object)
    columns["last_dtype"] = np.where(evaluated, d["_dtype"].to_numpy(dtype=object), none)
    columns["fwd_msg"] = np.where(fwd_rows, d["_skip_message"].to_numpy(dtype=object), none)
    columns["severity"] = d["_severity"].to_numpy()
    columns["api"] = d["_api"].to_numpy(dtype=object)
    flags = text_frame(columns)  # built at once, text kept as objects (no string-dtype conversions)

    g = flags.groupby("full", sort=False)
    sums = g[["fn", "fskip", "ferr", "fmiss", "fmism", "bn", "bskip", "berr", "bmiss", "bmism"]].sum()
    last = g[["last_dtype", "fwd_msg", "pos", "api"]].last()
    agg = sums.join(last).join(g["severity"].max().rename("sev"))

    fwd = _aggregate(agg["fn"], agg["fskip"], agg["ferr"], agg["fmiss"], agg["fmism"])
    bwd = _aggregate(agg["bn"], agg["bskip"], agg["berr"], agg["bmiss"], agg["bmism"])
    n_missing = (agg["fmiss"] + agg["bmiss"]).to_numpy()
    n_mism = (agg["fmism"] + agg["bmism"]).to_numpy()
    # 8.1.1's last-row dtype rule (kept) must not hide our one-sided or other-shape rows (8.1.1 drops
    # those): an API with such a row keeps its missing / mismatch verdict and note, and --strict sees it
    unsupported = agg["last_dtype"].isin(list(UNSUPPORTED_DTYPES)).to_numpy() & (n_missing + n_mism == 0)
    fwd[unsupported] = SKIP
    bwd[unsupported] = SKIP
    hint = agg["api"].map(HINTS).fillna("").to_numpy(dtype=object)
    message = np.where(fwd == ERROR, hint, "").astype(object)
    skip_msg = agg["fwd_msg"].fillna("").to_numpy(dtype=object)
    message = message + np.where(fwd == SKIP, skip_msg, "").astype(object)
    note = np.full(len(n_missing), "", dtype=object)
    for counts, text in (
        (n_missing, "{} output row(s) present on one side only."),
        (n_mism, "{} output row(s) whose shapes differ between NPU and GPU (not compared)."),
    ):
        some = np.flatnonzero(counts)
        texts = [text.format(k) for k in counts[some].tolist()]
        note[some] = note[some] + np.array([t + " " for t in texts], dtype=object)
    note = np.array([t.rstrip() for t in note.tolist()], dtype=object)
    sep = np.where((message != "") & (note != ""), " ", "").astype(object)  # "reason" + " " + "N row(s) ..."
    message = np.where(unsupported, UNSUPPORTED_MESSAGE, message + sep + note).astype(object)

    # emission position: just before the next normal row after the API's last row (or after everything)
    normal_pos = pos[normal]
    nxt = np.searchsorted(normal_pos, agg["pos"].to_numpy(), side="right")
    e = np.where(nxt < len(normal_pos), normal_pos[np.minimum(nxt, len(normal_pos) - 1)] - 0.5, n + 0.5)

    grouped = text_frame(
        {
            API_NAME: agg.index.to_numpy(dtype=object),
            FWD: fwd,
            BWD: bwd,
            MESSAGE: message,
            VERDICT: overall(fwd, bwd),
            "_severity": agg["sev"].to_numpy(),
            "_full": agg.index.to_numpy(dtype=object),
            "_e": e,
        }
    )
    frames = [f for f in (imm, grouped) if len(f)]
    if not frames:
        return grouped
    res = pd.concat(frames, ignore_index=True).sort_values("_e", kind="stable").reset_index(drop=True)
    return res.drop(columns=["_e"])


def _replay_status(status: str) -> str:
    """A replay's per-direction status as a compare verdict (compare has no ``Warning``)."""
    if status in (ERROR, SKIP):
        return status
    return BLANK if not status.strip() else PASS


def unrowed_results(
    npu: list[list[str]] | None, gpu: list[list[str]] | None, compared: set[str]
) -> pd.DataFrame:
    """Result rows of the APIs a replay judged without writing any details row (dropout, judged by its
    zero-fraction check alone): 8.1.1 leaves them out of the compare. Each keeps the NPU replay's own
    verdict (``SKIP`` when the NPU side has no result CSV), even where the GPU replay says ``error`` too
    (no number tells which side is worse); both replays' verdicts and messages are in its message; an
    API in one replay only is ``missing``. From the replays' result CSVs (``npu``/``gpu`` rows, padded
    to four cells; None when absent); ``compared``: the APIs with details rows."""
    sides = {"NPU": {r[0]: r for r in npu or []}, "GPU": {r[0]: r for r in gpu or []}}
    names = [n for n in dict.fromkeys([*sides["NPU"], *sides["GPU"]]) if n not in compared]
    rows = []
    for name in names:
        found = {side: rows_[name] for side, rows_ in sides.items() if name in rows_}
        said = ", ".join(f"{side} {r[1].strip() or '-'}/{r[2].strip() or '-'}" for side, r in found.items())
        if "NPU" in found and ("GPU" in found or gpu is None):
            fwd, bwd = _replay_status(found["NPU"][1]), _replay_status(found["NPU"][2])
            message = f"no output rows to compare: the replay's own verdict ({said})."
        elif npu is None:  # the NPU details file came without its result file
            fwd = SKIP
            bwd = BLANK if not found["GPU"][2].strip() else SKIP
            message = f"no output rows to compare, and no NPU result CSV to give its verdict ({said})."
        else:
            side = next(iter(found))
            fwd = MISSING
            bwd = BLANK if not found[side][2].strip() else MISSING
            message = f"in the {side} replay only, with no output rows ({said})."
        reasons = dict.fromkeys(r[3].strip() for r in found.values() if r[3].strip())
        if reasons:  # the replay's own reason (a skipped API: "not support for run ut", its size, ...)
            message = f"{message} {' / '.join(reasons)}"
        rows.append((name, fwd, bwd, message))
    fwd_col = np.array([r[1] for r in rows], dtype=object)
    bwd_col = np.array([r[2] for r in rows], dtype=object)
    return text_frame(
        {
            API_NAME: np.array(names, dtype=object),
            FWD: fwd_col,
            BWD: bwd_col,
            MESSAGE: np.array([r[3] for r in rows], dtype=object),
            VERDICT: overall(fwd_col, bwd_col),
            "_severity": np.full(len(rows), np.nan),
            "_full": np.array(names, dtype=object),
        }
    )
