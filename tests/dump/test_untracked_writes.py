"""Writes that bump no version counter of the tensor itself: a fused optimizer step, GradScaler's
unscale, a write through a ``.data`` alias. The dump must describe every tensor as it is when
recorded, never as it was when first summarised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

from msprobe.dump.pytorch.stats import _LAYOUT_MIN_NUMEL
from tests.dump.conftest import load_dump


def _torch_stats(t: torch.Tensor) -> list[float]:
    d = t.detach()
    return [d.max().item(), d.min().item(), d.mean().item(), torch.linalg.vector_norm(d).item()]


def _stats(summary: dict[str, Any]) -> list[float]:
    return [summary["Max"], summary["Min"], summary["Mean"], summary["Norm"]]


def _step_data(tmp_path: Path, step: int) -> dict[str, Any]:
    return load_dump(tmp_path / "dump" / f"step{step}" / "rank")["data"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_a_fused_optimizer_step_is_seen_by_the_next_steps_records(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """torch's fused AdamW writes the parameters without bumping their version counters (the
    default optimizer of transformers' Trainer)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8))  # the root module gets no record of its own
    lin = model[0]
    opt = torch.optim.AdamW(lin.parameters(), lr=0.1, fused=True)
    dbg = debugger(level=level)
    truth = []
    for _ in range(3):
        truth.append(lin.weight.detach().clone())
        version = lin.weight._version
        dbg.start(model=model)
        model(torch.ones(2, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        dbg.stop()
        dbg.step()
        assert lin.weight._version == version  # the write this test is about: no bump
    assert not torch.equal(truth[0], truth[1])
    for step, weight in enumerate(truth):
        data = _step_data(tmp_path, step)
        assert _stats(data["Functional.linear.0.forward"]["input_args"][1]) == _torch_stats(weight)
        if level == "mix":
            parameter = data["Module.0.Linear.forward.0"]["parameters"]["weight"]
            assert _stats(parameter) == _torch_stats(weight)


def test_gradscaler_unscale_is_seen_by_the_records_after_it(tmp_path: Path, debugger: Any) -> None:
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    dbg = debugger(level="L1")
    dbg.start()
    scaler.scale(lin(torch.ones(2, 8)).sum()).backward()
    grad = lin.weight.grad
    assert grad is not None
    torch.abs(grad)
    scaled = grad.clone()
    scaler.unscale_(opt)
    torch.abs(grad)
    dbg.stop()
    dbg.step()
    data = _step_data(tmp_path, 0)
    assert _stats(data["Torch.abs.0.forward"]["input_args"][0]) == _torch_stats(scaled)
    assert _stats(data["Torch.abs.1.forward"]["input_args"][0]) == _torch_stats(grad)
    assert _torch_stats(grad) != _torch_stats(scaled)


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_write_through_a_data_alias_is_seen_by_the_records_after_it(
    tmp_path: Path, debugger: Any, task: str
) -> None:
    """``p.data`` has a version counter of its own: writing it leaves ``p``'s as it was."""
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    alias = lin.weight.data  # taken before the window, written inside it (an EMA, a manual update)
    dbg = debugger(level="L1", task=task)
    dbg.start()
    lin(torch.ones(2, 8))
    before = lin.weight.detach().clone()
    alias.mul_(3.0)
    lin(torch.ones(2, 8))
    dbg.stop()
    dbg.step()
    data = _step_data(tmp_path, 0)
    first = data["Functional.linear.0.forward"]["input_args"][1]
    second = data["Functional.linear.1.forward"]["input_args"][1]
    assert _stats(first) == _torch_stats(before)
    assert _stats(second) == _torch_stats(lin.weight)
    if task == "tensor":
        files = tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data"
        assert first["data_name"] != second["data_name"]
        assert torch.equal(torch.load(files / first["data_name"], weights_only=True), before)
        assert torch.equal(torch.load(files / second["data_name"], weights_only=True), lin.weight.detach())


def test_a_write_between_two_windows_of_one_step_is_seen(tmp_path: Path, debugger: Any) -> None:
    """Micro-batches, each in its own start()/stop(), one step(): what happens between the windows
    is not seen, so nothing remembered from the first window is trusted in the second."""
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    dbg = debugger(level="L1", task="tensor")
    seen = []
    for _ in range(2):
        dbg.start()
        lin(torch.ones(2, 8))
        dbg.stop()
        seen.append(lin.weight.detach().clone())
        lin.weight.data.add_(1.0)
    dbg.step()
    data = _step_data(tmp_path, 0)
    files = tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data"
    first = data["Functional.linear.0.forward"]["input_args"][1]
    second = data["Functional.linear.1.forward"]["input_args"][1]
    assert first["Max"] + 1.0 == pytest.approx(second["Max"])
    assert second["data_name"] != first["data_name"]
    saved = torch.load(files / second["data_name"], weights_only=True)
    assert torch.equal(saved, seen[1]) and not torch.equal(saved, seen[0])


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_write_hidden_by_a_preserved_version_counter_is_seen(
    tmp_path: Path, debugger: Any, task: str
) -> None:
    """FSDP2 fills each parameter's ``torch.empty`` buffer with an op the dump does not record and
    sets the buffer's version counter back (``_unsafe_preserve_version_counter``): the parameter's
    records show its values, not the empty buffer's remembered summary."""
    n = _LAYOUT_MIN_NUMEL  # a size whose summary the dump remembers
    values = torch.linspace(-1.0, 2.0, n)
    dbg = debugger(level="L1", task=task)
    dbg.start()
    buf = torch.empty(n)
    with torch.autograd._unsafe_preserve_version_counter(buf):
        torch.ops.aten.copy_.default(buf, values)  # an operator call: not recorded
    torch.relu(buf.view(-1, 64))
    dbg.stop()
    dbg.step()
    seen = _step_data(tmp_path, 0)["Torch.relu.0.forward"]["input_args"][0]
    assert _stats(seen) == _torch_stats(values)


class _TwoLinears(nn.Module):
    def __init__(self, data_write: bool) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.data_write = data_write

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if self.data_write:
            h.data.mul_(3.0)  # a's output, written through an alias: h's own counter unchanged
        return self.b(h)


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_data_alias_write_between_two_modules_is_seen_at_l0(
    tmp_path: Path, debugger: Any, task: str
) -> None:
    """L0 pushes no API tracer: the write must still be seen, or b's input names a's output file."""
    torch.manual_seed(0)
    model = _TwoLinears(data_write=True)
    seen: list[torch.Tensor] = []
    model.b.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach().clone()))
    dbg = debugger(level="L0", task=task)
    dbg.start(model=model)
    model(torch.randn(2, 4))
    dbg.stop()
    dbg.step()
    data = _step_data(tmp_path, 0)
    b_in = data["Module.b.Linear.forward.0"]["input_args"][0]
    assert _stats(b_in) == _torch_stats(seen[0])
    if task == "tensor":
        files = tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data"
        assert torch.equal(torch.load(files / b_in["data_name"], weights_only=True), seen[0])


