"""Judging two loaded details tables: merge, verdict per row, result per API, as data frames only.

:class:`Analysis` is what the CSV writers (``compare/run.py``) and the report model
(``compare/report/model.py``) read; nothing here writes or renders.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from msprobe.compare.merge import different_runs, duplicates, merge
from msprobe.compare.results import VERDICT, result_rows, unrowed_results
from msprobe.compare.routing import routing_of
from msprobe.compare.table import DetailsTable
from msprobe.compare.verdicts import evaluate
from msprobe.errors import MsprobeError
from msprobe.formats.accuracy_csv import COMPARE_RESULT

MAX_NAMED = 5
_DUMP_FOLDER = re.compile(r"(step\d+|rank\d*|proc\d+)")
EMPTY_HINT = "was run_ut stopped before its first API, or did -k match nothing?"


@dataclass(frozen=True)
class Analysis:
    """Finished compare data: every details row and every result row, with analysis columns (``_*``)."""

    npu: DetailsTable
    gpu: DetailsTable
    details: pd.DataFrame
    results: pd.DataFrame
    different_runs: str = ""  # why the two files look like details of different runs ("" if they do not)
    # how each replay routed float outputs to standards (read off its file): NPU's, GPU's
    routings: tuple[str, str] = ("8.1.1", "8.1.1")

    @property
    def routing(self) -> str:
        """The routing the rows are judged with: the files', or 8.1.1's when they differ."""
        return judged_routing(self.routings)

    def warning(self) -> str:
        """The one line said first when a file has no rows, the files look like different runs or were
        scored with different routings, or a replay's result CSV beside them is damaged ("" if not).

        A file with the header only is what run_ut leaves when it is stopped before its first API or when
        ``-k`` matches nothing: every row of the other file is ``missing``, which is no comparison at all.
        """
        damaged = [t.replay_results_problem for t in (self.npu, self.gpu) if t.replay_results_problem]
        lines = (self._files_warning(), self._folders_warning(), *damaged)
        return "; ".join(dict.fromkeys(line for line in lines if line))

    def _folders_warning(self) -> str:
        """Two replays' ``OUT/<step>/<rank>/`` folders of different dump files (step0/rank0 against
        step1/rank1): their APIs share names, so nothing else tells that the inputs differ."""
        npu, gpu = (_dump_folder(Path(t.path)) for t in (self.npu, self.gpu))
        # only a folder kind both paths name tells anything: a replay of ``-api_info dump/step0`` writes
        # OUT/rank0/, one of the dump root OUT/step0/rank0/, for the same dump file
        ours, theirs = ({_kind(p): p for p in parts} for parts in (npu, gpu))
        if not any(ours[k] != theirs[k] for k in ours.keys() & theirs.keys()):
            return ""
        return (
            f"{self.npu.path} is the replay of {'/'.join(npu)} and {self.gpu.path} of {'/'.join(gpu)}: "
            "different dump files; compare the same step and rank folder of both replays"
        )

    def _files_warning(self) -> str:
        empty = [t for t in (self.npu, self.gpu) if not len(t)]
        if empty:
            named = " and ".join(dict.fromkeys(str(t.path) for t in empty))
            line = f"{named}: no output rows, only the header ({EMPTY_HINT})"
            if len(empty) == 1:  # the other file's rows are all judged missing
                side, full = ("GPU", self.gpu) if empty[0] is self.npu else ("NPU", self.npu)
                return f"{line}: nothing to pair with, all {len(full)} {side} output rows are missing"
            return f"{line}: nothing compared"
        npu, gpu = self.routings
        if npu != gpu:
            routed = {
                "8.1.1": "8.1.1's routing",
                "26.x": "26.x's routing (every float output by the benchmark standard)",
            }
            return (
                f"{self.npu.path} was scored with {routed[npu]} and {self.gpu.path} with {routed[gpu]}: "
                "an API the two route differently is SKIP, or judged on the NPU's values alone (absolute "
                "threshold, binary, thousandth); replay both with one --msprobe-routing"
            )
        if not self.different_runs:
            return ""
        return (
            f"{self.npu.path} and {self.gpu.path} look like details of different runs: {self.different_runs}"
        )

    def api_counts(self) -> dict[str, int]:
        return dict(Counter(self.results[VERDICT].to_numpy(dtype=object).tolist()))

    def row_counts(self) -> dict[str, int]:
        return dict(Counter(self.details[COMPARE_RESULT].to_numpy(dtype=object).tolist()))


def _dump_folder(csv: Path) -> tuple[str, ...]:
    """The step and rank folder names (``step0``, ``rank1``, ``proc0``) that end a details CSV's folder:
    run_ut's ``OUT/<step>/<rank>/`` for a dump root; () for a CSV elsewhere."""
    parts = csv.parent.parts[-2:]
    while parts and not _DUMP_FOLDER.fullmatch(parts[0]):
        parts = parts[1:]
    return parts if all(_DUMP_FOLDER.fullmatch(p) for p in parts) else ()


