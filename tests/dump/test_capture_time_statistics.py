"""Statistics taken at capture time: in-place writes after a call never change its record, and
batching (how many records share one fetch of device statistics and one journal write) never
changes the dump.

These tests modify captured tensors in place right after the call that produced them, through every
route torch offers, and compare dumps made record by record, in the default batches and once a step
(``async_dump``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from msprobe.dump import session as session_mod
from tests.dump.conftest import load_dump

RANK = Path("dump") / "step0" / "rank"
RANK_FILES = ("dump.json", "stack.json", "construct.json")


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


def _batching(monkeypatch: pytest.MonkeyPatch, mode: str) -> dict[str, Any]:
    """Config for one batching mode: ``record`` (a batch per record), ``default``, ``step``."""
    if mode == "record":
        monkeypatch.setattr(
            session_mod, "batching", lambda config: {"batch_records": 1, "batch_seconds": 0.0}
        )
    else:
        monkeypatch.setattr(session_mod, "batching", _real_batching)
    return {"async_dump": True} if mode == "step" else {}


_real_batching = session_mod.batching


def test_inplace_after_capture_keeps_pre_modification_statistics(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger()
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
    ("level", "data_mode", "summary_mode"),
    [
        ("L1", ["all"], "statistics"),
        ("L1", ["all"], "md5"),
        ("L0", ["all"], "statistics"),
        ("mix", ["all"], "statistics"),
        ("mix", ["all"], "md5"),
        ("L0", ["input"], "statistics"),
    ],
)
def test_batched_dump_equals_the_record_by_record_dump(
    tmp_path: Path,
    debugger: Any,
    monkeypatch: pytest.MonkeyPatch,
    level: str,
    data_mode: list[str],
    summary_mode: str,
) -> None:
    results = []
    section = {"statistics": {"scope": [], "list": [], "data_mode": data_mode, "summary_mode": summary_mode}}
    modes = ("record", "default", "step") if summary_mode == "statistics" else ("record", "default")
    for mode in modes:
        out = tmp_path / mode
        extra = _batching(monkeypatch, mode)
        dbg = debugger(level=level, dump_path=str(out / "dump"), **section, **extra)
        _train_body()(dbg)
        if level == "L1":
            dbg.start()
            _inplace_body()
            dbg.stop()
        steps = sorted(p.name for p in (out / "dump").iterdir())
        results.append(
            {(s, f): (out / "dump" / s / "rank" / f).read_bytes() for s in steps for f in RANK_FILES}
        )
        for s in steps:
            assert not (out / "dump" / s / "rank" / "dump_error_info.log").exists()
        from msprobe.pytorch import PrecisionDebugger

        PrecisionDebugger._shutdown()
    first = results[0]
    assert [s for s, f in first if f == "dump.json"] == ["step0", "step1", "step2"][
        : 3 if level == "L1" else 2
    ]
    for other in results[1:]:
        assert other == first
    data = json.loads(first[("step0", "dump.json")])["data"]
    assert data and all(json.dumps(v).count("null") < len(json.dumps(v)) for v in data.values())
    if summary_mode == "md5":
        assert '"md5": "' in first[("step0", "dump.json")].decode()
    assert any("parameters" in json.dumps(v) for v in data.values()) or level == "L1"


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
    from msprobe.dump.pytorch.mutation import call_mutates, written_tensors

    assert call_mutates(prefix, api, args, kwargs) is mutates
    if mutates:
        got = written_tensors(prefix, api, args, kwargs)
        assert (got is None) == (written is None)
        if got is not None:
            assert [id(t) for t in got] == [id(t) for t in written]


def test_summary_cache_forgets_a_storage_written_through_an_alias_and_everything_when_cleared() -> None:
    from msprobe.dump.pytorch.stats import SummaryCache
    from tests.dump.test_units import _summary

    added: list[torch.Tensor] = []
    cache = SummaryCache()
    p = nn.Parameter(torch.ones(3, 5))
    big = torch.ones(64, 128)  # also keyed by its element sequence
    view = big.t()
    for t in (p, big, view):
        _summary(cache, t, False, added)
    assert len(added) == 2  # the transposed view shares its source's summary
    assert _summary(cache, p, False, added)[0][0] == 1.0 and len(added) == 2  # type: ignore[index]
    alias, big_alias = p.data, big.data  # version counters of their own
    alias.add_(1.0)
    big_alias.mul_(3.0)
    assert p._version == 0 and big._version == 0  # nothing tells the cache, but the call that wrote
    cache.forget(alias)
    cache.forget(big_alias)
    assert _summary(cache, p, False, added)[0][0] == 2.0 and len(added) == 3  # type: ignore[index]
    assert _summary(cache, view, False, added)[0][0] == 3.0 and len(added) == 4  # type: ignore[index]
    assert _summary(cache, big, False, added)[0][0] == 3.0 and len(added) == 4  # type: ignore[index]
    p.data = torch.full((3, 5), 7.0)  # new memory, no version bump
    assert _summary(cache, p, False, added)[0][0] == 7.0 and len(added) == 5  # type: ignore[index]
    cache.clear()  # a dump window opens
    assert _summary(cache, p, False, added)[0][0] == 7.0 and len(added) == 6  # type: ignore[index]


@pytest.mark.parametrize("level", ["L1", "L0"])
def test_a_gradient_summarised_before_a_backward_pass_keeps_its_value(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """A backward pass accumulates into an existing ``.grad`` in place, in C++: a summary of that
    gradient queued before it (a recorded call at L1, a module's input at L0) still gets the value
    before the accumulation."""

    class Scale(nn.Module):
        def forward(self, g: torch.Tensor) -> torch.Tensor:
            return g * 0.5

    torch.manual_seed(0)
    if True:
        w = nn.Parameter(torch.randn(256, 256))
        scale = Scale()
        holder = nn.ModuleDict({"scale": scale})
        dbg = debugger(level=level)
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
    sync = load_dump(tmp_path / RANK)["data"]
    assert not (tmp_path / RANK / "dump_error_info.log").exists()
    reader = "Torch.sin." if level == "L1" else "Module.scale.Scale.forward."
    maxes = [r["input_args"][0]["Max"] for n, r in sync.items() if n.startswith(reader)]
    assert maxes == [2.0, 5.0, 10.0]  # the gradient of (w * k).sum() is k; .grad sums them


def test_patched_operator_is_recorded_once_per_call(tmp_path: Path, debugger: Any) -> None:
    """``c[0] = v`` goes through our patched ``__setitem__``, whose original torch reports back to the
    tracer: that report must not re-enter the patch."""
    dbg = debugger()
    dbg.start()
    c = torch.sin(torch.linspace(-2.0, 3.0, 4096))
    for i in range(20):
        c[i] = 100.0 + i
        torch.exp(c)
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


def test_parameter_grads_stored_once_per_backward_and_at_flush(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parameters_grad record is stored when all its parameters reported (not once per parameter);
    one whose parameter never gets a gradient is stored with what arrived when the step is written."""
    from msprobe.dump.writer import RankStore

    puts: list[str] = []
    put = RankStore.put

    def counting_put(self: RankStore, name: str, value: Any) -> None:
        if name.endswith("parameters_grad"):
            puts.append(name)
        put(self, name, value)

    monkeypatch.setattr(RankStore, "put", counting_put)
    torch.manual_seed(0)
    net = _Wrap()
    x = torch.randn(4, 8)
    dbg = debugger(level="L0")
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


def test_calls_under_inference_mode_are_recorded_with_statistics(tmp_path: Path, debugger: Any) -> None:
    """Inference tensors have no version counter: summarised every time, never cached."""
    dbg = debugger()
    dbg.start()
    with torch.inference_mode():
        x = torch.arange(6.0).reshape(2, 3)
        y = torch.tanh(x)
        torch.exp(y)
    dbg.stop()
    data = load_dump(tmp_path / RANK)["data"]
    assert data["Torch.exp.0.forward"]["input_args"][0]["Max"] == pytest.approx(float(torch.tanh(x).max()))
    assert data["Torch.tanh.0.forward"]["output"][0]["Max"] == pytest.approx(float(torch.tanh(x).max()))
    assert not (tmp_path / RANK / "dump_error_info.log").exists()


def test_a_scalar_written_in_place_after_capture_keeps_its_value(tmp_path: Path, debugger: Any) -> None:
    """A 0-dim tensor is its own statistic (``num_batches_tracked.add_(1)``, a step counter)."""
    dbg = debugger()
    dbg.start()
    count, scale = torch.tensor(0), torch.tensor(0.5)
    count.add_(1)
    scale.mul_(4.0)
    torch.mul(count, scale)
    dbg.stop()
    data = load_dump(tmp_path / RANK)["data"]
    assert data["Tensor.add_.0.forward"]["input_args"][0]["Max"] == 0
    assert data["Tensor.add_.0.forward"]["output"][0]["Max"] == 1
    assert data["Tensor.mul_.0.forward"]["input_args"][0]["Max"] == 0.5
    assert data["Torch.mul.0.forward"]["input_args"][1]["Max"] == 2.0


class _Attention(nn.Module):
    """Attention over tensors large enough for the summary cache's element-sequence key: views,
    splits, transposes and permutes of summarised tensors, forward and backward."""

    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.d, self.heads = d, heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = self.proj(att.transpose(1, 2).reshape(b, t, d))
        return (y.permute(2, 0, 1) * 2.0).permute(1, 2, 0) + x.transpose(0, 2).transpose(0, 2)


@pytest.mark.parametrize(("level", "summary_mode"), [("L1", "statistics"), ("mix", "md5")])
def test_shared_summaries_equal_summaries_taken_anew(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, level: str, summary_mode: str
) -> None:
    """A summary the cache shares (the same tensor unchanged, a view, a transpose) is the one taken
    anew: the dump with the cache equals the dump with every tensor summarised on its own."""
    from msprobe.dump.pytorch import stats
    from msprobe.pytorch import PrecisionDebugger

    shared = []
    find = stats.SummaryCache.same_layout

    def counted(self: Any, *args: Any) -> Any:
        slot = find(self, *args)
        shared.append(slot is not None)
        return slot

    monkeypatch.setattr(stats.SummaryCache, "same_layout", counted)
    section = {"statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}}
    dumps = []
    for name in ("cached", "anew"):
        if name == "anew":
            monkeypatch.setattr(stats.SummaryCache, "slot", lambda self, t, md5: (stats.Slot(md5), True))
        torch.manual_seed(0)
        net = _Attention()
        x = torch.randn(2, 64, 64, requires_grad=True)
        dbg = debugger(level=level, dump_path=str(tmp_path / name), **section)
        dbg.start(model=net)
        net(x).square().mean().backward()
        dbg.stop()
        dumps.append((tmp_path / name / "step0" / "rank" / "dump.json").read_text())
        PrecisionDebugger._shutdown()
    assert sum(shared) >= 4  # views and transposes of summarised tensors did share a summary
    assert dumps[0] == dumps[1]
