"""Loading one ``accuracy_checking_details`` CSV: the only place compare reads its input files.

The header must be exactly the run_ut details header (``accuracy_csv.read_rows`` refuses anything else
in one line and names the kind of file it got), so nothing is computed on a wrong file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from msprobe.compare.cells import numeric_column
from msprobe.formats import accuracy_csv as ac

NAME = ac.RUN_UT_DETAILS_HEADER[0]
COLUMNS = ac.RUN_UT_DETAILS_HEADER[1:]
LINE = "line"
"""Extra column: the row's line number in its file (header = line 1), for messages."""


@dataclass(frozen=True)
class DetailsTable:
    """One details file: every cell as its text, plus which columns pandas would read as numbers."""

    path: Path
    frame: pd.DataFrame  # columns: API Name, the 22 others, "line"
    numeric: frozenset[str]

    def __len__(self) -> int:
        return len(self.frame)


def load_details(path: str | os.PathLike[str]) -> DetailsTable:
    """Read and check a details CSV; refuse a wrong file with a one-line ``MsprobeError``."""
    path = Path(path)
    rows, lines = ac.read_rows_with_lines(path, ac.RUN_UT_DETAILS_HEADER)
    frame = pd.DataFrame(rows, columns=list(ac.RUN_UT_DETAILS_HEADER), dtype=object)
    frame[LINE] = lines
    numeric = frozenset(c for c in COLUMNS if len(frame) and numeric_column(frame[c]))
    return DetailsTable(path=path, frame=frame, numeric=numeric)


def from_frame(frame: pd.DataFrame, path: str = "<memory>") -> DetailsTable:
    """A table from an in-memory frame of text cells (tests, benchmarks); lines are counted from 2."""
    frame = frame.reset_index(drop=True).copy()
    frame[LINE] = range(2, len(frame) + 2)
    numeric = frozenset(c for c in COLUMNS if len(frame) and numeric_column(frame[c]))
    return DetailsTable(path=Path(path), frame=frame, numeric=numeric)
