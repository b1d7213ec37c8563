"""Complex tensors in replay: a complex output is scored as its real and imaginary parts, the bench
upcasts complex64 to complex128, and complex inputs from tensor files carry their gradients."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from replay_dumps import csv_pair, read_csv

from msprobe.run_ut.draws import random_tensor
from msprobe.run_ut.standards import ERROR, PASS, compare_outputs


def _row(bench: torch.Tensor, device: torch.Tensor) -> tuple[str, str, str]:
    (row,) = compare_outputs("Torch.polar.0", "forward", bench, device)
    return row.status, row.device_dtype, row.shape


def test_a_complex_output_is_scored_by_its_parts() -> None:
    torch.manual_seed(0)
    bench = torch.randn(64, dtype=torch.complex128)
    assert _row(bench, bench.to(torch.complex64)) == (PASS, "torch.complex64", "(64,)")
    wrong = bench.to(torch.complex64) * (1 + 1e-2j)
    assert _row(bench, wrong)[0] == ERROR


def _complex_rotary_step(debugger_root: Path, task: str) -> Path:
    """A Meta-style complex rotary embedding, forward and backward, dumped."""
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()
    try:
        debugger = PrecisionDebugger(dump_path=str(debugger_root), task=task, level="L1")
        torch.manual_seed(0)
        q = torch.randn(2, 8, 16, requires_grad=True)
        angles = torch.randn(8, 8)
        debugger.start()
        cis = torch.polar(torch.ones_like(angles), angles)
        rotated = torch.view_as_real(torch.view_as_complex(q.reshape(2, 8, 8, 2)) * cis)
        rotated.pow(2).sum().backward()
        debugger.stop()
        debugger.step()
    finally:
        PrecisionDebugger._shutdown()
    return debugger_root / "step0" / "rank"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_complex_rotary_replays_without_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], task: str
) -> None:
    """An fp32 dump replayed against the float64/complex128 bench: any error is a false one. A
    statistics record's complex inputs are drawn from the statistics of their magnitudes."""
    dump = _complex_rotary_step(tmp_path / "dump", task)
    out = tmp_path / "out"
    args = ["-q", "-p", "no:cacheprovider", "-W", "ignore", "--rootdir", str(dump), "-n", "0"]
    code = int(pytest.main([*args, "--msprobe-dump", str(dump), "--msprobe-out", str(out)]))
    assert code == 0, capsys.readouterr().out[-2000:]
    result, details = csv_pair(out)
    rows = {row[0]: row for row in read_csv(result)[1:]}
    for name in ("Torch.polar.0", "Torch.view_as_complex.0", "Tensor.__mul__.0", "Torch.view_as_real.0"):
        assert rows[name][1] == "pass", rows[name]
    for name in ("Torch.view_as_complex.0", "Tensor.__mul__.0", "Torch.view_as_real.0"):
        assert rows[name][2] == "pass", rows[name]
    detail = {row[0]: row for row in read_csv(details)[1:]}
    mul_grad = detail["Tensor.__mul__.0.backward.output.0"]
    assert (mul_grad[1], mul_grad[2]) == ("torch.complex128", "torch.complex64")


def test_a_complex_tensor_is_drawn_from_its_magnitudes_statistics() -> None:
    spec = {"type": "torch.Tensor", "dtype": "torch.complex64", "shape": [50], "Max": 3.0, "Min": 0.5}
    t = random_tensor(spec, torch.Generator().manual_seed(0))
    assert t.dtype == torch.complex64 and t.shape == (50,)
    magnitude = t.abs()
    assert torch.isclose(magnitude.max(), torch.tensor(3.0)) and torch.isclose(
        magnitude.min(), torch.tensor(0.5)
    )
    assert t.real.min() < 0 < t.real.max() and t.imag.min() < 0 < t.imag.max()  # angles all around


def test_a_complex_scalar_dumped_as_null_is_a_skip_that_says_so(tmp_path: Path) -> None:
    """The dump writes a Python complex (``z * 2j``) as null, as 8.1.1 does; replayed as None, the
    operator returned NotImplemented, which was scored as a precision error."""
    from replay_dumps import forward, tensor

    from msprobe.run_ut.records import ApiRecord
    from msprobe.run_ut.replay import replay

    z = tensor("torch.complex64", [3, 4], 0.5, 1.0)  # statistics of magnitudes
    for name, args in (("Tensor.__mul__.0", (z, None)), ("Torch.full_like.0", (z, None))):
        result = replay(ApiRecord(name, 0, forward(*args, output=[z]), None), tmp_path, "cpu")
        assert result.outcome == "skipped", (name, result.result)
        assert "a null argument" in result.reason and "complex number" in result.reason, result.reason


def test_the_null_argument_hint_is_not_given_for_an_unrelated_type_error(tmp_path: Path) -> None:
    """``bias=None`` is an ordinary null: a TypeError that is not about a None argument (an unknown
    keyword) was told the record holds a complex number written as null."""
    from replay_dumps import forward, tensor

    from msprobe.run_ut.records import ApiRecord
    from msprobe.run_ut.replay import replay

    x = tensor("torch.float32", [2, 4], -1.0, 1.0)
    w = tensor("torch.float32", [3, 4], -1.0, 1.0)
    fwd = forward(
        x,
        w,
        None,
        no_such_keyword={"type": "int", "value": 1},
        output=[tensor("torch.float32", [2, 3], -1, 1)],
    )
    result = replay(ApiRecord("Functional.linear.0", 0, fwd, None), tmp_path, "cpu")
    assert result.outcome == "skipped" and "no_such_keyword" in result.reason, result.reason
    assert "null argument" not in result.reason
