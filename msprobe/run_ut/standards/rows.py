"""One details row of ``accuracy_checking_details_{ts}.csv`` as a value, and the result-row rule.

Column facts from upstream msprobe 8.1.1. Cell values keep
the Python/numpy type upstream writes (``accuracy_csv.format_cell`` turns float64 into ``%.14f`` and numpy
float32 / ints into ``str()``), so a row is computed once and formatted only at the CSV edge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# the 17 metric columns are re-exported: this package names them ``rows.COSINE``, ...
from msprobe.formats.accuracy_csv import (  # noqa: F401
    ABS_ERR_RATE,
    BINARY_ERR_RATE,
    BLANK,
    COSINE,
    ERROR_BALANCE,
    HUNDREDTH,
    INF_NAN_ERR_RATE,
    MAX_ABS_ERR,
    MAX_REL_ERR,
    MEAN_REL_ERR,
    REL_ERR_RATE,
    RMSE,
    RUN_UT_METRIC_COLUMNS,
    SMALL_VALUE_ERR_RATIO,
    TEN_THOUSANDTH,
    THOUSANDTH,
    ULP_MAX,
    ULP_MEAN,
    ULP_PROPORTION,
)

PASS = "pass"
WARNING = "Warning"  # 8.1.1 spelling
ERROR = "error"
SKIP = "SKIP"

METRIC_COLUMNS: tuple[str, ...] = RUN_UT_METRIC_COLUMNS


@dataclass(frozen=True)
class DetailsRow:
    """One output tensor's verdict.

    ``metrics`` maps a metric column (the constants imported above) to its value; absent = blank cell.
    ``reason`` is one line for a failing/warning pytest item (which output, which metric, value vs
    threshold); empty for pass. ``skips_api`` marks the rows of :func:`skip_rows` /
    :func:`backward_skip_rows`: they make the whole direction ``SKIP`` in the result row,
    whereas an ordinary SKIP row (``None`` output) counts as pass. ``written`` is False only for the
    dropout verdict, which upstream never writes to the details CSV but which still decides
    the API status.
    """

    name: str
    status: str
    message: str = ""
    reason: str = ""
    bench_dtype: str | None = None
    device_dtype: str | None = None
    shape: str | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict, hash=False)
    skips_api: bool = False
    written: bool = True

    def cells(self) -> list[Any]:
        """The 23 values in ``RUN_UT_DETAILS_HEADER`` order (``None`` = blank) for ``format_cell``."""
        unknown = set(self.metrics) - set(METRIC_COLUMNS)
        if unknown:
            raise ValueError(f"{self.name}: unknown metric columns {sorted(unknown)}")
        return [
            self.name,
            self.bench_dtype,
            self.device_dtype,
            self.shape,
            *(self.metrics.get(col) for col in METRIC_COLUMNS),
            self.status,
            self.message,
        ]


def aggregate(rows: Sequence[DetailsRow]) -> str:
    """API status of one direction: error > Warning > pass; ordinary SKIP rows count as pass."""
    statuses = {r.status for r in rows}
    if ERROR in statuses:
        return ERROR
    if WARNING in statuses:
        return WARNING
    return PASS


def result_row(
    api_name: str, forward_rows: Sequence[DetailsRow], backward_rows: Sequence[DetailsRow] | None
) -> list[Any]:
    """The ``accuracy_checking_result`` row: 3 cells, a 4th only when a direction is SKIP.

    The 4th cell is the message of the first forward row that skips the API when forward is SKIP,
    else of the first such backward row. No backward (``None`` or no rows) → ``" "``. A forward SKIP
    makes the backward SKIP too unless the backward was scored and is not a pass (its error stands).
    """
    skipping = next((r for r in forward_rows if r.skips_api), None)
    if skipping is not None:
        # a forward SKIP of a replayed call (drawn inputs that overflow) keeps a backward error
        computed = list(backward_rows or [])
        backward = PASS if any(r.skips_api for r in computed) else aggregate(computed)
        return [api_name, SKIP, backward if backward != PASS else SKIP, skipping.message]
    forward = aggregate(forward_rows)
    if not backward_rows:
        return [api_name, forward, BLANK]
    skipping = next((r for r in backward_rows if r.skips_api), None)
    if skipping is not None:
        return [api_name, forward, SKIP, skipping.message]
    return [api_name, forward, aggregate(backward_rows)]