@pytest.mark.parametrize(
    ("level", "record", "where"),
    [
        ("L1", "Functional.linear.2.forward", ("input_args", 1)),  # the second forward's first linear
        ("L0", "Module.a.Linear.forward.1", ("parameters", "weight")),  # no API seen at L0
    ],
)
def test_a_fused_optimizer_step_inside_the_window_is_seen_by_the_next_forward(
    tmp_path: Path, debugger: Any, level: str, record: str, where: tuple[str, Any]
) -> None:
    """A GAN's discriminator: stepped by fused AdamW (which bumps no version counter), then called
    again in the same window: its weight is summarised and written again, not the stale file named."""
    torch.manual_seed(0)
    model = _TwoLinears(data_write=False)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    dbg = debugger(level=level, task="tensor")
    dbg.start(model=model)
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    model(torch.ones(2, 4))
    dbg.stop()
    dbg.step()
    second = _step_data(tmp_path, 0)[record][where[0]][where[1]]
    assert _stats(second) == _torch_stats(model.a.weight)
    files = tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data"
    assert torch.equal(torch.load(files / second["data_name"], weights_only=True), model.a.weight.detach())


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_swap_tensors_works_on_recorded_tensors_after_the_window(debugger: Any, level: str) -> None:
    """``torch.utils.swap_tensors`` (``Module.to()`` under ``set_swap_module_params_on_conversion``)
    refuses a tensor with weak references: the dump must not keep any once its window is closed."""
    model = nn.Linear(4, 4)
    dbg = debugger(level=level, task="tensor")
    dbg.start(model=model)
    model(torch.randn(2, 4)).sum().backward()
    dbg.stop()
    torch.utils.swap_tensors(model.weight, nn.Parameter(torch.zeros(4, 4)))
    dbg.step()
    assert torch.equal(model.weight.detach(), torch.zeros(4, 4))
