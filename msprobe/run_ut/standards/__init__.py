"""Metric and precision-standard engine of run_ut. Public interface.

Everything the replay plugin needs is here; the rest of the package is internal::

    compare_outputs(api_name, direction, bench_output, device_output, *, routing="8.1.1", info=None)
        -> list[DetailsRow]
    skip_rows(api_name, reason) -> list[DetailsRow]
    backward_skip_rows(api_name, message) -> list[DetailsRow]
    at_noise_floor(rows, bench_output, device_output, floor_output) -> list[DetailsRow]
    drawn_overflow(rows, bench_output, device_output, recorded_outputs) -> list[DetailsRow]
    result_row(api_name, forward_rows, backward_rows) -> list
    standard_for(api_name, routing="8.1.1", info=None) -> Standard

Write ``[r.cells() for r in rows if r.written]`` to the details CSV (only the dropout verdict has
``written=False``: upstream never writes it, but it decides the API status) and ``result_row(...)``
to the result CSV, each through ``accuracy_csv.format_cell``. Rules of upstream
msprobe 8.1.1; see ``docs/standards.md``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Literal

from msprobe.formats.record_names import output_row_index
from msprobe.run_ut.api_info import ApiInfo
from msprobe.run_ut.standards.routing import (
    DEFAULT_ROUTING,
    POLICIES,
    Standard,
    bare_name,
    scoring_for,
    standard_for,
)
from msprobe.run_ut.standards.rows import ERROR, PASS, SKIP, WARNING, DetailsRow, aggregate, result_row
from msprobe.run_ut.standards.structure import compare_structure
from msprobe.run_ut.standards.tensor import at_noise_floor as _at_noise_floor
from msprobe.run_ut.standards.tensor import overflows_alone

__all__ = [
    "DEFAULT_ROUTING",
    "ERROR",
    "PASS",
    "POLICIES",
    "SKIP",
    "WARNING",
    "DetailsRow",
    "Standard",
    "aggregate",
    "at_noise_floor",
    "backward_skip_rows",
    "bare_name",
    "compare_outputs",
    "drawn_overflow",
    "result_row",
    "skip_rows",
    "standard_for",
]


def compare_outputs(
    api_name: str,
    direction: Literal["forward", "backward"],
    bench_output: Any,
    device_output: Any,
    *,
    routing: str = DEFAULT_ROUTING,
    info: ApiInfo | None = None,
) -> list[DetailsRow]:
    """Rows ``{api_name}.{direction}.output.{i}`` for one direction of one API.

    ``bench_output``: the CPU upcast benchmark result (tensor, tuple/list, Python scalar, None; for
    backward the list of input grads). ``device_output``: the device result moved to CPU in its own
    dtype, same structure. Full names containing ``dropout`` get the zero-fraction rule (one row,
    ``written=False``). ``routing``: ``"8.1.1"`` (default, normative) or ``"26.x"`` (every float
    output scored by the benchmark standard, as 26.x does), see ``routing.POLICIES``. ``info``: the
    API's table entry (its standard and tolerances) when the caller has it; else it is looked up by name.
    """
    if direction not in ("forward", "backward"):
        raise ValueError(f"direction must be 'forward' or 'backward', not {direction!r}")
    scoring = scoring_for(api_name, routing, info)  # refuses an unknown routing before any work
    return compare_structure(api_name, direction, bench_output, device_output, scoring)


def skip_rows(api_name: str, reason: str) -> list[DetailsRow]:
    """The one ``{api}.forward.output.0`` SKIP row of a skipped API; its result row is
    ``[api, SKIP, SKIP, reason]``."""
    name = f"{api_name}.forward.output.0"
    return [DetailsRow(name=name, status=SKIP, message=reason, reason=reason, skips_api=True)]


def backward_skip_rows(api_name: str, message: str) -> list[DetailsRow]:
    """The one ``{api}.backward.output.0`` SKIP row that replaces all backward rows when a backward
    message applies (``out=``, repeat_interleave, masked_select, multiple backward)."""
    name = f"{api_name}.backward.output.0"
    return [DetailsRow(name=name, status=SKIP, message=message, reason=message, skips_api=True)]


def _element(output: Any, index: int) -> Any:
    if isinstance(output, (list, tuple)):
        return output[index] if index < len(output) else None
    return output if index == 0 else None


def at_noise_floor(
    rows: list[DetailsRow], bench_output: Any, device_output: Any, floor_output: Any
) -> list[DetailsRow]:
    """``rows`` of :func:`compare_outputs` with each ``error`` of a near-zero output re-judged by its
    noise floor (``floor_output``: ``|bench' - bench|`` per output, same structure as the bench,
    ``bench'`` run on inputs perturbed by one ulp; see ``thresholds.NoiseFloor``). Unwritten
    (dropout) rows and rows whose output has no floor keep their verdict."""
    out = []
    for row in rows:
        index = output_row_index(row.name)
        floor = _element(floor_output, index) if row.written and index is not None else None
        if floor is None or index is None:
            out.append(row)
            continue
        bench, device = _element(bench_output, index), _element(device_output, index)
        out.append(_at_noise_floor(row, bench, device, floor) if bench is not None else row)
    return out


DRAWN_OVERFLOW = (
    "inputs drawn from the dump's statistics overflow {dtype} on the device where the recorded call's "
    "outputs were finite: no precision verdict (dump with task tensor to replay the real inputs)"
)


def drawn_overflow(
    rows: list[DetailsRow], bench_output: Any, device_output: Any, recorded_outputs: Any
) -> list[DetailsRow]:
    """``rows`` of a direction replayed on inputs all drawn from statistics, with an ``error`` made
    the direction's SKIP when the record's own outputs (``recorded_outputs``: the record's ``output``
    descriptions) were all finite and the device's inf or NaN lies only where the benchmark's value is
    itself beyond the dtype's range. Drawn uniformly between Min and Max, inputs such as the
    loss-scaled fp16 gradients of a GradScaler run sum past the dtype's range where the real values did
    not: that overflow says nothing of the API's precision. Any other error of the direction keeps
    every row as it was."""
    if not _all_finite(recorded_outputs):
        return rows
    out = []
    for row in rows:
        index = output_row_index(row.name)
        if row.status == ERROR and row.written and index is not None:
            device = _element(device_output, index)
            if overflows_alone(_element(bench_output, index), device):
                message = DRAWN_OVERFLOW.format(dtype=str(device.dtype).removeprefix("torch."))
                row = replace(row, status=SKIP, message=message, reason=message, skips_api=True)
        out.append(row)
    if any(row.status == ERROR for row in out):
        return rows  # another output's error is a verdict of its own: the drawn overflow hides nothing
    return out


def _all_finite(recorded: Any) -> bool:
    """Every float tensor description in ``recorded`` has finite Max and Min (and there is one)."""
    found = False
    stack = [recorded]
    while stack:
        value = stack.pop()
        if isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, dict):
            if "Max" in value or "Min" in value:
                if "float" not in str(value.get("dtype", "")):
                    continue
                for key in ("Max", "Min"):
                    number = value.get(key)
                    if not isinstance(number, int | float) or not math.isfinite(number):
                        return False  # absent, null, a string, inf or NaN: not known finite
                found = True
            else:
                stack.extend(value.values())
    return found
