"""Other threads while a MindSpore dump window is open: only the thread that called start() is
recorded; another thread running the net neither appears in the dump nor disturbs its records."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops
from nets import write_config

from msprobe.mindspore import PrecisionDebugger


class _Net(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Dense(8, 8)
        self.seq = nn.SequentialCell([nn.Dense(8, 8), nn.ReLU()])
        self.c = nn.Dense(8, 1)

    def construct(self, x: Any) -> Any:
        for _ in range(3):
            x = ops.tanh(self.seq(self.a(x)))
        return self.c(x)


def _trainer(net: nn.Cell) -> Any:
    loss_fn = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)

    def step(x: Any, y: Any) -> float:
        loss, grads = grad_fn(x, y)
        opt(grads)
        return float(loss.asnumpy())

    return step


def _window(dbg: Any, net: nn.Cell, step: Any, x: Any, y: Any) -> list[float]:
    dbg.start(model=net)
    losses = [step(x, y) for _ in range(2)]
    dbg.stop()
    dbg.step()
    return losses


def _rank(out: str, step: int) -> str:
    return os.path.join(out, f"step{step}", "rank")


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_a_thread_running_the_net_leaves_the_dump_as_without_it(tmp_path: Any, level: str) -> None:
    ms.set_seed(0)
    net = _Net()
    x = ms.Tensor(np.random.RandomState(0).randn(4, 8).astype(np.float32))
    y = ms.Tensor(np.random.RandomState(1).randn(4, 1).astype(np.float32))
    step = _trainer(net)
    out = str(tmp_path / "dump")
    dbg = PrecisionDebugger(config_path=write_config(str(tmp_path / "cfg.json"), "statistics", level, out))
    _window(dbg, net, step, x, y)
    stop, looped = threading.Event(), threading.Event()

    def log_forward() -> None:
        while not stop.is_set():
            net(x)
            looped.set()

    th = threading.Thread(target=log_forward)
    th.start()
    looped.wait(timeout=60)
    try:
        _window(dbg, net, step, x, y)
    finally:
        stop.set()
        th.join()
    with open(os.path.join(_rank(out, 0), "dump.json"), encoding="utf-8") as fh:
        alone = list(json.load(fh)["data"])
    with open(os.path.join(_rank(out, 1), "dump.json"), encoding="utf-8") as fh:
        with_thread = list(json.load(fh)["data"])
    assert with_thread == alone and len(alone) > 20
    with open(os.path.join(_rank(out, 1), "construct.json"), encoding="utf-8") as fh:
        construct = json.load(fh)
    assert all(parent is None or parent in construct for parent in construct.values())


class _Interrupted(nn.Cell):
    def construct(self, x: Any) -> Any:
        raise KeyboardInterrupt  # Ctrl-C inside a Cell: MindSpore runs none of its hooks


def test_a_ctrl_c_inside_a_cell_does_not_outlive_its_window(tmp_path: Any) -> None:
    net = nn.SequentialCell([nn.Dense(4, 4), nn.SequentialCell([nn.ReLU(), _Interrupted()])])
    out = str(tmp_path / "dump")
    dbg = PrecisionDebugger(config_path=write_config(str(tmp_path / "cfg.json"), "statistics", "L0", out))
    x = ms.Tensor(np.ones((2, 4), np.float32))
    dbg.start(model=net)
    with pytest.raises(KeyboardInterrupt):
        net(x)
    dbg.stop()
    dbg.start(model=net)
    net[0](x)
    dbg.stop()
    with open(os.path.join(_rank(out, 0), "construct.json"), encoding="utf-8") as fh:
        construct = json.load(fh)
    assert construct["Cell.0.Dense.forward.1"] is None  # not the Cell the Ctrl-C left open
