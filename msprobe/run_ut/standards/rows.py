"""One details row of ``accuracy_checking_details_{ts}.csv`` as a value, and the result-row rule.

Column facts from upstream msprobe 8.1.1. Cell values keep
the Python/numpy type upstream writes (``accuracy_csv.format_cell`` turns float64 into ``%.14f`` and numpy
float32 / ints into ``str()``), so a row is computed once and formatted only at the CSV edge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from msprobe.formats.accuracy_csv import BLANK, RUN_UT_DETAILS_HEADER

PASS = "pass"
WARNING = "Warning"  # 8.1.1 spelling
ERROR = "error"
SKIP = "SKIP"

# The 17 metric columns, by the names the rest of this package uses (header text from accuracy_csv).
COSINE = "余弦相似度"
MAX_ABS_ERR = "最大绝对误差"
HUNDREDTH = "双百指标"
THOUSANDTH = "双千指标"
TEN_THOUSANDTH = "双万指标"
BINARY_ERR_RATE = "二进制一致错误率"
ERROR_BALANCE = "误差均衡性"
RMSE = "均方根误差"
SMALL_VALUE_ERR_RATIO = "小值域错误占比"
MAX_REL_ERR = "相对误差最大值"
MEAN_REL_ERR = "相对误差平均值"
INF_NAN_ERR_RATE = "inf/nan错误率"
REL_ERR_RATE = "相对误差错误率"
ABS_ERR_RATE = "绝对误差错误率"
ULP_MAX = "ULP误差最大值"
ULP_MEAN = "ULP误差平均值"
ULP_PROPORTION = "ULP误差大于阈值占比"

METRIC_COLUMNS: tuple[str, ...] = RUN_UT_DETAILS_HEADER[4:21]
assert METRIC_COLUMNS[0] == COSINE and METRIC_COLUMNS[-1] == ULP_PROPORTION, "details header changed"


@dataclass(frozen=True)
class DetailsRow:
    """One output tensor's verdict.

    ``metrics`` maps a metric column (constants above) to its value; absent = blank cell.
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

    The 4th cell is the message of the first forward row when forward is SKIP, else of the first
    backward row when backward is SKIP. No backward (``None`` or no rows) → ``" "``.
    """
    if any(r.skips_api for r in forward_rows):
        return [api_name, SKIP, SKIP, forward_rows[0].message]
    forward = aggregate(forward_rows)
    if not backward_rows:
        return [api_name, forward, BLANK]
    if any(r.skips_api for r in backward_rows):
        return [api_name, forward, SKIP, backward_rows[0].message]
    return [api_name, forward, aggregate(backward_rows)]
