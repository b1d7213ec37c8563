"""A module call that raises (an out-of-memory error caught and retried with a smaller batch, as
accelerate's ``find_executable_batch_size`` does): the user's exception propagates unchanged, the
failed calls leave no record, and every later call has its true parent in construct.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

from tests.dump.conftest import load_dump


class _Failing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if x.shape[0] > 2:
            raise RuntimeError("out of memory (simulated)")
        return y


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), _Failing())
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def _dump(tmp_path: Path, debugger: Any, level: str) -> tuple[dict[str, Any], dict[str, Any]]:
    model = _Net()
    dbg = debugger(level=level)
    dbg.start(model=model)
    with pytest.raises(RuntimeError, match="out of memory"):
        model(torch.randn(4, 4))
    model(torch.randn(2, 4)).sum().backward()  # the retry with a smaller batch
    dbg.stop()
    dbg.step()
    rank = tmp_path / "dump" / "step0" / "rank"
    with open(rank / "construct.json", encoding="utf-8") as fh:
        return load_dump(rank)["data"], json.load(fh)


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_calls_after_a_module_that_raised_have_their_true_parents(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    data, construct = _dump(tmp_path, debugger, level)
    # the failed calls end without a data record, their children keep an existing parent
    assert "Module.block.1._Failing.forward.0" not in data
    assert construct["Module.block.1._Failing.forward.0"] == "Module.block.Sequential.forward.0"
    assert construct["Module.block.Sequential.forward.0"] is None
    assert construct["Module.block.1.lin.Linear.forward.0"] == "Module.block.1._Failing.forward.0"
    # the retry: true parents, none inherited from the calls that raised
    assert construct["Module.block.Sequential.forward.1"] is None
    assert construct["Module.head.Linear.forward.0"] is None
    assert construct["Module.block.1._Failing.forward.1"] == "Module.block.Sequential.forward.1"
    assert "Module.block.1._Failing.forward.1" in data and "Module.head.Linear.forward.0" in data
    assert construct["Module.head.Linear.backward.0"] is None
    parents = {p for p in construct.values() if p is not None}
    assert parents <= set(construct)  # every parent named has an entry of its own
    if level == "mix":
        linears = sorted(k for k in construct if k.startswith("Functional.linear."))
        assert construct["Functional.linear.4.forward"] == "Module.head.Linear.forward.0", linears


class _Interrupted(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt  # Ctrl-C inside a module: torch runs none of its forward hooks


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_ctrl_c_inside_a_module_leaves_construct_json_whole(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """The window closes with module calls still open (a caught Ctrl-C, a notebook cell re-run, or the
    exit handler after an uncaught one): every parent construct.json names is a key of it, and the
    next window's calls have their true parents."""
    net = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Tanh(), _Interrupted()))
    dbg = debugger(level=level)
    dbg.start(model=net)
    with pytest.raises(KeyboardInterrupt):
        net(torch.randn(2, 4))
    dbg.stop()
    dbg.start(model=net)
    net[0](torch.randn(2, 4))
    dbg.stop()
    construct = json.loads((tmp_path / "dump" / "step0" / "rank" / "construct.json").read_text())
    assert all(parent is None or parent in construct for parent in construct.values()), construct
    assert construct["Module.1.1._Interrupted.forward.0"] == "Module.1.Sequential.forward.0"
    assert construct["Module.0.Linear.forward.1"] is None


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_an_api_that_raises_keeps_its_inputs_record_and_files(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """8.1.1 collects an API's inputs when the call starts: a call that raises (caught by the
    program) keeps an inputs-only record, which names the input files the tensor task wrote."""
    lin = nn.Linear(4, 3)
    dbg = debugger(level=level, task="tensor")
    dbg.start(model=nn.Sequential(lin))
    y = lin(torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.matmul(y, torch.ones(4, 5))
    torch.matmul(y, torch.ones(3, 5))
    dbg.stop()
    rank = tmp_path / "dump" / "step0" / "rank"
    data = load_dump(rank)["data"]
    failed = data["Torch.matmul.0.forward"]
    assert "output" not in failed
    assert [a["shape"] for a in failed["input_args"]] == [[2, 3], [4, 5]]
    files = set((rank / "dump_tensor_data").iterdir())
    assert {rank / "dump_tensor_data" / a["data_name"] for a in failed["input_args"]} <= files
    assert "output" in data["Torch.matmul.1.forward"]
    stacks = json.loads((rank / "stack.json").read_text())
    assert any("Torch.matmul.0.forward" in names for names, _ in stacks.values())
    if level == "mix":
        construct = json.loads((rank / "construct.json").read_text())
        assert "Torch.matmul.0.forward" in construct and construct["Torch.matmul.0.forward"] is None


def test_calls_after_an_optimizer_step_that_raised_have_their_true_parents(
    tmp_path: Path, debugger: Any
) -> None:
    """torch runs no optimizer step post hook when the step raises (Adam refusing a sparse
    gradient): the calls after it, in the same window, are not given the parent ``optimizer``."""
    net = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 1))
    dbg = debugger(level="mix")
    dbg.start(model=net)
    net(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        torch.optim.AdamW(net.parameters()).step()
    torch.optim.SGD(net.parameters(), lr=0.1).step()
    net(torch.tensor([3, 4])).sum()
    dbg.stop()
    construct = json.loads((tmp_path / "dump" / "step0" / "rank" / "construct.json").read_text())
    assert construct["Tensor.add_.0.forward"] == "optimizer"  # SGD's step still has its parent
    assert construct["Module.0.Embedding.forward.1"] is None
    assert construct["Module.1.Linear.forward.1"] is None
    assert construct["Tensor.sum.1.forward"] is None


class _FailingBackward(torch.autograd.Function):
    fail = False

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 1

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        if _FailingBackward.fail:
            raise RuntimeError("out of memory in backward (simulated)")
        return g


class _Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FailingBackward.apply(self.lin(x))


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_calls_after_a_backward_that_raised_have_their_true_parents(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """A backward pass that raises (caught, the batch retried in the same window) ends the module
    backward calls it began: the retry's backward calls are not their children."""
    net = nn.Sequential(nn.Linear(4, 4), nn.Sequential(_Inner(), nn.Linear(4, 4)), nn.Linear(4, 1))
    dbg = debugger(level=level)
    dbg.start(model=net)
    _FailingBackward.fail = True
    try:
        with pytest.raises(RuntimeError, match="out of memory"):
            net(torch.randn(3, 4)).sum().backward()
    finally:
        _FailingBackward.fail = False
    net(torch.randn(2, 4)).sum().backward()
    dbg.stop()
    construct = json.loads((tmp_path / "dump" / "step0" / "rank" / "construct.json").read_text())
    assert construct["Module.1.0._Inner.backward.0"] == "Module.1.Sequential.backward.0"
    assert construct["Module.2.Linear.backward.1"] is None
    assert construct["Module.1.Sequential.backward.1"] is None
    assert construct["Module.0.Linear.backward.1"] is None
    assert construct["Module.1.0.lin.Linear.backward.1"] == "Module.1.0._Inner.backward.1"
    assert all(parent is None or parent in construct for parent in construct.values())
    if level == "mix":
        assert construct["Tensor.sum.1.backward"] is None
