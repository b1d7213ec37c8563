"""is_recompute: forward records made while activation checkpointing recomputes during backward."""

from __future__ import annotations

import json
from pathlib import Path
from types import CodeType
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint as checkpoint

from msprobe.dump.pytorch.recompute import in_recomputation, recomputes
from tests.dump.conftest import load_dump

RANK = Path("dump") / "step0" / "rank"


class _Net(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
        self.head = nn.Linear(6, 2)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = checkpoint.checkpoint(self.block, x, use_reentrant=self.reentrant)
        return self.head(h)


_RECOMPUTED = {
    "L1": {"Functional.linear.2.forward", "Torch.tanh.1.forward"},
    "L0": {
        "Module.block.0.Linear.forward.1",
        "Module.block.1.Tanh.forward.1",
        "Module.block.Sequential.forward.1",
    },
}
_RECOMPUTED["mix"] = _RECOMPUTED["L1"] | _RECOMPUTED["L0"]


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize("level", ["L1", "L0", "mix"])
def test_records_of_the_recomputed_forward_say_so(
    tmp_path: Path, debugger: Any, level: str, reentrant: bool
) -> None:
    torch.manual_seed(0)
    net = _Net(reentrant)
    x = torch.randn(4, 6, requires_grad=True)
    dbg = debugger(level=level)
    dbg.start(model=net)
    net(x).sum().backward()
    net.head(x[:, :6].detach())  # after the backward, in the same step
    dbg.stop()
    dump = load_dump(tmp_path / RANK)
    forward = {n: rec for n, rec in dump["data"].items() if ".forward" in n}
    # the whole checkpointed block runs again (non-reentrant checkpoints too: no early stop while dumping)
    assert {n for n, rec in forward.items() if rec["is_recompute"]} == _RECOMPUTED[level]
    assert all(rec["is_recompute"] is False for n, rec in forward.items() if n not in _RECOMPUTED[level])
    if level != "L1":
        construct = json.loads((tmp_path / RANK / "construct.json").read_text())
        assert construct["Module.block.1.Tanh.forward.1"] == "Module.block.Sequential.forward.1"
        assert construct["Module.head.Linear.forward.1"] is None  # no module left open by the recompute


def _code(source: str, filename: str, *path: str) -> CodeType:
    ns: dict[str, Any] = {}
    exec(compile(source, filename, "exec"), ns)
    obj: Any = ns[path[0]]
    for attr in path[1:]:
        obj = getattr(obj, attr)
    code: CodeType = obj.__code__
    return code


def test_checkpoint_functions_of_megatron_and_mindspeed_recompute_and_other_backwards_do_not() -> None:
    method = "class {cls}:\n    def backward(ctx, *grads):\n        return grads\n"
    megatron = "/site-packages/megatron/core/tensor_parallel/random.py"
    assert recomputes(
        _code(method.format(cls="CheckpointFunction"), megatron, "CheckpointFunction", "backward")
    )
    mindspeed = "def checkpoint_function_backward(ctx, *grads):\n    return grads\n"
    assert recomputes(
        _code(mindspeed, "/site-packages/mindspeed/core/adaptive.py", "checkpoint_function_backward")
    )
    custom = _code(method.format(cls="ScaleGrad"), "/home/user/model.py", "ScaleGrad", "backward")
    assert not recomputes(custom)  # a custom Function's backward computes gradients, not a forward
    elsewhere = _code("def recompute_fn():\n    pass\n", "/home/user/model.py", "recompute_fn")
    assert not recomputes(elsewhere)


def test_outside_backward_nothing_is_recomputation() -> None:
    assert in_recomputation() is False
    seen: list[bool] = []

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            seen.append(in_recomputation())  # in backward, but not a recomputation
            return g * 2

    Scale.apply(torch.ones(2, requires_grad=True)).sum().backward()
    assert seen == [False]


def test_a_recomputed_call_returning_its_input_has_one_backward_record(tmp_path: Path, debugger: Any) -> None:
    """``x.to(torch.float32)`` on a float32 ``x`` returns ``x``; its backward record comes from a hook on
    that tensor. A non-reentrant checkpoint recomputes it on the very same tensor, so a second hook gave
    the same gradient a second record (``Tensor.to.1.backward`` repeating ``Tensor.to.0.backward``), as
    in every Hugging Face RMSNorm of a checkpointed layer."""
    torch.manual_seed(0)
    lin = nn.Linear(6, 6)

    def block(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(lin(x.to(torch.float32)))

    x = torch.randn(4, 6, requires_grad=True)
    dbg = debugger(level="L1")
    dbg.start()
    checkpoint.checkpoint(block, x * 1.0, use_reentrant=False).sum().backward()
    dbg.stop()
    data = load_dump(tmp_path / RANK)["data"]
    assert sorted(n for n in data if n.startswith("Tensor.to.") and n.endswith(".backward")) == [
        "Tensor.to.0.backward"
    ]
    assert data["Tensor.to.1.forward"]["is_recompute"] is True
