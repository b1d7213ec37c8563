"""Deferred statistics (background worker): the same dump as summarising in the training thread.

The worker summarises tensors after their record was captured, so every in-place write that follows
a capture must wait for it (a drain). These tests modify captured tensors in place right after the
call that produced them, through every route a drain is placed on, and compare with the synchronous
dump (``MSPROBE_STAT_THREAD=0``).
"""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.dump.background import HINTED_JOBS, Worker
from msprobe.dump.pytorch.encode import Encoder
from tests.dump.conftest import load_dump
from tests.dump.test_crash import kill_when_ready

RANK = Path("dump") / "step0" / "rank"
REPO = Path(__file__).resolve().parents[2]


def _inplace_body() -> None:
    y = torch.linspace(-2.0, 3.0, 4096).reshape(64, 64)
    a = torch.exp(y)
    a.add_(1.0)  # Tensor method
    b = torch.tanh(y)
    b *= 3.0  # operator
    c = torch.sin(y)
    c[0] = 100.0  # __setitem__
    d = torch.cos(y)
    torch.mul(y, 2.0, out=d)  # out=
    e = y * 1.5
    F.relu(e, inplace=True)  # inplace=True
    f = y.abs()
    f.view(-1).clamp_(max=0.5)  # in place through a view of the captured tensor
    mean, var = torch.zeros(64), torch.ones(64)
    F.batch_norm(y, mean, var, training=True)  # running statistics updated inside the call
    g = torch.sqrt(y.abs())
    g.numpy()  # not a write; recorded values stay
    torch.stack([a, b, c, d, e, f, g]).sum()


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 32)
        self.ln = nn.LayerNorm(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        h += 1.0  # in place on a module's output, outside any module
        h = F.gelu(h)
        out = self.fc2(h)
        out.mul_(0.5)
        return self.ln(out + x)


def _train_body() -> Callable[[Any], None]:
    torch.manual_seed(0)
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(8, 32)

    def run(dbg: Any) -> None:
        for _ in range(2):
            dbg.start(model=net)
            loss = net(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()  # parameters (captured at L0) rewritten in place
            dbg.stop()
            dbg.step()

    return run


def _slowed(job: Callable[..., None]) -> Callable[..., None]:
    def slow(self: Encoder, *args: Any) -> None:
        time.sleep(0.002)  # a slow worker: without the drains the training thread would overtake it
        job(self, *args)

    return slow


def _dump(tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, thread: bool, **cfg: Any) -> Any:
    monkeypatch.setenv("MSPROBE_STAT_THREAD", "1" if thread else "0")
    for job in ("_fill", "_run_later"):  # summaries of API records, whole module records
        monkeypatch.setattr(Encoder, job, _slowed(getattr(Encoder, job)))
    dbg = debugger(**cfg)
    assert (dbg.service.worker is not None) is thread
    return dbg


def test_inplace_after_capture_keeps_pre_modification_statistics(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dbg = _dump(tmp_path, debugger, monkeypatch, True)
    dbg.start()
    _inplace_body()
    dbg.stop()
    data = load_dump(tmp_path / RANK)["data"]
    y = torch.linspace(-2.0, 3.0, 4096)
    exp_rec = data["Torch.exp.0.forward"]["output"][0]
    assert exp_rec["Max"] == pytest.approx(float(torch.exp(y).max()))  # not exp + 1
    assert data["Tensor.add_.0.forward"]["input_args"][0]["Max"] == exp_rec["Max"]
    assert data["Torch.tanh.0.forward"]["output"][0]["Max"] == pytest.approx(float(torch.tanh(y).max()))
    assert data["Torch.sin.0.forward"]["output"][0]["Max"] <= 1.0  # before c[0] = 100
    assert data["Torch.cos.0.forward"]["output"][0]["Min"] == pytest.approx(float(torch.cos(y).min()))
    assert data["Tensor.abs.0.forward"]["output"][0]["Max"] == pytest.approx(3.0)  # before clamp_
    bn = data["Functional.batch_norm.0.forward"]["input_args"]
    assert bn[1]["Max"] == 0.0 and bn[2]["Min"] == 1.0  # running stats before the update
    assert not (tmp_path / RANK / "dump_error_info.log").exists()


@pytest.mark.parametrize(
    ("level", "data_mode"),
    [("L1", ["all"]), ("L0", ["all"]), ("mix", ["all"]), ("L0", ["input"]), ("L0", ["output"])],
)
def test_deferred_dump_equals_synchronous_dump(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, level: str, data_mode: list[str]
) -> None:
    results = []
    section = {"statistics": {"scope": [], "list": [], "data_mode": data_mode, "summary_mode": "statistics"}}
    for thread in (True, False):
        out = tmp_path / ("thread" if thread else "sync")
        dbg = _dump(out, debugger, monkeypatch, thread, level=level, dump_path=str(out / "dump"), **section)
        _train_body()(dbg)
        if level == "L1":
            dbg.start()
            _inplace_body()
            dbg.stop()
        steps = sorted(p.name for p in (out / "dump").iterdir())
        results.append({s: load_dump(out / "dump" / s / "rank") for s in steps})
        for s in steps:
            assert not (out / "dump" / s / "rank" / "dump_error_info.log").exists()
        from msprobe.pytorch import PrecisionDebugger

        PrecisionDebugger._shutdown()
    threaded, sync = results
    assert list(threaded) == list(sync) == ["step0", "step1", "step2"][: 3 if level == "L1" else 2]
    for s in threaded:
        t_data, s_data = threaded[s]["data"], sync[s]["data"]
        assert list(t_data) == list(s_data)
        assert t_data == s_data
    assert any("parameters" in json.dumps(v) for v in threaded["step0"]["data"].values()) or level == "L1"


def test_worker_runs_jobs_in_order_and_survives_errors() -> None:
    errors: list[BaseException] = []
    w = Worker(errors.append)
    seen: list[int] = []
    main = threading.get_ident()

    def job(i: int) -> None:
        assert threading.get_ident() != main
        if i == 3:
            raise ValueError("boom")
        seen.append(i)

    for i in range(200):
        w.submit(job, i)
    w.drain()
    assert not w.busy
    assert seen == [i for i in range(200) if i != 3]
    assert len(errors) == 1 and "boom" in str(errors[0])
    w.submit(time.sleep, 0.05)
    w.drain()
    assert w.done == w.submitted == 201
    w.close()
    w.submit(seen.append, -1)  # a closed worker starts again
    w.close()
    assert seen[-1] == -1


def test_worker_shows_each_group_its_jobs_hints_before_running_them() -> None:
    log: list[object] = []
    errors: list[BaseException] = []

    def before(hints: list[object]) -> None:
        log.append(("before", list(hints)))
        if hints == ["bad"]:
            raise ValueError("hint")

    w = Worker(errors.append, before, lambda: log.append("after"))
    w.submit(log.append, 1, hint="a")
    w.submit(log.append, 2)  # no hint
    w.submit(log.append, 3, hint="b")
    w.drain()
    w.submit(log.append, 4, hint="bad")
    w.drain()
    w.close()
    assert log == [("before", ["a", "b"]), 1, 2, 3, "after", ("before", ["bad"]), 4, "after"]
    assert len(errors) == 1 and "hint" in str(errors[0])  # reported, and the jobs ran all the same
    log.clear()
    n = HINTED_JOBS + 4
    for i in range(n):  # one hand-over, two groups: work done ahead delays a drain's target less
        w.submit(log.append, i, hint=i)
    w.drain()
    w.close()
    cut = HINTED_JOBS
    assert log == [
        ("before", list(range(cut))),
        *range(cut),
        "after",
        ("before", list(range(cut, n))),
        *range(cut, n),
        "after",
    ]


CHILD = textwrap.dedent(
    """
    import sys, time, torch
    from msprobe.pytorch import PrecisionDebugger
    dbg = PrecisionDebugger(dump_path=sys.argv[1], task="statistics", level="L1")
    assert dbg.service.worker is not None
    n = int(sys.argv[2])
    x = torch.arange(6.0).reshape(2, 3)
    dbg.start()
    for i in range(n):
        x = torch.tanh(x) + i
    time.sleep(0.5)  # the worker writes its queue within microseconds; this makes the test certain
    print("done", flush=True)
    time.sleep(600)
    """
)


@given(st.lists(st.sampled_from(["job", "job", "kick", "drain", "pause"]), max_size=120))
@settings(max_examples=60, deadline=None)
def test_worker_keeps_submission_order_through_batched_handovers(ops: list[str]) -> None:
    """Jobs handed over in batches (kicks, ticks, drains in any interleaving) still run in the order
    they were submitted, and a drain leaves nothing behind. Small batches make every path common."""
    from msprobe.dump import background

    saved = background.HANDOVER_JOBS
    background.HANDOVER_JOBS = 3
    try:
        _run_ops(ops)
    finally:
        background.HANDOVER_JOBS = saved


def _run_ops(ops: list[str]) -> None:
    w = Worker()
    ran: list[int] = []
    n = 0
    for op in ops:
        if op == "job":
            w.submit(ran.append, n)
            n += 1
        elif op == "kick":
            w.kick()
        elif op == "drain":
            w.drain()
            assert ran == list(range(n))
        else:
            time.sleep(0.0005)
    w.drain()
    assert ran == list(range(n))
    w.close()


def test_jobs_waiting_at_a_tick_run_after_the_batch_handed_over_before_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tick (take what waits, later) queued before a full batch was handed over: the jobs the
    tick then finds are newer than that batch and must run after it."""
    from msprobe.dump import background

    monkeypatch.setattr(background, "HANDOVER_JOBS", 3)
    w = Worker()
    ran: list[int] = []
    w.submit(ran.append, 0)
    w.kick()  # the first kick hands over at once
    w.submit(ran.append, 1)
    w.kick()  # one job, just after a hand-over: a tick is queued
    w.submit(ran.append, 2)
    w.submit(ran.append, 3)
    w.kick()  # three jobs: handed over, behind the tick
    w.submit(ran.append, 4)  # waits for the tick
    time.sleep(background.HANDOVER_SECONDS * 10)
    w.drain()
    assert ran == [0, 1, 2, 3, 4]
    w.close()


def test_kicked_jobs_run_without_a_drain_within_the_handover_window() -> None:
    """Crash-safety bound: a kicked record is written by the worker on its own, shortly after."""
    from msprobe.dump import background

    w = Worker()
    ran: list[int] = []
    w.submit(ran.append, 1)
    w.kick()
    deadline = time.monotonic() + 5.0
    while not ran and time.monotonic() < deadline:
        time.sleep(background.HANDOVER_SECONDS / 4)
    assert ran == [1]
    for i in range(background.HANDOVER_JOBS):  # a full batch is handed over at once
        w.submit(ran.append, i)
    w.kick()
    w.drain()
    assert len(ran) == 1 + background.HANDOVER_JOBS
    w.close()


@pytest.mark.slow
def test_sigkill_keeps_deferred_records(tmp_path: Path) -> None:
    n = 25
    out = tmp_path / "dump"
    kill_when_ready(CHILD, out, n, PYTHONPATH=str(REPO), MSPROBE_STAT_THREAD="1")
    from msprobe.cli import main as msprobe_main

    assert msprobe_main(["rebuild", str(out)]) == 0
    data = load_dump(out / "step0" / "rank")["data"]
    assert len(data) == 2 * n
    last = data[f"Tensor.__add__.{n - 1}.forward"]["output"][0]
    assert last["Max"] is not None and last["Max"] > n - 2


_X = torch.zeros(2)


@pytest.mark.parametrize(
    ("prefix", "api", "args", "kwargs", "mutates", "written"),
    [
        ("Tensor", "add_", (_X, 1), {}, True, [_X]),
        ("Tensor", "__iadd__", (_X, 1), {}, True, [_X]),
        ("Tensor", "__setitem__", (_X, 0, 1.0), {}, True, [_X]),
        ("Tensor", "__add__", (_X, 1), {}, False, None),
        ("Tensor", "__init__", (_X,), {}, False, None),
        ("Torch", "mul", (_X, 2), {"out": _X}, True, [_X]),
        ("Functional", "relu", (_X,), {"inplace": True}, True, None),
        ("Functional", "relu", (_X,), {"inplace": False}, False, None),
        ("Functional", "batch_norm", (_X,), {}, True, None),
        ("Functional", "embedding", (_X, _X), {}, False, None),
        ("Functional", "embedding", (_X, _X), {"max_norm": 1.0}, True, None),
        ("Functional", "embedding", (_X, _X, None, 1.0), {}, True, None),
        ("Tensor", "backward", (_X,), {}, True, None),
        ("Tensor", "requires_grad_", (_X,), {}, True, [_X]),
        ("Torch", "grad", (_X,), {}, True, None),
        ("Torch", "_set_grad_enabled", (False,), {}, False, None),
        ("Tensor", "set_", (_X, _X), {}, True, None),
        ("Distributed", "all_reduce", (_X,), {}, True, None),
        ("NPU", "npu_fusion_attention", (_X,), {}, True, None),
        ("Torch", "matmul", (_X, _X), {}, False, None),
    ],
)
def test_mutation_table(
    prefix: str, api: str, args: tuple[Any, ...], kwargs: dict[str, Any], mutates: bool, written: Any
) -> None:
    from msprobe.dump.pytorch.deferral import call_mutates, written_tensors

    assert call_mutates(prefix, api, args, kwargs) is mutates
    if mutates:
        got = written_tensors(prefix, api, args, kwargs)
        assert (got is None) == (written is None)
        if got is not None:
            assert [id(t) for t in got] == [id(t) for t in written]


def test_summary_cache_keeps_live_unchanged_tensors_across_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    from msprobe.dump.pytorch import stats as st

    calls: list[tuple[int, ...]] = []
    real = st.tensor_stats

    def counting(t: torch.Tensor) -> st.Stats:
        calls.append(tuple(t.shape))
        return real(t)

    monkeypatch.setattr(st, "tensor_stats", counting)
    cache = st.SummaryCache()
    p = nn.Parameter(torch.ones(3, 5))
    buf = torch.zeros(4)  # a buffer: kernels may write it without a version bump
    gone = torch.zeros(7)
    for t in (p, buf, gone):
        cache.get(t, md5=False)
    del gone
    cache.prune()  # a step ends
    assert len(cache._entries) == 1
    assert cache.get(p, md5=False)[0][0] == 1.0 and len(calls) == 3  # reused
    cache.get(buf, md5=False)
    assert len(calls) == 4
    with torch.no_grad():
        p.add_(1.0)  # optimizer.step()
    assert cache.get(p, md5=False)[0][0] == 2.0 and len(calls) == 5
    p.data = torch.full((3, 5), 7.0)  # new memory, no version bump
    assert cache.get(p, md5=False)[0][0] == 7.0 and len(calls) == 6


@pytest.mark.parametrize("distributed", [False, True], ids=["deferred", "copied"])
def test_l0_parameter_grads_accumulated_in_cpp_keep_each_backwards_value(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, distributed: bool
) -> None:
    """Two backward passes into the same ``.grad`` (accumulated in C++): with the worker the records
    equal the synchronous ones, whether the gradient is summarised later in place (the guard drains
    before the second backward) or, as with torch.distributed (C++ bucket writes), from a copy."""
    import msprobe.dump.pytorch.modules as modules

    monkeypatch.setattr(modules, "_distributed", lambda: distributed)
    copies = []
    for_worker = modules.gradient_for_worker

    def counting(grad: torch.Tensor) -> torch.Tensor:
        out = for_worker(grad)
        if out is not grad:
            assert torch.equal(out, grad) and out.data_ptr() != grad.data_ptr()
            copies.append(out)
        return out

    monkeypatch.setattr(modules, "gradient_for_worker", counting)
    results = []
    for thread in (True, False):
        torch.manual_seed(0)
        net = _Net()
        x = torch.randn(8, 32)
        out = tmp_path / ("thread" if thread else "sync")
        dbg = _dump(out, debugger, monkeypatch, thread, level="L0", dump_path=str(out / "dump"))
        dbg.start(model=net)
        net(x).pow(2).mean().backward()
        (net(x) * 3.0).sum().backward()
        dbg.stop()
        dbg.step()
        results.append(load_dump(out / "dump" / "step0" / "rank")["data"])
        from msprobe.pytorch import PrecisionDebugger

        PrecisionDebugger._shutdown()
    threaded, sync = results
    assert threaded == sync
    grads = [v for k, v in threaded.items() if "parameters_grad" in k or "parameters" in json.dumps(v)]
    assert grads
    assert bool(copies) is distributed  # the copy is taken only where C++ may write the gradient


@pytest.mark.parametrize("level", ["L1", "L0"])
def test_backward_pass_waits_for_queued_reads_of_existing_gradients(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    """A backward pass accumulates into an existing ``.grad`` in place, in C++: a summary of that
    gradient queued before it (a recorded call at L1, a module's input at L0) still gets the value
    before the accumulation. The wait covers the tensors that do not require grad only."""

    class Scale(nn.Module):
        def forward(self, g: torch.Tensor) -> torch.Tensor:
            return g * 0.5

    results = []
    for thread in (True, False):
        torch.manual_seed(0)
        w = nn.Parameter(torch.randn(256, 256))
        scale = Scale()
        holder = nn.ModuleDict({"scale": scale})
        out = tmp_path / ("thread" if thread else "sync")
        dbg = _dump(out, debugger, monkeypatch, thread, level=level, dump_path=str(out / "dump"))
        dbg.start(model=holder)
        for k in (2.0, 3.0, 5.0):
            (w * k).sum().backward()  # the second and third accumulate into w.grad in place
            assert w.grad is not None
            if level == "L1":
                torch.sin(w.grad)
            else:
                scale(w.grad)
        dbg.stop()
        dbg.step()
        results.append(load_dump(out / "dump" / "step0" / "rank")["data"])
        assert not (out / "dump" / "step0" / "rank" / "dump_error_info.log").exists()
        from msprobe.pytorch import PrecisionDebugger

        PrecisionDebugger._shutdown()
    threaded, sync = results
    assert threaded == sync
    reader = "Torch.sin." if level == "L1" else "Module.scale.Scale.forward."
    maxes = [r["input_args"][0]["Max"] for n, r in sync.items() if n.startswith(reader)]
    assert maxes == [2.0, 5.0, 10.0]  # the gradient of (w * k).sum() is k; .grad sums them


def test_only_torch_backward_passes_get_the_narrowed_wait() -> None:
    """``Tensor.backward``/``autograd.grad`` wait up to the last job reading a tensor that does not
    require grad; a call of another family that happens to be named so drains the whole queue."""
    from msprobe.dump.pytorch import waits as waiting

    waits: list[int | None] = []

    class FakeWorker:
        def drain(self, upto: int | None = None) -> None:
            waits.append(upto)

    class Reads:
        no_grad_reads_upto = 3

    for prefix, api in (
        ("Tensor", "backward"),
        ("Torch", "grad"),
        ("NPU", "grad"),
        ("Distributed", "backward"),
    ):
        waiting.before_write(FakeWorker(), Reads(), prefix, api, (), {})  # type: ignore[arg-type]
    assert waits == [3, 3, None, None]


def test_patched_operator_while_worker_busy_runs_once(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``c[0] = v`` goes through our patched ``__setitem__``, whose original torch reports back to the
    tracer; with the worker busy (a wait before the write) that report must not re-enter the patch."""
    dbg = _dump(tmp_path, debugger, monkeypatch, True)
    dbg.start()
    c = torch.sin(torch.linspace(-2.0, 3.0, 4096))
    for i in range(20):
        c[i] = 100.0 + i
        torch.exp(c)  # keeps the (slowed-down) worker busy
    dbg.stop()
    data = load_dump(tmp_path / RANK)["data"]
    assert [f"Tensor.__setitem__.{i}.forward" in data for i in range(20)] == [True] * 20
    assert "Tensor.__setitem__.20.forward" not in data  # recorded once per call
    assert data["Tensor.__setitem__.19.forward"]["input_args"][0]["Max"] == pytest.approx(118.0)


class _PartlyUsed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.full((8,), 2.0))
        self.unused = nn.Parameter(torch.ones(3))  # never in the graph: no gradient

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


class _Wrap(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.part = _PartlyUsed()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.part(x).relu()


@pytest.mark.parametrize("thread", [True, False], ids=["worker", "sync"])
def test_parameter_grads_stored_once_per_backward_and_at_flush(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, thread: bool
) -> None:
    """A parameters_grad record is stored when all its parameters reported (not once per parameter);
    one whose parameter never gets a gradient is stored with what arrived when the step is written."""
    from msprobe.dump.writer import RankStore

    puts: list[str] = []
    put = RankStore._put

    def counting_put(self: RankStore, name: str, value: Any) -> None:
        if name.endswith("parameters_grad"):
            puts.append(name)
        put(self, name, value)

    monkeypatch.setattr(RankStore, "_put", counting_put)
    torch.manual_seed(0)
    net = _Wrap()
    x = torch.randn(4, 8)
    dbg = _dump(tmp_path, debugger, monkeypatch, thread, level="L0")
    dbg.start(model=net)
    net(x).sum().backward()
    net(x).sum().backward()  # gradient accumulation: the record keeps the last gradient
    dbg.stop()
    data = load_dump(tmp_path / RANK)["data"]
    fc = data["Module.part.fc.Linear.parameters_grad"]
    expect = (net.part.fc.weight.grad / 2).abs().max().item()  # the second backward's own gradient
    assert fc["weight"][0]["Max"] == pytest.approx(expect, rel=1e-5)
    part = data["Module.part._PartlyUsed.parameters_grad"]
    assert part["unused"] == [None]
    assert part["scale"][0]["Max"] == pytest.approx((net.part.scale.grad / 2).max().item(), rel=1e-5)
    # fc: placeholder + one per backward; _PartlyUsed (``unused`` never reports): placeholder + flush
    assert puts.count("Module.part.fc.Linear.parameters_grad") == 3
    assert puts.count("Module.part._PartlyUsed.parameters_grad") == 2


def test_mutation_guard_checks_every_call_that_may_write() -> None:
    """The guard's fast path (functions that write only when given keywords) never hides a call that
    may write: in-place names, ``out=``/``inplace=True`` and positional ``max_norm`` still reach the
    check, repeated read-only calls do not."""
    from msprobe.dump.pytorch.deferral import MutationGuard

    seen: list[str] = []
    guard = MutationGuard(lambda func, args, kwargs: seen.append(func.__name__))
    x, w, out = torch.ones(4), torch.randn(10, 3), torch.empty(4)
    idx = torch.tensor([1, 2])
    with guard:
        for _ in range(3):
            torch.mul(x, 2.0)
            x.view(2, 2)
            _ = w.grad
        torch.mul(x, 2.0, out=out)
        x.add_(1.0)
        F.relu(x, inplace=True)
        F.embedding(idx, w)  # no max_norm: reaches the check too (the table decides by its arguments)
        F.embedding(idx, w, None, 1.0)
    assert seen == ["mul", "add_", "relu", "embedding", "embedding"]
