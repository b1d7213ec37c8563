"""The second that names a run's output files (``accuracy_checking_result_20261207045903.csv``), claimed.

Replay and compare name their outputs after the second they start, as upstream 8.1.1 does. Two runs
started in the same second into one folder must not pick the same names: each run creates its files
exclusively (:func:`claim`), and a run that finds a name taken tries the next second. Imports no torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from msprobe.errors import cannot_write

FORMAT = "%Y%m%d%H%M%S"


def now() -> str:
    return time.strftime(FORMAT)


def next_second(ts: str) -> str:
    """The timestamp one second after ``ts`` (``...0959`` is followed by ``...1000``)."""
    return time.strftime(FORMAT, time.localtime(time.mktime(time.strptime(ts, FORMAT)) + 1))


def claim(names_at: Callable[[str], Sequence[Path]], ts: str) -> str:
    """The first timestamp from ``ts`` on whose files ``names_at(ts)`` are all free, claimed: each is
    created now, empty and exclusively, for the caller to fill. Their folders must exist."""
    while True:
        claimed: list[Path] = []
        path = Path()
        try:
            for path in names_at(ts):
                with open(path, "x", encoding="utf-8"):
                    claimed.append(path)
            return ts
        except FileExistsError:
            for taken in claimed:
                taken.unlink(missing_ok=True)
            ts = next_second(ts)
        except OSError as exc:
            for taken in claimed:
                taken.unlink(missing_ok=True)
            raise cannot_write(path, exc) from None
