"""What training code does to a hooked model in MindSpore: copies it (an EMA or teacher model),
recomputes a Cell (a custom ``bprop``, which takes no forward hook), or catches a forward that raised
and goes on."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn, ops
from nets import write_config

from msprobe.mindspore import PrecisionDebugger


def _debugger(tmp_path: Any, level: str = "mix") -> tuple[Any, str]:
    out = str(tmp_path / "dump")
    return PrecisionDebugger(
        config_path=write_config(str(tmp_path / "cfg.json"), "statistics", level, out)
    ), out


def _construct(out: str) -> dict[str, Any]:
    with open(os.path.join(out, "step0", "rank", "construct.json"), encoding="utf-8") as fh:
        return json.load(fh)


def _records(out: str) -> dict[str, Any]:
    with open(os.path.join(out, "step0", "rank", "dump.json"), encoding="utf-8") as fh:
        return json.load(fh)["data"]


def _train_step(dbg: Any, net: nn.Cell) -> None:
    grad = ms.value_and_grad(lambda a: net(a).sum(), None, net.trainable_params())
    dbg.start(net)
    grad(Tensor(np.ones((3, 4), np.float32)))
    dbg.stop()
    dbg.step()


class Block(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(4, 4)

    def construct(self, x: Tensor) -> Tensor:
        if x.shape[0] != 3:
            raise ValueError("a batch of 3 only")
        return ops.tanh(self.fc(x))


class Net(nn.Cell):
    def __init__(self, recompute: bool = False) -> None:
        super().__init__()
        self.block = Block()
        self.head = nn.Dense(4, 2)
        if recompute:
            self.block.recompute()

    def construct(self, x: Tensor) -> Tensor:
        return self.head(self.block(x))


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_hooked_net_can_be_copied(tmp_path: Any, level: str) -> None:
    dbg, _ = _debugger(tmp_path, level)
    net = Net()
    dbg.start(net)
    net(Tensor(np.ones((3, 4), np.float32)))
    twin = copy.deepcopy(net)  # inside the window, an EMA model
    dbg.stop()
    dbg.step()
    teacher = copy.deepcopy(net)  # after it
    x = Tensor(np.ones((3, 4), np.float32))
    assert np.array_equal(twin(x).asnumpy(), net(x).asnumpy())
    assert np.array_equal(teacher(x).asnumpy(), net(x).asnumpy())


def test_a_recomputed_cell_leaves_the_parents_of_later_records_alone(tmp_path: Any) -> None:
    dbg, out = _debugger(tmp_path)
    _train_step(dbg, Net(recompute=True))
    construct = _construct(out)
    assert construct["Cell.head.Dense.forward.0"] is None  # a sibling of the recomputed block
    assert construct["Cell.head.Dense.backward.0"] is None
    assert not {p for p in construct.values() if p is not None} - set(construct)  # no dangling parent


def test_a_forward_that_raised_and_was_caught_leaves_no_open_cell(tmp_path: Any) -> None:
    dbg, out = _debugger(tmp_path)
    net = Net()
    grad = ms.value_and_grad(lambda a: net(a).sum(), None, net.trainable_params())
    dbg.start(net)
    with pytest.raises(ValueError):
        net(Tensor(np.ones((5, 4), np.float32)))  # a bad batch, skipped by the evaluation loop
    grad(Tensor(np.ones((3, 4), np.float32)))
    dbg.stop()
    dbg.step()
    construct = _construct(out)
    assert construct["Cell.block.Block.forward.1"] is None
    assert construct["Cell.head.Dense.forward.0"] is None
    assert not {p for p in construct.values() if p is not None} - set(construct)
    assert "Cell.block.Block.forward.1" in _records(out)


def test_a_users_cell_backward_hook_is_not_a_model_op(tmp_path: Any) -> None:
    dbg, out = _debugger(tmp_path)
    net = Net()
    net.head.register_backward_hook(lambda cell, grad_in, grad_out: None)  # before start()
    _train_step(dbg, net)
    records = _records(out)
    assert "Cell.head.Dense.backward.0" in records
    assert [k for k in records if "CellBackwardHook" in k] == []
