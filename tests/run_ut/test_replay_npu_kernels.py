"""On an NPU device the fused ops' device side runs the real kernel (torch_npu's), not the CPU reference
the benchmark runs: with the reference on both sides a faulty kernel could never fail."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from replay_dumps import forward, tensor

from msprobe.run_ut import execute, registry
from msprobe.run_ut.records import ApiRecord
from msprobe.run_ut.replay import replay


def _record() -> ApiRecord:
    return ApiRecord(
        "NPU.npu_fast_gelu.0",
        0,
        forward(
            tensor("torch.float32", [8, 16], -2.0, 2.0), output=[tensor("torch.float32", [8, 16], -1.0, 2.0)]
        ),
        None,
    )


def _on_cpu(monkeypatch: pytest.MonkeyPatch, seen: list[Any]) -> None:
    """Run the "npu" device side on the CPU (no card here), remembering the function it was given."""
    real = execute.run_forward

    def run_forward(func: Any, side: execute.Side, *args: Any, **kwargs: Any) -> Any:
        if side.device.startswith("npu"):
            seen.append(func)
            side.device = "cpu"
        return real(func, side, *args, **kwargs)

    monkeypatch.setattr(execute, "run_forward", run_forward)


def test_the_npu_device_side_runs_torch_npus_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = types.ModuleType("torch_npu")

    def npu_fast_gelu(input: torch.Tensor) -> torch.Tensor:  # a faulty kernel: plain gelu
        return torch.nn.functional.gelu(input)

    stub.npu_fast_gelu = npu_fast_gelu  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch_npu", stub)
    seen: list[Any] = []
    _on_cpu(monkeypatch, seen)
    result = replay(_record(), tmp_path, "npu")
    assert seen == [npu_fast_gelu]
    assert result.result[1] == "error", result.reason  # the fault is found


def test_a_missing_kernel_is_a_skip_not_the_reference_on_both_sides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    seen: list[Any] = []
    _on_cpu(monkeypatch, seen)
    result = replay(_record(), tmp_path, "npu")
    assert result.outcome == "skipped" and "torch_npu kernel npu_fast_gelu" in result.reason
    assert seen == []


def test_a_mindspeed_record_runs_the_mindspeed_kernel_the_dump_wraps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MindSpeed's ops live in submodules (``mindspeed.ops.fusion_attention_v2``): found as the dump
    finds them, from its API list."""
    calls: list[str] = []
    modules = {name: types.ModuleType(name) for name in ("mindspeed", "mindspeed.ops", "mindspeed.ops.gmm")}
    modules["mindspeed.ops.gmm"].npu_gmm = lambda *a, **k: calls.append("gmm")  # type: ignore[attr-defined]
    for name, module in {**modules, "torch_npu": types.ModuleType("torch_npu")}.items():
        monkeypatch.setitem(sys.modules, name, module)
    kernel = registry.npu_kernel("MindSpeed", "npu_gmm")
    assert callable(kernel) and kernel() is None and calls == ["gmm"]
    assert isinstance(registry.npu_kernel("MindSpeed", "npu_ffn"), str)  # not on this host


def test_other_types_keep_their_function_on_an_npu() -> None:
    assert registry.npu_kernel("Torch", "inv") is None
    assert registry.npu_kernel("Tensor", "add") is None
