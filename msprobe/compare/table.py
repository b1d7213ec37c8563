"""Loading one ``accuracy_checking_details`` CSV: the only place compare reads its input files.

The header must be exactly the run_ut details header (``accuracy_csv.read_rows`` refuses anything else
in one line and names the kind of file it got), so nothing is computed on a wrong file.
"""

from __future__ import annotations

import csv
import os
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from msprobe.compare.cells import numeric_column
from msprobe.errors import MsprobeError
from msprobe.formats import accuracy_csv as ac

NAME = ac.API_NAME
COLUMNS = ac.RUN_UT_DETAILS_HEADER[1:]
LINE = "line"
"""Extra column: the row's line in its file (header = line 1), -1 until counted (see ``lines_of``)."""


@dataclass(frozen=True)
class DetailsTable:
    """One details file: every cell as its text, plus which columns pandas would read as numbers."""

    path: Path
    frame: pd.DataFrame  # columns: API Name, the 22 others, "line"
    # the rows of the replay's result CSV beside it (same timestamp), None without one
    replay_results: list[list[str]] | None = None
    replay_results_problem: str = ""  # why that result CSV could not be read ("" if it could or is absent)

    def __len__(self) -> int:
        return len(self.frame)

    @cached_property
    def numeric(self) -> frozenset[str]:
        """The columns pandas would read as numbers, found on first use (compare asks the NPU side only)."""
        return frozenset(c for c in COLUMNS if len(self.frame) and numeric_column(self.frame[c]))


def load_details(path: str | os.PathLike[str]) -> DetailsTable:
    """Read and check a details CSV; refuse a wrong file with a one-line ``MsprobeError``.

    The header is checked first (csv module); the body is read by pandas' C parser, every cell as text.
    Row lines are only needed to name duplicates, so they are counted lazily (:func:`lines_of`).
    """
    path = Path(path)
    _check_columns(path)
    ac.check_header(path, ac.RUN_UT_DETAILS_HEADER)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # pandas only warns when the first row has too many cells
            frame = pd.read_csv(
                path,
                dtype=object,
                keep_default_na=False,
                na_filter=False,
                encoding="utf-8-sig",
                index_col=False,
            )
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, Warning) as exc:
        raise MsprobeError(f"{path}: malformed CSV ({str(exc).strip().splitlines()[-1]})") from None
    frame = frame.astype(object)  # without NA filtering pandas gives text only ("" in a short row)
    if len(frame) and (frame.iloc[:, -1] == "").any():
        # pandas pads a short row with "" (run_ut writes blanks as " "): a row without its last cell
        # may be a file cut mid-row; the csv reader refuses such a row naming its line.
        ac.read_rows_with_lines(path, ac.RUN_UT_DETAILS_HEADER)
    frame.columns = list(ac.RUN_UT_DETAILS_HEADER)
    _refuse_unsafe_names(path, frame)
    frame[LINE] = -1
    results, problem = _replay_results(path)
    return DetailsTable(path=path, frame=frame, replay_results=results, replay_results_problem=problem)


def _replay_results(details: Path) -> tuple[list[list[str]] | None, str]:
    """The rows of the ``accuracy_checking_result`` CSV the replay wrote with ``details`` (the same
    timestamp, in the same folder): they name the APIs judged without any details row. None when the
    details file has another name or its result file is not there (copied alone); None and why when it
    is damaged (the details file alone is compared, as 8.1.1). A last row that a killed replay cut
    short is no row (a cut ``error`` is no verdict)."""
    m = ac.RUN_UT_DETAILS_NAME.match(details.name)
    result = details.with_name(ac.run_ut_result_name(m.group(1))) if m else None
    if result is None or not result.is_file():
        return None, ""
    try:
        return ac.read_appended_rows(result, ac.RUN_UT_RESULT_HEADER)[0], ""
    except MsprobeError as exc:
        return None, (
            f"{exc}; the APIs it alone lists (judged without output rows: a dropout, a skipped API) are "
            "not in this compare"
        )


def _refuse_unsafe_names(path: Path, frame: pd.DataFrame) -> None:
    """Refuse a row whose ``API Name`` a spreadsheet would run as a formula (``=...``, ``+...``, ...) or
    that holds a control character (:func:`~msprobe.formats.accuracy_csv.unsafe_name`).

    compare copies names into its CSVs; run_ut refuses to replay such a name and never writes one (every
    real name starts with its API prefix), so such a row is a hand-made or tampered file: it is named, not
    dropped and not written.
    """
    names = frame[NAME].tolist()
    unsafe = [(row, why) for row, why in enumerate(map(ac.unsafe_name, names)) if why]
    if not unsafe:
        return
    first, why = unsafe[0]
    line = ac.read_rows_with_lines(path, ac.RUN_UT_DETAILS_HEADER)[1][first]
    more = len(unsafe) - 1
    others = f" (and {more} more such row{'s' if more > 1 else ''})" if more else ""
    raise MsprobeError(
        f"{path}:{line}: API Name {names[first]!r} {why}; "
        f"refusing to compare it or write it into a CSV{others}"
    )


def _check_columns(path: Path) -> None:
    """Refuse a details file that lacks columns (or has others), naming them; other header problems
    (no such file, another kind of CSV, an empty file) are left to ``accuracy_csv.check_header``."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            first = next(csv.reader(fh), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return
    header = ac.RUN_UT_DETAILS_HEADER
    if first is None or tuple(first) == header or tuple(first) in ac.KNOWN_HEADERS or NAME not in first:
        return
    missing = [c for c in header if c not in first]
    if len(missing) > len(header) // 2:  # not a details file at all: said by check_header
        return
    extra = [c for c in first if c not in header]
    problems = [f"missing column(s) {', '.join(map(repr, missing))}"] if missing else []
    problems += [f"unexpected column(s) {', '.join(map(repr, extra))}"] if extra else []
    if not problems:
        problems = ["its columns are in another order"]
    raise MsprobeError(f"{path}: not a complete accuracy_checking_details CSV: {'; '.join(problems)}")


def lines_of(table: DetailsTable) -> list[int]:
    """Each row's file line (header = line 1; quoted cells may span lines)."""
    if (table.frame[LINE] >= 0).all():
        return [int(x) for x in table.frame[LINE]]
    return ac.read_rows_with_lines(table.path, ac.RUN_UT_DETAILS_HEADER)[1]


def from_frame(frame: pd.DataFrame, path: str = "<memory>") -> DetailsTable:
    """A table from an in-memory frame of text cells (tests, benchmarks); lines are counted from 2."""
    frame = frame.reset_index(drop=True).copy()
    frame[LINE] = range(2, len(frame) + 2)
    return DetailsTable(path=Path(path), frame=frame)
