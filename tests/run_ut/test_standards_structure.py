"""Structure rules, skip rows and the result row."""

from __future__ import annotations

import pytest
import torch

from msprobe.formats.accuracy_csv import RUN_UT_DETAILS_HEADER, format_cell
from msprobe.run_ut.standards import (
    ERROR,
    PASS,
    SKIP,
    WARNING,
    DetailsRow,
    backward_skip_rows,
    compare_outputs,
    result_row,
    skip_rows,
)
from msprobe.run_ut.standards import messages as msg

X = torch.tensor([1.0, 2.0, 3.0])


def test_tuple_outputs_give_one_row_each() -> None:
    rows = compare_outputs("Torch.max.0", "forward", (X.double(), torch.tensor([2])), (X, torch.tensor([2])))
    assert [r.name for r in rows] == ["Torch.max.0.forward.output.0", "Torch.max.0.forward.output.1"]
    assert [r.status for r in rows] == [PASS, PASS]


def test_device_list_is_truncated_to_bench_length() -> None:
    rows = compare_outputs("Torch.f.0", "backward", [X.double()], [X, X])
    assert [r.name for r in rows] == ["Torch.f.0.backward.output.0"]


def test_bench_longer_than_device_is_a_structure_error() -> None:
    rows = compare_outputs("Torch.f.0", "forward", [X.double(), X.double()], [X])
    assert [(r.name, r.status, r.message) for r in rows] == [
        ("Torch.f.0.forward.output.0", ERROR, msg.STRUCTURE_DIFFERENT)
    ]


def test_none_bench_is_skip_and_counts_as_pass() -> None:
    rows = compare_outputs("Functional.conv2d.0", "backward", [None, X.double()], [None, X])
    assert rows[0].status == SKIP and rows[0].message == msg.BENCH_NONE
    assert all(c in (None, rows[0].name, SKIP, msg.BENCH_NONE) for c in rows[0].cells())
    assert result_row("Functional.conv2d.0", rows, rows) == ["Functional.conv2d.0", PASS, PASS]


@pytest.mark.parametrize(
    ("bench", "device", "message"),
    [
        (X.double(), 3, msg.TYPE_DIFFERENT),
        ({"a": X}, {"b": X}, msg.DICT_KEYS_DIFFERENT),
        ({"a": X.double()}, {"a": X}, "Unexpected output type in compare_core: <class 'list'>"),
        ([[X]], [[X]], "Unexpected output type in compare_core: <class 'list'>"),
        (torch.float32, torch.float32, "Unexpected output type in compare_core: <class 'torch.dtype'>"),
    ],
)
def test_element_errors(bench: object, device: object, message: str) -> None:
    (row,) = compare_outputs("Torch.f.0", "forward", bench, device)
    assert (row.status, row.message) == (ERROR, message)
    assert row.reason == f"Torch.f.0.forward.output.0: {message}"


@pytest.mark.parametrize(
    ("bench", "device", "status"), [(3, 3, PASS), (3, 4, ERROR), (1.5, 1.5, PASS), ("a", "a", PASS)]
)
def test_builtin_outputs(bench: object, device: object, status: str) -> None:
    (row,) = compare_outputs("Tensor.size.0", "forward", bench, device)
    cells = [format_cell(v) for v in row.cells()]
    assert row.status == status
    assert cells[1:4] == [str(type(bench)), str(type(bench)), " "]
    assert cells[9] == ("0" if status == PASS else " ")


def test_builtin_nan_equals_nan() -> None:
    (row,) = compare_outputs("Tensor.item.0", "forward", float("nan"), float("nan"))
    assert row.status == PASS


def test_dropout_rule_writes_no_row_but_decides() -> None:
    b = torch.ones(1000, dtype=torch.float64)
    same = torch.ones(1000)
    (ok,) = compare_outputs("Functional.dropout.0", "forward", b, same)
    assert (ok.status, ok.written) == (PASS, False)
    half = torch.ones(1000)
    half[:500] = 0
    (bad,) = compare_outputs("Functional.dropout.0", "forward", b, half)
    assert (bad.status, bad.written) == (ERROR, False)
    assert "zero-fraction gap 0.5" in bad.reason
    (small,) = compare_outputs("Functional.dropout.0", "forward", b[:99], half[:99])
    assert small.status == PASS  # numel < 100 passes
    (grad,) = compare_outputs("Functional.dropout.0", "backward", [b, None], [half, None])
    assert grad.status == ERROR  # backward: grad[0] only


def test_cells_are_23_in_header_order() -> None:
    (row,) = compare_outputs("Functional.softmax.0", "forward", X.double(), X)
    cells = row.cells()
    assert len(cells) == len(RUN_UT_DETAILS_HEADER) == 23
    assert cells[0] == "Functional.softmax.0.forward.output.0"
    assert cells[-2:] == [PASS, row.message]


def test_cells_reject_unknown_metric_column() -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        DetailsRow(name="x", status=PASS, metrics={"cosine": 1.0}).cells()


def test_direction_is_checked() -> None:
    with pytest.raises(ValueError, match="direction"):
        compare_outputs("Torch.f.0", "sideways", X, X)  # type: ignore[arg-type]


# --- result rows -------------------------------------------------------------------------


def _row(status: str, message: str = "") -> DetailsRow:
    return DetailsRow(name="n", status=status, message=message)


def test_skip_rows_and_their_result_row() -> None:
    rows = skip_rows("Torch.empty_like.0", "API empty_like in black list or not in white list. SKIP.")
    assert [format_cell(v) for v in rows[0].cells()] == (
        ["Torch.empty_like.0.forward.output.0"] + [" "] * 20 + [SKIP, rows[0].message]
    )
    assert result_row("Torch.empty_like.0", rows, None) == ["Torch.empty_like.0", SKIP, SKIP, rows[0].message]


def test_backward_message_makes_backward_skip() -> None:
    back = backward_skip_rows("Torch.max.0", "Multiple backward is not supported.")
    assert back[0].name == "Torch.max.0.backward.output.0"
    assert result_row("Torch.max.0", [_row(PASS)], back) == [
        "Torch.max.0",
        PASS,
        SKIP,
        "Multiple backward is not supported.",
    ]


@pytest.mark.parametrize(
    ("forward", "backward", "expected"),
    [
        ([PASS], None, [PASS, " "]),
        ([PASS], [], [PASS, " "]),
        ([PASS, WARNING], [PASS], [WARNING, PASS]),
        ([WARNING, ERROR], [WARNING], [ERROR, WARNING]),
        ([SKIP, PASS], [SKIP], [PASS, PASS]),
    ],
)
def test_result_row_aggregation(forward: list[str], backward: list[str] | None, expected: list[str]) -> None:
    back = None if backward is None else [_row(s) for s in backward]
    assert result_row("A.b.0", [_row(s) for s in forward], back) == ["A.b.0", *expected]