def _kind(folder: str) -> str:
    """``step`` for a step folder, ``rank`` for a rank or proc folder."""
    return "step" if folder.startswith("step") else "rank"


def judged_routing(routings: tuple[str, str]) -> str:
    """The routing rows are judged with: the two files', or 8.1.1's when they differ (said first)."""
    npu, gpu = routings
    return npu if npu == gpu else "8.1.1"


def _refuse_duplicates(table: DetailsTable, side: str) -> None:
    found = duplicates(table, side)
    if not found:
        return
    named = "; ".join(f"{d.name} (lines {', '.join(map(str, d.lines))})" for d in found[:MAX_NAMED])
    more = f" and {len(found) - MAX_NAMED} more" if len(found) > MAX_NAMED else ""
    raise MsprobeError(
        f"{table.path}: {len(found)} API Name(s) occur more than once: {named}{more}; "
        "each output must appear once (was the file appended twice?)"
    )


def _insert(results: pd.DataFrame, more: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``results`` with the rows of ``more`` placed as in ``order`` (a replay's API order): each after
    the rows of the APIs that come before it there (at the end when ``order`` lacks it)."""
    rank = {name: float(i) for i, name in enumerate(order)}
    before = np.fmax.accumulate(results["_full"].map(rank).fillna(-1.0).to_numpy(dtype=float))
    wanted = more["_full"].map(rank).to_numpy(dtype=float)
    at = np.where(np.isnan(wanted), len(results), np.searchsorted(before, wanted, side="right"))
    place = np.concatenate([np.arange(len(results), dtype=float), at - 0.5])
    both = pd.concat([results, more], ignore_index=True)
    return both.iloc[np.argsort(place, kind="stable")].reset_index(drop=True)


def analyse(npu: DetailsTable, gpu: DetailsTable, npu_alone: bool = False) -> Analysis:
    """Judge two loaded details tables; refuses duplicated API Names on either side.

    ``npu_alone``: judge the metrics 8.1.1 reads from the NPU row only without looking at the GPU row,
    exactly as 8.1.1 (then a table compared with itself can fail).
    """
    merged = merge(npu, gpu)
    if (merged["duplicated_in"].to_numpy() != "").any():  # merge has found them: name them, then refuse
        _refuse_duplicates(npu, "npu")
        _refuse_duplicates(gpu, "gpu")
    routings = (routing_of(npu.frame), routing_of(gpu.frame))
    details = evaluate(merged, npu.numeric, npu_alone, judged_routing(routings))
    results = result_rows(details)
    unrowed = unrowed_results(npu.replay_results, gpu.replay_results, set(details["_full"].tolist()))
    if len(unrowed):
        results = _insert(results, unrowed, [r[0] for r in npu.replay_results or gpu.replay_results or []])
    return Analysis(
        npu=npu,
        gpu=gpu,
        details=details,
        results=results,
        different_runs=different_runs(merged),
        routings=routings,
    )
