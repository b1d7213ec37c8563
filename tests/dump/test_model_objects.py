"""What model code does to the model while the dump is on: copies and pickles it (an EMA model, a
whole-model checkpoint), scripts part of it, traces it with ``torch.jit.trace``, or changes a
gradient with its own tensor hook."""

from __future__ import annotations

import copy
import io
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

from tests.dump.conftest import load_dump

RANK = Path("dump") / "step0" / "rank"


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))


def _module_records(tmp_path: Path, step: int = 0) -> list[str]:
    data = load_dump(tmp_path / "dump" / f"step{step}" / "rank")["data"]
    return [k for k in data if k.startswith("Module.")]


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_copy_made_while_dumping_is_not_dumped_and_the_model_pickles(
    tmp_path: Path, debugger: Callable[..., Any], level: str
) -> None:
    net, x = _net(), torch.randn(2, 4)
    dbg = debugger(level=level)
    dbg.start(model=net)
    net(x).sum().backward()
    ema = copy.deepcopy(net)  # an EMA model made inside the window
    torch.save(net, io.BytesIO())  # a whole-model checkpoint
    dbg.stop()
    dbg.step()
    dbg.start(model=net)
    with torch.no_grad():
        ema(x)  # the copy runs inside the next window: not the model's calls
    dbg.stop()
    dbg.step()
    torch.save(ema, io.BytesIO())
    assert _module_records(tmp_path, 1) == []
    assert "Module.0.Linear.forward.0" in _module_records(tmp_path, 0)


def test_a_scripted_submodule_is_left_unhooked(tmp_path: Path, debugger: Callable[..., Any]) -> None:
    net = _net()
    net[2] = torch.jit.script(net[2])
    dbg = debugger(level="L0")
    dbg.start(model=net)
    net(torch.randn(2, 4)).sum().backward()
    dbg.stop()
    dbg.step()
    names = _module_records(tmp_path)
    assert "Module.0.Linear.forward.0" in names and "Module.1.Tanh.backward.0" in names
    assert not [n for n in names if n.startswith("Module.2.")]


@pytest.mark.parametrize("level", ["L1", "mix", "L0"])
def test_jit_trace_while_dumping_traces_the_model_alone(
    tmp_path: Path, debugger: Callable[..., Any], level: str
) -> None:
    net, x = _net(), torch.randn(2, 4)
    plain = [n.kind() for n in torch.jit.trace(net, x).inlined_graph.nodes()]
    dbg = debugger(level=level)
    dbg.start(model=net)
    traced = torch.jit.trace(net, x)  # its sanity check reruns the model and compares graphs
    net(x)
    dbg.stop()
    dbg.step()
    assert [n.kind() for n in traced.inlined_graph.nodes()] == plain
    assert torch.equal(traced(x), net(x))
    assert not (tmp_path / RANK / "dump_error_info.log").exists()
    names = list(load_dump(tmp_path / RANK)["data"])
    # the eager calls (the trace's check reruns the model eagerly, then ours) are recorded
    expected = {"L1": ["Functional.linear.1.forward"], "L0": ["Module.2.Linear.forward.1"]}
    for name in expected.get(level, expected["L1"] + expected["L0"]):
        assert name in names


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_module_backward_record_holds_the_gradient_after_the_users_tensor_hook(
    tmp_path: Path, debugger: Callable[..., Any], level: str
) -> None:
    class Reversed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x)
            h.register_hook(lambda g: -0.001 * g)  # a gradient reversal layer's scaling
            return self.b(h)

    torch.manual_seed(0)
    net, x = Reversed(), torch.randn(3, 4, requires_grad=True)
    seen: list[torch.Tensor] = []
    handle = net.a.register_full_backward_hook(lambda m, gi, go: seen.append(go[0].clone()))
    net(x).sum().backward()
    handle.remove()
    dbg = debugger(level=level)
    dbg.start(model=net)
    net(x).sum().backward()
    dbg.stop()
    dbg.step()
    record = load_dump(tmp_path / RANK)["data"]["Module.a.Linear.backward.0"]
    assert record["input"][0]["Max"] == pytest.approx(seen[0].max().item(), rel=1e-6)


@pytest.mark.parametrize("copied", ["inside the window", "after stop()"])
def test_module_dump_of_a_copy_of_a_module_dumped_module_records_the_copy(
    tmp_path: Path, debugger: Callable[..., Any], copied: str
) -> None:
    from msprobe.pytorch import module_dump, module_dump_end

    net, x = _net(), torch.randn(2, 4)
    dbg = debugger(level="L1")
    dbg.start()
    module_dump(net, "student")
    net(x)
    module_dump_end()
    teacher = copy.deepcopy(net) if copied == "inside the window" else None
    dbg.stop()
    teacher = teacher if teacher is not None else copy.deepcopy(net)
    dbg.start()
    module_dump(teacher, "teacher")  # an EMA or teacher copy, dumped under its own name
    teacher(x)
    module_dump_end()
    dbg.stop()
    dbg.step()
    names = _module_records(tmp_path)
    assert "Module.student.Sequential.forward.0" in names
    assert "Module.teacher.Sequential.forward.0" in names


def test_another_model_given_to_a_later_start_is_said_once(
    tmp_path: Path, debugger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The first model stays the one hooked (8.1.1); a GAN's or a rebuilt model's later start() gave a
    dump without its modules and no word."""
    first, other = nn.Linear(2, 2), nn.Linear(2, 2)
    dbg = debugger(level="L0")
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        for model in (first, first, other, other, first):
            dbg.start(model=model)
            model(torch.randn(1, 2))
            dbg.stop()
            dbg.step()
    said = [r.getMessage() for r in caplog.records if "another model" in r.getMessage()]
    assert said == [
        "msprobe: start() was given another model than the one hooked at the first dump window; as in "
        "8.1.1 that first model stays the one whose modules are recorded, this one's are not"
    ]


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_dropped_model_is_freed_with_its_parameters(tmp_path: Path, debugger: Any, level: str) -> None:
    """A notebook cell run again or a sweep's next trial drops the model dumped so far: its submodules
    (and every parameter) were held by the dump for the rest of the process, although stop() took
    its hooks off."""
    import gc
    import weakref

    dbg = debugger(level=level)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    weight = weakref.ref(model[0].weight)
    dbg.start(model=model)
    model(torch.randn(2, 4)).sum().backward()
    dbg.stop()
    dbg.step()
    del model
    gc.collect()
    assert weight() is None


def test_the_first_model_is_known_by_identity_not_by_its_id() -> None:
    """Held weakly, the first model may be freed and its address handed to a new model: that one is
    another model all the same (an id match would take it for the first, whose hooks are gone)."""
    import gc

    from msprobe.dump.frontdoor import FirstModel

    first = FirstModel()
    a = nn.Linear(2, 2)
    assert first.take(a)
    assert first._first is not None and first._first.get() is a
    del a
    gc.collect()
    assert first._first.get() is None  # not kept alive by the choice
    assert not first.take(nn.Linear(2, 2))
