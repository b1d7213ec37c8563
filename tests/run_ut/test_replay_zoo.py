"""Replays of real transformers training steps on the CPU: fp32 dumps give no error at all (any error
of an fp32-vs-float64 replay is a false one), and an autocast bf16 dump replays in bf16."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from replay_dumps import csv_pair, read_csv

from tests import zoo

zoo.require_transformers()

#: SKIPs that 8.1.1 writes for these models too: ``Tensor.to`` is on the implicit black list, and a
#: tuple output without a gradient index has no backward ("Multiple backward", e.g. ``chunk``).
DOCUMENTED_SKIPS = ("in black list or not in white list", "Multiple backward is not supported.")


@contextlib.contextmanager
def _bf16_autocast_forward(model: torch.nn.Module) -> Iterator[None]:
    original = model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast("cpu", torch.bfloat16):
            return original(*args, **kwargs)

    model.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        model.forward = original  # type: ignore[method-assign]


def _dump(root: Path, name: str, task: str, *, autocast: bool = False) -> Path:
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()
    try:
        debugger = PrecisionDebugger(dump_path=str(root / task), task=task, level="L1")
        model = zoo.build(name)
        with _bf16_autocast_forward(model) if autocast else contextlib.nullcontext():
            zoo.train(name, steps=1, debugger=debugger, model=model)
    finally:
        PrecisionDebugger._shutdown()
    return root / task / "step0" / "rank"


def _replay(
    dump: Path, out: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[list[list[str]], list[list[str]], str]:
    capsys.readouterr()
    args = ["-q", "-p", "no:cacheprovider", "-W", "ignore", "--rootdir", str(dump), "-n", "0"]
    code = int(pytest.main([*args, "--msprobe-dump", str(dump), "--msprobe-out", str(out)]))
    text = capsys.readouterr().out
    assert code in (0, 1), text[-2000:]
    result, details = csv_pair(out)
    return read_csv(result)[1:], read_csv(details)[1:], text


def _summary_matches_pytest(text: str) -> None:
    """The msprobe summary line counts what pytest counts (error = failed, SKIP = skipped)."""
    line = re.search(r"msprobe: \S*accuracy_checking_result_\d+\.csv \(([^)]*)\)", text)
    assert line is not None, text[-600:]
    ours = {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", line.group(1))}
    theirs = {k: int(n) for n, k in re.findall(r"(\d+) (failed|passed|skipped|accuracy-warning)", text)}
    assert ours.get("error", 0) == theirs.get("failed", 0), line.group(0)
    assert ours.get("SKIP", 0) == theirs.get("skipped", 0), line.group(0)
    assert ours.get("pass", 0) + ours.get("Warning", 0) == theirs.get("passed", 0) + theirs.get(
        "accuracy-warning", 0
    ), line.group(0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "bert", "t5", "mixtral"])
def test_fp32_dumps_replay_without_error(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for task in ("statistics", "tensor"):
        dump = _dump(tmp_path / "dump", name, task)
        results, _, text = _replay(dump, tmp_path / f"out_{task}", capsys)
        errors = [r[0] for r in results if "error" in r[1:3]]
        assert errors == [], f"{name} {task}: {errors}"
        odd = [r for r in results if r[1] == "SKIP" or r[2] == "SKIP"]
        assert all(any(why in r[-1] for why in DOCUMENTED_SKIPS) for r in odd), odd
        _summary_matches_pytest(text)


@pytest.mark.slow
def test_autocast_bf16_dump_replays_its_autocast_apis_in_bf16(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for task in ("statistics", "tensor"):
        dump = _dump(tmp_path / "dump", "llama", task, autocast=True)
        results, details, text = _replay(dump, tmp_path / f"out_{task}", capsys)
        linears = [r for r in details if r[0].startswith("Functional.linear.") and ".forward." in r[0]]
        assert linears and all(r[2] == "torch.bfloat16" for r in linears), linears[:2]  # DEVICE Dtype
        odd = [r for r in results if r[1] == "SKIP" or r[2] == "SKIP"]
        assert all(any(why in r[-1] for why in DOCUMENTED_SKIPS) for r in odd), odd  # no mixed-dtype SKIP
        _summary_matches_pytest(text)
