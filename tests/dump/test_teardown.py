"""After ``stop()`` nothing of ours is left in torch or on the model; after ``_shutdown`` nothing of ours
is left at all: every patched attribute is the original object again, ``warnings.filters`` is the list
it was, no function mode of ours is on the stack, no hook of ours on a module, a parameter or the
optimizer, and checkpoint early stop is what it was."""

from __future__ import annotations

import types
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch.nn.utils
import torch.optim.optimizer as opt
import torch.utils.checkpoint as ckpt
from torch.utils import hooks

from msprobe.dump.pytorch.torch_compat import function_modes
from tests.dump.conftest import load_dump

RANK = Path("dump") / "step0" / "rank"


def _namespaces() -> dict[str, Any]:
    spaces: dict[str, Any] = {
        "torch": torch,
        "Tensor": torch.Tensor,
        "functional": F,
        "nn.utils": torch.nn.utils,
        "BackwardHook": hooks.BackwardHook,
    }
    if torch.distributed.is_available():
        import torch.distributed.distributed_c10d as c10d

        spaces["distributed"] = torch.distributed
        spaces["c10d"] = c10d
    return spaces


def snapshot() -> dict[str, Any]:
    return {
        "attrs": {name: dict(vars(ns)) for name, ns in _namespaces().items()},
        "warnings": list(warnings.filters),
        "modes": function_modes(),
        "optimizer hooks": (dict(opt._global_optimizer_pre_hooks), dict(opt._global_optimizer_post_hooks)),
        "early stop": ckpt._enable_checkpoint_early_stop,
    }


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    for name, attrs in before["attrs"].items():
        now = after["attrs"][name]
        changed = [k for k, v in attrs.items() if now.get(k) is not v]
        assert changed == [], f"{name}: {changed} are not the original objects"
        added = [k for k in now.keys() - attrs.keys() if not isinstance(now[k], types.ModuleType)]
        assert added == [], f"{name}: {added} added"
    assert after["warnings"] == before["warnings"]
    assert after["modes"] == before["modes"]
    assert after["optimizer hooks"] == before["optimizer hooks"]
    assert after["early stop"] == before["early stop"]


def hooks_on(model: torch.nn.Module) -> list[str]:
    out = []
    for name, m in model.named_modules():
        for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            if getattr(m, kind):
                out.append(f"{name or 'root'}.{kind}")
    for name, p in model.named_parameters():
        if getattr(p, "_backward_hooks", None):
            out.append(f"{name}._backward_hooks")
    return out


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.act = torch.nn.ReLU(inplace=True)
        self.out = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.fc(x)))


