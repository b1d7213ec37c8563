"""``x[i] = v`` (``Tensor.__setitem__``) returns None: what it computes is its write into ``x``, which is
what the replay compares (8.1.1 compares the None: "Bench output is None", a row no device can fail)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from replay_dumps import forward, scalar, tensor
from test_replay_api_table import details, run

from msprobe.run_ut.records import ApiRecord
from msprobe.run_ut.replay import replay

WRONG_WRITE_CONFTEST = """
import torch


def pytest_msprobe_device_function(api_type, bare_name, function):
    if bare_name != "__setitem__":
        return None

    def wrong_write(x, key, value):  # writes 1% too much into x, returns None as torch does
        with torch.no_grad():
            function(x, key, value * 1.01)

    return wrong_write
"""


def test_a_wrong_write_through_setitem_is_an_error(pytester: pytest.Pytester) -> None:
    target = tensor("torch.float32", [6, 8], -4.0, 4.0)
    data = {
        "Tensor.__setitem__.0.forward": forward(
            target, scalar("int", 2), tensor("torch.float32", [8], 1.0, 4.0)
        ),
        "Tensor.__setitem__.1.forward": forward(
            target, tensor("torch.int64", [3], 0, 5), tensor("torch.float32", [3, 8], 1.0, 4.0)
        ),
    }
    _, rows = run(pytester, data)
    assert {name: row[1] for name, row in rows.items()} == {
        "Tensor.__setitem__.0": "pass",
        "Tensor.__setitem__.1": "pass",
    }
    row = details(pytester)["Tensor.__setitem__.0.forward.output.0"]
    assert row["Shape"] == "(6, 8)" and row["Status"] == "pass", row  # the written tensor, compared
    pytester.makeconftest(WRONG_WRITE_CONFTEST)
    shutil.rmtree(pytester.path / "out")
    _, rows = run(pytester, data)
    assert {name: row[1] for name, row in rows.items()} == {
        "Tensor.__setitem__.0": "error",
        "Tensor.__setitem__.1": "error",
    }


def _write_record(dtype: str, value: float) -> ApiRecord:
    return ApiRecord(
        "Tensor.__setitem__.0",
        0,
        forward(tensor(dtype, [6, 8], -4.0, 4.0), scalar("int", 2), scalar("float", value), output=[None]),
        None,
    )


def _wrong_write(func: Any) -> Any:
    def wrong_write(x: torch.Tensor, key: Any, value: Any) -> None:  # 1% too much, as torch returns None
        func(x, key, value * 1.01)

    return wrong_write


def test_a_write_beyond_the_range_of_x_is_the_inf_every_device_writes(tmp_path: Path) -> None:
    """An fp16 ``scores[mask] = -1e9`` writes ``-inf`` (torch converts the scalar into fp16 without a
    word): the upcast bench wrote ``-1e9`` into its float32 copy of ``x``, and a faultless device got
    an inf/nan ``error``. The bench holds what it wrote rounded to ``x``'s dtype; a wrong write stays
    an error."""
    for dtype, value in (("torch.float16", -1e9), ("torch.bfloat16", 0.3), ("torch.float16", 0.3)):
        result = replay(_write_record(dtype, value), tmp_path, "cpu")
        assert result.result[1] == "pass", (dtype, value, result.reason)
        wrong = replay(_write_record(dtype, 2.5), tmp_path, "cpu", device_function=_wrong_write)
        assert wrong.result[1] == "error", (dtype, wrong.reason)
