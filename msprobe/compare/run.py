"""The compare pipeline: load both details files, merge, judge, combine, then write CSVs and reports.

``run_compare`` is the one entry point used by the CLI and by ``msprobe demo``. The analysis
(:func:`msprobe.compare.analysis.analyse`, re-exported here) returns data frames only; writing and
rendering happen afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from msprobe import timestamps
from msprobe.compare.analysis import Analysis, analyse
from msprobe.compare.table import load_details
from msprobe.errors import MsprobeError, cannot_write
from msprobe.formats import accuracy_csv as ac

RESULT_NAME = "api_precision_compare_result_{ts}.csv"
DETAILS_NAME = "api_precision_compare_details_{ts}.csv"
HTML_NAME = "api_precision_compare_report_{ts}.html"
MARKDOWN_NAME = "api_precision_compare_report_{ts}.md"


@dataclass(frozen=True)
class CompareOutcome:
    """What ``run_compare`` wrote and found."""

    result_csv: Path
    details_csv: Path
    report_html: Path
    report_md: Path
    api_counts: dict[str, int]  # result rows by overall verdict: pass / error / missing / SKIP
    row_counts: dict[str, int]  # details rows by 比对结果
    flagged: int  # paired rows whose dtype or shape differ between the sides
    warning: str = ""  # no rows, details of different runs, or a --dump of another run (why), or ""
    failing_apis: tuple[str, ...] = ()  # APIs judged error, worst first (the report's first ones)
    routing: str = "8.1.1"  # the replays' routing of float outputs to standards, read off the files

    @property
    def paths(self) -> tuple[Path, Path, Path, Path]:
        """Every file written, in the order they are printed."""
        return (self.result_csv, self.details_csv, self.report_html, self.report_md)

    @property
    def counts(self) -> dict[str, int]:
        """APIs by overall verdict (``api_counts``), the numbers the command line prints."""
        return self.api_counts

    @property
    def failed(self) -> bool:
        return self.api_counts.get("error", 0) > 0


def write_csvs(analysis: Analysis, result_csv: Path, details_csv: Path) -> None:
    _write_frame(details_csv, analysis.details, ac.COMPARE_DETAILS_HEADER)
    _write_frame(result_csv, analysis.results, ac.COMPARE_RESULT_HEADER)


def _write_frame(path: Path, frame: pd.DataFrame, header: Sequence[str]) -> None:
    ac.write_text_columns(path, header, [frame[c].to_numpy(dtype=object).tolist() for c in header])


def output_paths(out_dir: Path, ts: str) -> tuple[Path, Path, Path, Path]:
    result, details, html, md = (
        out_dir / name.format(ts=ts) for name in (RESULT_NAME, DETAILS_NAME, HTML_NAME, MARKDOWN_NAME)
    )
    return result, details, html, md


def run_compare(
    npu_csv: str | os.PathLike[str],
    gpu_csv: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    dump_dir: str | os.PathLike[str] | None = None,
    ts: str | None = None,
) -> CompareOutcome:
    """Compare an NPU and a GPU ``accuracy_checking_details`` CSV into ``out_dir``.

    Writes ``api_precision_compare_{result,details}_{ts}.csv`` (upstream's columns and encoding) and
    ``api_precision_compare_report_{ts}.{html,md}``; ``dump_dir`` (a dump root or a rank folder) adds
    each failing API's call stack from ``stack.json`` to the reports. Raises ``MsprobeError`` on bad
    input, before writing anything.
    """
    from msprobe.compare.report import build_report, render_html, render_markdown

    analysis = analyse(load_details(npu_csv), load_details(gpu_csv))
    report = build_report(analysis, Path(dump_dir) if dump_dir is not None else None)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise MsprobeError(f"{out}: not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    # every name created now, exclusively: a compare started in the same second takes the next one
    paths = output_paths(out, timestamps.claim(lambda ts: output_paths(out, ts), ts or timestamps.now()))
    result_csv, details_csv, html, md = paths
    current = out
    try:
        writes: list[tuple[Path, Callable[[Path], None]]] = [
            (details_csv, lambda p: _write_frame(p, analysis.details, ac.COMPARE_DETAILS_HEADER)),
            (result_csv, lambda p: _write_frame(p, analysis.results, ac.COMPARE_RESULT_HEADER)),
            (html, lambda p: ac.write_atomically(p, [render_html(report).encode("utf-8")])),
            (md, lambda p: ac.write_atomically(p, [render_markdown(report).encode("utf-8")])),
        ]
        for current, write in writes:
            write(current)
    except BaseException as exc:  # Ctrl-C or a failed render too: no claimed name is left behind empty
        for path in paths:  # all four or none: a rerun writes a new set
            with suppress(OSError):
                path.unlink()
        if isinstance(exc, OSError):
            raise cannot_write(current, exc) from None
        raise
    return CompareOutcome(
        result_csv=result_csv,
        details_csv=details_csv,
        report_html=html,
        report_md=md,
        api_counts=analysis.api_counts(),
        row_counts=analysis.row_counts(),
        flagged=int((analysis.details["_flag"] != "").sum()),
        warning=report.warning,
        failing_apis=tuple(api.name for api in report.failing),
        routing=analysis.routing,
    )