def _train_step(net: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    loss = (net(torch.randn(3, 4)) + 1).pow(2).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_stop_leaves_torch_and_the_model_as_they_were(tmp_path: Path, debugger: Any, level: str) -> None:
    torch.manual_seed(0)
    net = _Net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    dbg = debugger(level=level, step=[0, 1])
    before = snapshot()
    for _ in range(2):  # the second start() puts everything on again, the second stop() off again
        dbg.start(model=net)
        _train_step(net, optimizer)
        dbg.stop()
        assert hooks_on(net) == []
        assert_same(before, snapshot())
        dbg.step()
    data = load_dump(tmp_path / RANK)["data"]
    wanted = {"L0": "Module.out.Linear.backward.0", "L1": "Functional.linear.0.forward"}
    assert wanted.get(level, "Module.fc.Linear.forward.0") in data
    assert load_dump(tmp_path / "dump" / "step1" / "rank")["data"].keys() == data.keys()
    _train_step(net, optimizer)  # in-place ReLU after a formerly hooked module: plain torch again


def test_module_dump_hooks_come_off_at_stop(tmp_path: Path, debugger: Any) -> None:
    from msprobe.pytorch import module_dump, module_dump_end

    net = _Net()
    dbg = debugger(level="L1")
    before = snapshot()
    dbg.start()
    module_dump(net.fc, "fc")
    net(torch.randn(2, 4)).sum().backward()
    module_dump_end()
    assert hooks_on(net.fc)  # on while dumping
    dbg.stop()
    assert hooks_on(net) == []
    assert_same(before, snapshot())
    assert "Module.fc.Linear.forward.0" in load_dump(tmp_path / RANK)["data"]


def test_shutdown_leaves_everything_as_before_construction(tmp_path: Path, debugger: Any) -> None:
    from msprobe.pytorch import PrecisionDebugger

    net = _Net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    before = snapshot()
    dbg = debugger(level="mix")
    dbg.start(model=net, token_range=[0, 0])
    _train_step(net, optimizer)
    PrecisionDebugger._shutdown()  # without stop(): teardown undoes what start() and the debugger did
    assert hooks_on(net) == []
    assert_same(before, snapshot())


def test_stop_lets_go_of_the_last_backward_gradients(debugger: Any) -> None:
    """The dump keeps a backward node's gradients until the next backward record (the summary cache
    recognises them there); after ``stop()`` they are the user's again (an embedding-sized gradient
    must not live on through ``optimizer.step()``)."""
    import gc
    import weakref

    dbg = debugger()
    x = torch.randn(64, 64, requires_grad=True)
    seen: list[weakref.ref[torch.Tensor]] = []
    dbg.start()
    y = torch.exp(x)
    y.register_hook(lambda g: seen.append(weakref.ref(g)) or None)
    y.sum().backward()
    dbg.stop()
    gc.collect()
    assert seen and seen[0]() is None


class _Queries(torch.nn.Module):
    """Returns its own parameter (a learned query table returned whole)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(4, 8))

    def forward(self) -> torch.Tensor:
        return self.table


class _WithQueries(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.lin = _Queries(), torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) @ self.q().t()


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_parameter_a_module_returns_keeps_no_hook_of_ours(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """Its backward is watched by a hook on the parameter itself: off at stop(), or forwards without
    a backward (an evaluation with grad enabled) pile watchers on it for good."""
    net, x = _WithQueries(), torch.randn(2, 8)
    dbg = debugger(level=level)
    dbg.start(model=net)
    net(x).sum().backward()
    for _ in range(3):
        net(x)  # no backward
    dbg.stop()
    assert hooks_on(net) == []
    assert "Module.q._Queries.backward.0" in load_dump(tmp_path / RANK)["data"]


def test_past_the_last_step_the_dump_lets_go_of_the_model(debugger: Any) -> None:
    """A job that builds a model per trial: the first trial's model is freed once the dump is over."""
    import gc
    import weakref

    net = _Net()
    dbg = debugger(level="L0", step=[0])
    dbg.start(model=net)
    net(torch.randn(2, 4)).sum().backward()
    dbg.stop()
    dbg.step()  # past step 0: nothing is dumped again
    gone = weakref.ref(net.fc.weight)
    dbg.start(model=_Net())  # the next trial's model
    dbg.stop()
    del net
    gc.collect()
    assert gone() is None


def test_debug_saves_forget_what_they_saw_and_leave_no_hook(tmp_path: Path, debugger: Any) -> None:
    """Level debug has no window: a parameter written without a version bump between saves (a fused
    optimizer) is summarised again, and a save whose gradient never comes leaves no hook behind."""
    lin = torch.nn.Linear(8, 8)
    dbg = debugger(level="debug")
    truth = []
    for _ in range(2):
        dbg.save(lin.weight, "weight")  # save_backward: a gradient hook, and no backward follows
        truth.append(float(lin.weight.detach().max()))
        with torch.no_grad():
            lin.weight.data.add_(1.0)  # a write through .data: no version bump of the parameter
        dbg.step()
    import json

    for step in range(2):
        rec = json.loads((tmp_path / "dump" / f"step{step}" / "rank" / "debug.json").read_text())
        assert rec["data"]["weight.0.debug"]["Max"] == pytest.approx(truth[step])
    assert not lin.weight._backward_hooks


def test_a_parameter_saved_in_each_micro_batch_keeps_each_backwards_gradient(
    tmp_path: Path, debugger: Any
) -> None:
    """Gradient accumulation at level debug: ``save(w)`` in each micro-batch of one step. Each save's
    gradient hook stayed on the parameter for the whole step, so every later backward rewrote the
    earlier saves' ``w_grad.k`` records: all of them held the last micro-batch's gradient."""
    import json

    w = torch.nn.Parameter(torch.ones(4))
    dbg = debugger(level="debug")
    for mb in range(3):
        dbg.save(w, "w")
        ((mb + 1.0) * w).sum().backward()  # this micro-batch's gradient: mb + 1 everywhere
    dbg.step()
    data = json.loads((tmp_path / "dump" / "step0" / "rank" / "debug.json").read_text())["data"]
    assert [data[f"w_grad.{k}.debug"]["Max"] for k in range(3)] == [1.0, 2.0, 3.0]
    assert not w._backward_hooks
