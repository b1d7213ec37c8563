"""Compare stage: NPU vs GPU details CSVs -> per-API verdicts and a report.

``run_compare(npu_csv, gpu_csv, out_dir, dump_dir=None) -> CompareOutcome`` is the entry point for
other code (``msprobe demo``); the command line is :mod:`msprobe.compare.cli`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from msprobe.compare.run import CompareOutcome, run_compare

__all__ = ["CompareOutcome", "run_compare"]


def __getattr__(name: str) -> Any:  # lazy: importing the package costs no pandas
    if name in __all__:
        from msprobe.compare import run

        return getattr(run, name)
    raise AttributeError(name)
