"""Small MindSpore nets for the tests: the upstream fixture net (in-process twin of make_fixtures.py)."""

from __future__ import annotations

import json
import os
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, nn, ops

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "data", "mindspore", "upstream_v811")


class Block(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.relu = nn.ReLU()

    def construct(self, x: Any) -> Any:
        return self.relu(self.conv(x))


class Net(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.fc = nn.Dense(4 * 4 * 4, 5)
        self.add = ops.Add()

    def construct(self, x: Any) -> Any:
        x = self.block(x)
        x = mint.flatten(x, 1)
        x = self.fc(x)
        x = self.add(x, 0.5)
        return mint.nn.functional.silu(x) * 2.0


def write_config(path: str, task: str, level: str, dump_path: str, **section: Any) -> str:
    sec: dict[str, Any] = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        sec["summary_mode"] = "statistics"
    sec.update(section)
    cfg = {"task": task, "dump_path": dump_path, "rank": [], "step": [], "level": level, task: sec}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(cfg, fh)
    return path


def data(seed: int, shape: tuple[int, ...]) -> Tensor:
    return Tensor(np.random.RandomState(seed).randn(*shape).astype(np.float32))


def run_fixture_net(
    debugger_cls: Any,
    seed_all: Any,
    config_path: str,
    steps: int = 2,
    with_model: bool = True,
    level: str = "L1",
) -> None:
    """The training loop of make_fixtures.py (same seed, data, net, loss, optimizer)."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    seed_all(1234)
    debugger = debugger_cls(config_path=config_path)
    net = Net()
    loss_fn = nn.MSELoss()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    x, y = data(0, (2, 3, 4, 4)), data(1, (2, 5))

    def forward_fn(inp: Any, label: Any) -> Any:
        out = net(inp)
        if level == "debug":
            debugger_cls.save(out, "logits")
            debugger_cls.save({"x": inp, "k": 3}, "inputs", save_backward=False)
        return loss_fn(out, label)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)
    for _ in range(steps):
        debugger.start(net if with_model else None)
        _, grads = grad_fn(x, y)
        optimizer(grads)
        debugger.stop()
        debugger.step()
