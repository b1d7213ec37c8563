"""Other threads while a dump window is open: only the thread that called start() records its forward
calls (and autograd's threads their backward and recomputation); other threads' calls neither appear
in the dump nor disturb its records."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint as checkpoint

from msprobe.dump.pytorch.torch_compat import function_modes, pop_function_mode, push_function_mode
from tests.dump.conftest import load_dump

RANK = Path("dump") / "step0" / "rank"
# an exception in the other thread is a failure here, not a warning in the summary
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(10):
            x = torch.tanh(self.b(torch.relu(self.a(x))))
        return self.c(x)


def _names(tmp_path: Path) -> list[str]:
    return list(load_dump(tmp_path / RANK)["data"])


def _train(net: nn.Module, x: torch.Tensor) -> None:
    for _ in range(3):
        net(x).sum().backward()


def _with_a_thread_running(target: Any, body: Any) -> None:
    """``body()`` while another thread runs ``target()`` in a loop (started before, stopped after)."""
    stop, looped = threading.Event(), threading.Event()

    def loop() -> None:
        while not stop.is_set():
            target()
            looped.set()

    th = threading.Thread(target=loop)
    th.start()
    looped.wait(timeout=60)
    try:
        body()
    finally:
        stop.set()
        th.join()


def test_module_hooks_a_thread_calls_while_they_are_registered_take_it(tmp_path: Path, debugger: Any) -> None:
    """torch registers a forward hook, then marks it as taking kwargs: a thread running the model in
    between calls it without them, and ours raised "unwind() missing 1 required positional argument"
    in that thread."""
    net, x = _Net(), torch.randn(2, 8)
    dbg = debugger(level="mix")
    dbg.start(model=net)
    with torch.no_grad():
        out = net.a(x)
        for pre in list(net.a._forward_pre_hooks.values()):
            pre(net.a, (x,))  # as a thread calls it before the kwargs mark
        for post in list(net.a._forward_hooks.values()):
            post(net.a, (x,), out)
    dbg.stop()


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_thread_running_the_model_leaves_the_dump_as_without_it(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    torch.manual_seed(0)
    net, x = _Net(), torch.randn(4, 8)
    dbg = debugger(level=level)

    def window() -> None:
        dbg.start(model=net)
        _train(net, x)
        dbg.stop()
        dbg.step()

    window()
    alone = _names(tmp_path)

    def log_forward() -> None:
        with torch.no_grad():
            net(torch.randn(2, 8))

    _with_a_thread_running(log_forward, window)
    with_thread = list(load_dump(tmp_path / "dump" / "step1" / "rank")["data"])
    assert with_thread == alone and len(alone) > 60
    construct = json.loads((tmp_path / "dump" / "step1" / "rank" / "construct.json").read_text())
    assert all(parent is None or parent in construct for parent in construct.values())


def test_a_backward_in_a_helper_thread_overlapping_the_next_forward_loses_no_record(
    tmp_path: Path, debugger: Any
) -> None:
    """Micro-batch k's backward in a thread while the training thread runs micro-batch k+1's forward."""
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(10)])
    xs = [torch.randn(4, 16) for _ in range(6)]
    dbg = debugger(level="L1")

    def window(overlap: bool) -> None:
        dbg.start()
        prev: threading.Thread | None = None
        for x in xs:
            loss = net(x).sum()
            if prev is not None:
                prev.join()
            if overlap:
                prev = threading.Thread(target=loss.backward)
                prev.start()
            else:
                loss.backward()
        if prev is not None:
            prev.join()
        dbg.stop()
        dbg.step()

    window(overlap=False)
    window(overlap=True)
    inline = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    threaded = load_dump(tmp_path / "dump" / "step1" / "rank")["data"]
    forward = {n for n in inline if n.endswith(".forward") and "ones_like" not in n}
    backward = {n for n in inline if n.endswith(".backward")}
    assert len(forward) == len(backward) == 6 * 20 + 6  # linear + tanh per layer, and the sum
    # the backward seed (Torch.ones_like) of a thread's backward is made in that thread: not recorded
    assert {n for n in threaded if n.endswith(".forward")} == forward
    assert {n for n in threaded if n.endswith(".backward")} == backward
    assert all(rec["output"][0]["Max"] is not None for n, rec in threaded.items() if n.endswith(".backward"))


def test_a_recomputation_in_autograds_own_thread_is_recorded(tmp_path: Path, debugger: Any) -> None:
    """On CUDA and NPU autograd runs a backward in its device threads, which inherit the training
    thread's function mode: a checkpoint's recomputation runs there. Simulated on the CPU by a thread
    that carries the mode, as autograd's thread does, and runs the backward."""
    torch.manual_seed(0)
    block, head = nn.Sequential(nn.Linear(6, 6), nn.Tanh()), nn.Linear(6, 2)
    x = torch.randn(4, 6, requires_grad=True)
    dbg = debugger(level="L1")
    dbg.start()
    loss = head(checkpoint.checkpoint(block, x, use_reentrant=False)).sum()
    modes = function_modes()

    def autograd_thread() -> None:
        for mode in modes:
            push_function_mode(mode)
        try:
            loss.backward()
        finally:
            for mode in modes:
                pop_function_mode(mode)

    th = threading.Thread(target=autograd_thread)
    th.start()
    th.join()
    dbg.stop()
    data = load_dump(tmp_path / RANK)["data"]
    recomputed = {n for n, rec in data.items() if n.endswith(".forward") and rec["is_recompute"]}
    assert recomputed == {"Functional.linear.2.forward", "Torch.tanh.1.forward"}
    assert "Functional.linear.0.backward" in data


def test_stop_from_another_thread_says_so_and_the_capture_leaves_at_the_next_call(
    tmp_path: Path, debugger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    dbg = debugger(level="L1")
    x = torch.ones(2)
    dbg.start()
    x.exp()
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        th = threading.Thread(target=dbg.stop)
        th.start()
        th.join()
    assert "stop()/step() called from another thread than start()" in caplog.text
    assert _names(tmp_path) == ["Tensor.exp.0.forward"]
    x.exp()  # the window is closed: nothing is recorded
    dbg.step()  # the training thread's next call takes the capture off it
    assert not [m for m in function_modes() if type(m).__name__ == "ApiTracer"]
    assert _names(tmp_path) == ["Tensor.exp.0.forward"]


class _MaskedRelu(torch.autograd.Function):
    """A user's custom function whose backward uses tensor operators (patched while dumping)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g * (x > 0)


def test_a_threads_own_backward_neither_appears_in_the_dump_nor_renames_its_records(
    tmp_path: Path, debugger: Any
) -> None:
    """A logging thread runs its own small forward and backward (a custom autograd.Function whose
    backward calls ``*`` and ``>``) while the training thread dumps: its operators were recorded with
    the training thread's counters, so the training thread's ``Tensor.__mul__.0`` was the thread's."""
    torch.manual_seed(0)
    net, x = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1)), torch.randn(4, 8)
    dbg = debugger(level="L1")

    def window() -> None:
        dbg.start()
        for _ in range(5):
            y = net(x)
            ((y * y).mean() + (y > 0).float().sum()).backward()
        dbg.stop()
        dbg.step()

    window()
    alone = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    w = torch.randn(6, 6, requires_grad=True)

    def own_backward() -> None:
        _MaskedRelu.apply(w @ w).sum().backward()
        w.grad = None

    _with_a_thread_running(own_backward, window)
    with_thread = load_dump(tmp_path / "dump" / "step1" / "rank")["data"]
    assert list(with_thread) == list(alone) and len(alone) > 40
    assert with_thread == alone
