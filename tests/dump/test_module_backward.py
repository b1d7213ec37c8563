"""Module backward capture read off the autograd graph: the values torch's full backward hooks report,
without the identity nodes that change the gradients' summation order."""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.dump.pytorch import module_backward as mb
from tests.dump.conftest import load_dump


class Norm(nn.Module):
    """RMSNorm-like: its input feeds pow, mul, and (outside) the residual."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class QKV(nn.Module):
    """One hidden state feeding three projections and a residual."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = Norm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        a = torch.softmax(self.q(h) @ self.k(h).transpose(-1, -2), -1) @ self.v(h)
        return x + a


def _events(model: nn.Module) -> tuple[list[tuple[str, str, list[torch.Tensor]]], list[Any]]:
    """Watch every submodule; the events are (name, 'begin'|'end', grads) in firing order."""
    events: list[tuple[str, str, list[torch.Tensor]]] = []
    captures: list[Any] = []
    pending: dict[str, Any] = {}

    def pre(name: str) -> Any:
        def hook(mod: Any, args: Any, kwargs: Any) -> None:
            pending[name] = mb.inputs_needing_grad(tuple(args), dict(kwargs))

        return hook

    def post(name: str) -> Any:
        def hook(mod: Any, args: Any, kwargs: Any, out: Any) -> None:
            c = mb.watch(
                out,
                pending.pop(name),
                lambda g: events.append((name, "begin", [x for x in g if x is not None])),
                lambda g: events.append((name, "end", list(g))),
            )
            captures.append(c)

        return hook

    for name, m in model.named_modules():
        if name:
            m.register_forward_pre_hook(pre(name), with_kwargs=True)
            m.register_forward_hook(post(name), with_kwargs=True)
    return events, captures


def _full_hook_grads(model: nn.Module, *x: torch.Tensor) -> dict[str, tuple[list[Any], list[Any]]]:
    """(grad_input, grad_output) of each submodule from torch's full backward hooks."""
    out: dict[str, tuple[list[Any], list[Any]]] = {}
    for name, m in model.named_modules():
        if name:

            def hook(mod: Any, gi: Any, go: Any, name: str = name) -> None:
                out[name] = ([g for g in gi if g is not None], [g for g in go if g is not None])

            m.register_full_backward_hook(hook)
    model(*x).sum().backward()
    return out


def _run(seed: int, hooks: str) -> tuple[dict[str, torch.Tensor], Any]:
    torch.manual_seed(seed)
    model = nn.Sequential(QKV(8), QKV(8))
    x = torch.randn(2, 5, 8, requires_grad=True)
    info: Any = None
    if hooks == "full":
        info = _full_hook_grads(model, x)
    else:
        if hooks == "graph":
            info = _events(model)[0]
        model(x).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert x.grad is not None
    grads["x"] = x.grad.clone()
    return grads, info


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**16))
def test_gradients_are_bitwise_those_of_an_unhooked_run(seed: int) -> None:
    plain, _ = _run(seed, "none")
    watched, events = _run(seed, "graph")
    assert events, "the capture must have fired"
    assert plain.keys() == watched.keys()
    assert [k for k in plain if not torch.equal(plain[k], watched[k])] == []


def test_values_are_those_of_full_backward_hooks() -> None:
    _, full = _run(3, "full")
    _, events = _run(3, "graph")
    ends = {name: grads for name, kind, grads in events if kind == "end"}
    begins = {name: grads for name, kind, grads in events if kind == "begin"}
    assert ends.keys() == full.keys() == begins.keys()
    for name, (grad_input, grad_output) in full.items():
        # the module's own contribution (Norm's input also feeds the residual outside it)
        assert len(ends[name]) == len(grad_input), name
        for a, b in zip(ends[name], grad_input):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
        assert len(begins[name]) == len(grad_output), name
        for a, b in zip(begins[name], grad_output):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_a_parent_sharing_its_last_childs_output_begins_first_and_ends_last() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)))
    events, _ = _events(model)
    model(torch.randn(3, 4, requires_grad=True)).sum().backward()
    order = [(name, kind) for name, kind, _ in events]
    assert order.index(("1", "begin")) < order.index(("1.1", "begin"))
    assert order.index(("1.0", "end")) < order.index(("1", "end")) < order.index(("0", "begin"))


def test_no_input_needing_grad_ends_at_once_with_no_gradients() -> None:
    emb = nn.Embedding(10, 4)
    events, _ = _events(nn.Sequential(emb))
    emb(torch.tensor([1, 2])).sum().backward()
    assert [(n, k, len(g)) for n, k, g in events] == [("0", "begin", 1), ("0", "end", 0)]


class Identity(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class InPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        y.mul_(3.0)
        return y


@pytest.mark.parametrize(("module", "factor"), [(Identity(), 2.0), (InPlace(), 6.0)])
def test_identity_and_in_place_modules_report_their_input_gradient(module: nn.Module, factor: float) -> None:
    events, _ = _events(nn.Sequential(module))
    x = torch.randn(3, requires_grad=True)
    (module(x * 1.0) * 2.0).sum().backward()
    end = [g for name, kind, g in events if kind == "end"]
    assert len(end) == 1 and len(end[0]) == 1
    torch.testing.assert_close(end[0][0], torch.full((3,), factor))


@dataclasses.dataclass
class Out:
    a: torch.Tensor
    b: torch.Tensor | None = None


Pair = namedtuple("Pair", "first second")


class Structured(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> Any:
        y = self.lin(x)
        if self.kind == "dict":
            return {"y": y, "n": None, "z": 2 * y}
        if self.kind == "dataclass":
            return Out(y)
        return Pair(y, 2 * y)


@pytest.mark.parametrize("kind", ["dict", "dataclass", "namedtuple"])
def test_structured_outputs_are_watched_through(kind: str) -> None:
    model = Structured(kind)
    events, _ = _events(nn.Sequential(model))
    x = torch.randn(2, 3, requires_grad=True)
    out = model(x)
    y = out["y"] if kind == "dict" else out.a if kind == "dataclass" else out.first
    y.sum().backward()
    begin = [g for name, kind_, g in events if name == "0" and kind_ == "begin"]
    assert len(begin) == 1 and len(begin[0]) == 1  # the unused second output computes no gradient
    torch.testing.assert_close(begin[0][0], torch.ones(2, 3))


def test_released_captures_record_nothing() -> None:
    lin = nn.Linear(3, 3)
    events, captures = _events(nn.Sequential(lin))
    y = lin(torch.randn(2, 3, requires_grad=True))
    for c in captures:
        c.release()
    y.sum().backward()
    assert events == []


class Weird:
    """An output no dump format knows."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("no attributes here")


class ReturnsWeird(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> Any:
        return Weird(self.lin(x))


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_module_returning_an_arbitrary_object_never_breaks_training(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(ReturnsWeird())
    x = torch.randn(2, 3, requires_grad=True)
    dbg = debugger(level=level)
    dbg.start(model=model)
    out = model(x)
    out.t.sum().backward()
    dbg.stop()
    dbg.step()
    assert x.grad is not None
    data = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    # the object is written as null; its inner Linear is recorded both ways
    assert data["Module.0.ReturnsWeird.forward.0"]["output"] == [None]
    assert {"Module.0.lin.Linear.forward.0", "Module.0.lin.Linear.backward.0"} <= data.keys()
    assert "Module.0.ReturnsWeird.backward.0" not in data


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.lin(a).sum() + self.lin(b).sum()


def test_backward_n_is_the_backward_of_forward_n(tmp_path: Path, debugger: Any) -> None:
    model = Twice()
    a, b = torch.randn(2, 3, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    dbg = debugger(level="L0")
    dbg.start(model=model)
    model(a, b).backward()
    dbg.stop()
    dbg.step()
    data = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    for n, rows in ((0, 2), (1, 5)):
        assert data[f"Module.lin.Linear.forward.{n}"]["input_args"][0]["shape"] == [rows, 3]
        record = data[f"Module.lin.Linear.backward.{n}"]
        assert [g["shape"] for g in record["input"] + record["output"]] == [[rows, 3], [rows, 3]]


class _ReturnsItsParameter(nn.Module):
    """A learned table returned as it is (position embeddings, learned queries)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(4))

    def forward(self) -> torch.Tensor:
        return self.table


class _AddsTable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = _ReturnsItsParameter()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pos().float()  # float(): an API returning its argument, a leaf


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_returned_parameter_gets_one_hook_and_each_step_only_its_own_records(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """A parameter lives across steps, and so do its hooks: they must not pile up, one per step, nor
    record an earlier step's calls again."""
    net = _AddsTable()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    dbg = debugger(level=level)
    calls = [3, 2, 1] + [1] * 20
    for n in calls:
        dbg.start(model=net)
        for _ in range(n):
            net(torch.ones(4)).sum().backward()
        opt.step()
        opt.zero_grad()
        dbg.stop()
        dbg.step()
    assert len(net.pos.table._backward_hooks or {}) <= 1
    for step, n in enumerate(calls[:3]):
        data = load_dump(tmp_path / "dump" / f"step{step}" / "rank")["data"]
        backward = sorted(k for k in data if ".backward." in k and "_ReturnsItsParameter" in k)
        assert backward == [f"Module.pos._ReturnsItsParameter.backward.{i}" for i in range(n)]
        assert not [k for k in data if k.startswith("Tensor.float.") and k.endswith(".backward")]


def test_a_tensor_written_in_place_keeps_its_earlier_versions_watchers() -> None:
    """A module returns ``t``, its caller writes it in place and another module returns it: each
    version has its own gradient, and both watchers get theirs."""
    x = torch.ones(3, requires_grad=True)
    t = x * 2
    seen: list[tuple[str, list[float]]] = []
    mb.on_gradient(t, lambda g: seen.append(("before", g.tolist())))
    t.mul_(3)
    mb.on_gradient(t, lambda g: seen.append(("after", g.tolist())))
    t.sum().backward()
    assert seen == [("after", [1.0, 1.0, 1.0]), ("before", [3.0, 3.0, 3.0])]


def test_a_finished_capture_keeps_no_gradient_alive() -> None:
    import weakref

    lin = nn.Linear(3, 3)
    seen: list[Any] = []
    x = torch.randn(2, 3, requires_grad=True)
    capture = mb.watch(
        lin(x),
        mb.inputs_needing_grad((x,), {}),
        lambda g: seen.extend(weakref.ref(t) for t in g if t is not None),
        lambda g: seen.extend(weakref.ref(t) for t in g),
    )
    assert capture is not None
    lin(x).sum().backward()  # another call: this capture's graph is not the one run
    assert seen == []
    y = lin(x)
    capture = mb.watch(
        y,
        mb.inputs_needing_grad((x,), {}),
        lambda g: seen.extend(weakref.ref(t) for t in g if t is not None),
        lambda g: seen.extend(weakref.ref(t) for t in g),
    )
    y.sum().backward()
    del y
    assert len(seen) == 2 and all(ref() is None for ref in seen)
    assert capture is not None  # still referenced, holding nothing


class _UsesInputTwice(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + torch.pow(x, 3)  # two consumers of the input: their gradients are summed


class _LinearThenTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.act = nn.Linear(4, 4), _UsesInputTwice()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x)).sum()


@pytest.mark.parametrize("level", ["mix", "L0"])
def test_summing_a_modules_input_gradients_records_no_api_call(tmp_path: Path, level: str) -> None:
    """The module capture adds up an input's gradient contributions during the backward, with the
    API capture on in mix: that sum is ours, not the model's, and no API record may show it."""
    from msprobe.pytorch import PrecisionDebugger

    api_names = {}
    for lv in ("L1", level):
        PrecisionDebugger._shutdown()
        try:
            dbg = PrecisionDebugger(dump_path=str(tmp_path / lv), task="statistics", level=lv)
            torch.manual_seed(0)
            model = _LinearThenTwice()
            dbg.start(model=model)
            model(torch.randn(2, 4)).backward()
            dbg.stop()
            dbg.step()
        finally:
            PrecisionDebugger._shutdown()
        data = load_dump(tmp_path / lv / "step0" / "rank")["data"]
        api_names[lv] = {k for k in data if not k.startswith("Module.")}
        if lv != "L1":
            backward = data["Module.act._UsesInputTwice.backward.0"]
            assert len(backward["output"]) == 1  # the summed input gradient is recorded all the same
    assert "Tensor.__add__.0.forward" in api_names["L1"]
    assert api_names[level] == (api_names["L1"] if level == "mix" else set())


def test_a_user_forward_hook_that_replaces_the_output_is_what_the_record_holds(
    tmp_path: Path, debugger: Any
) -> None:
    """Model code registers forward hooks that return a new output; the next module receives that
    one, and so do the record and its backward (8.1.1 records the module's own output: its hook
    runs first; a documented deviation)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[0].register_forward_hook(lambda mod, args, out: out * 0 + 7.0)
    dbg = debugger(level="L0")
    dbg.start(model=model)
    model(torch.randn(2, 4)).sum().backward()
    dbg.stop()
    data = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    out = data["Module.0.Linear.forward.0"]["output"][0]
    assert (
        (out["Max"], out["Min"])
        == (7.0, 7.0)
        == tuple(data["Module.1.Linear.forward.0"]["input_args"][0][k] for k in ("Max", "Min"))
    )
    grad_out = data["Module.0.Linear.backward.0"]["input"][0]["Norm"]
    assert grad_out == data["Module.1.Linear.backward.0"]["output"][0]["Norm"] > 0


class _NoGradForX(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * w

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[None, torch.Tensor]:
        return None, g.sum(0)


class _StopGradient(nn.Module):
    """Two inputs that need a gradient; the first gets none (a custom Function's None, or an input
    used only detached, as SimSiam's stop-gradient)."""

    def __init__(self, detached: bool) -> None:
        super().__init__()
        self.detached = detached
        self.w = nn.Parameter(torch.ones(5))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        first = x.detach() * 2 if self.detached else _NoGradForX.apply(x, self.w)
        return first + 3 * y


class _Outer(nn.Module):
    def __init__(self, detached: bool) -> None:
        super().__init__()
        self.inner = _StopGradient(detached)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.inner(x, y)


@pytest.mark.parametrize("detached", [False, True], ids=["Function returns None", "input used detached"])
def test_an_input_that_gets_no_gradient_keeps_its_place_with_zeros(detached: bool) -> None:
    """torch's full backward hooks give such an input zeros; dropping it moved the next input's
    gradient to its place."""
    x = torch.ones(3, 5, requires_grad=True)
    y = torch.ones(3, 5, requires_grad=True)
    full = _full_hook_grads(_Outer(detached), x, y)["inner"][0]
    events, _ = _events(model := _Outer(detached))
    model(x, y).sum().backward()
    ends = [grads for name, kind, grads in events if kind == "end"]
    assert len(ends) == 1 and len(ends[0]) == len(full) == 2
    for a, b in zip(ends[0], full):
        torch.testing.assert_close(a, b)
    assert torch.count_nonzero(ends[0][0]) == 0 and torch.equal(ends[0][1], torch.full((3, 5), 3.0))


def test_the_record_of_a_module_whose_input_gets_no_gradient_keeps_the_positions(
    tmp_path: Path, debugger: Any
) -> None:
    model = _Outer(detached=True)
    x = torch.ones(3, 5, requires_grad=True)
    y = torch.ones(3, 5, requires_grad=True)
    dbg = debugger(level="L0")
    dbg.start(model=model)
    model(x, y).sum().backward()
    dbg.stop()
    record = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]["Module.inner._StopGradient.backward.0"]
    assert [(g["Max"], g["Min"]) for g in record["output"]] == [(0.0, 0.0), (3.0, 3.0)]


class _Three(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return q * 2 + k * 3 + v * 5


class _SelfAttentionLike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Three()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x, x, x)  # nn.MultiheadAttention's attn(x, x, x)


def test_a_tensor_passed_at_several_positions_has_one_entry_holding_its_summed_gradient() -> None:
    """Documented deviation: the graph has one edge for the tensor, so its gradient is reported once,
    at its first position, summed over the positions (full backward hooks: one per position)."""
    x = torch.ones(2, 3, requires_grad=True)
    full = _full_hook_grads(_SelfAttentionLike(), x)["inner"][0]
    assert [float(g[0, 0]) for g in full] == [2.0, 3.0, 5.0]
    events, _ = _events(model := _SelfAttentionLike())
    model(x).sum().backward()
    ends = {name: grads for name, kind, grads in events if kind == "end"}
    assert len(ends["inner"]) == 1
    assert torch.equal(ends["inner"][0], sum(full))


class _ReturnsParameter(nn.Module):
    """A learned positional embedding: forward returns the parameter itself (a leaf)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 3))

    def forward(self) -> torch.Tensor:
        return self.w


class _PosNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = _ReturnsParameter()
        self.l = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(x + self.pos())


@pytest.mark.parametrize("level", ["L0", "mix"])
@pytest.mark.parametrize("case", ["identity_on_input", "returns_parameter"])
def test_a_module_returning_a_leaf_under_autograd_grad_leaves_training_alone(
    debugger: Any, tmp_path: Path, level: str, case: str
) -> None:
    """A module whose output is a leaf (nn.Identity on an input that requires grad, a module returning
    its parameter), differentiated with torch.autograd.grad (gradient penalty, MAML, manual grads):
    torch cannot say whether a leaf's accumulator runs under autograd.grad; the step runs as without
    the dump and the module gets its backward record."""
    torch.manual_seed(0)
    x = torch.randn(5, 3, requires_grad=case == "identity_on_input")
    model: nn.Module
    if case == "identity_on_input":
        model = nn.Sequential(nn.Identity(), nn.Linear(3, 4))
        wrt = [x]
        name = "Module.0.Identity.backward.0"
    else:
        model = _PosNet()
        wrt = list(model.parameters())
        name = "Module.pos._ReturnsParameter.backward.0"
    want = torch.autograd.grad(model(x).pow(2).sum(), wrt)
    dbg = debugger(level=level)
    dbg.start(model=model)
    got = torch.autograd.grad(model(x).pow(2).sum(), wrt)
    dbg.stop()
    dbg.step()
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    rank = tmp_path / "dump" / "step0" / "rank"
    assert not (rank / "dump_error_info.log").exists()
    assert name in load_dump(rank)["data"]


def _one_step(tmp_path: Path, debugger: Any, level: str, model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """The records of one forward and backward of ``model`` on ``x``, dumped at ``level``."""
    dbg = debugger(level=level)
    dbg.start(model=model)
    model(x).backward()
    dbg.stop()
    dbg.step()
    return load_dump(tmp_path / "dump" / "step0" / "rank")["data"]


class _TwoOutputs(torch.autograd.Function):
    """One autograd node making two outputs (a fused op returning ``(out, aux)``)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x * 3

    @staticmethod
    def backward(ctx: Any, ga: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
        return ga * 2 + gb * 3


class _Pair(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _TwoOutputs.apply(x)


class _UsesFirstOfPair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.pair = _Pair()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, _aux = self.pair(self.lin(x))  # the loss never reaches the second output
        return a.sum()


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_module_whose_node_runs_without_a_gradient_for_one_output_keeps_its_backward(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    # The node that made both outputs runs, with no gradient for the second one (torch's full
    # backward hooks fire, with grad_output [g, None]); the record must not wait for that gradient.
    # Under a reentrant checkpoint (HF T5 with use_reentrant=True) a block's pass-through
    # position bias is such an output, and 3 of T5's 4 blocks lost their backward record.
    torch.manual_seed(0)
    data = _one_step(tmp_path, debugger, level, _UsesFirstOfPair(), torch.randn(3, 4))
    record = data["Module.pair._Pair.backward.0"]
    assert [g["shape"] for g in record["input"]] == [[3, 4]]  # grad of the first output only
    assert [g["shape"] for g in record["output"]] == [[3, 4]]
    assert "Module.lin.Linear.backward.0" in data


class _MakesALeaf(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        bias = torch.zeros(4)
        bias.requires_grad = True  # what T5Attention does under gradient checkpointing
        return self.lin(x) + bias, bias


class _ReentrantBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _MakesALeaf()

    def forward(self, x: torch.Tensor) -> Any:
        return torch.utils.checkpoint.checkpoint(self.inner, x, use_reentrant=True)


class _UsesBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _ReentrantBlock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, bias = self.block(x)
        return h.sum() + bias.sum()


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_leaf_that_a_reentrant_checkpoint_returns_is_watched_at_its_new_node(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    # The inner module returns a leaf (watched by a hook on the leaf); the checkpoint's Function then
    # gives that very tensor its node, with no version change: the block's watcher must go on that
    # node, not on the leaf's hook, which never runs again (T5 blocks under use_reentrant=True).
    torch.manual_seed(0)
    data = _one_step(tmp_path, debugger, level, _UsesBlock(), torch.randn(3, 4, requires_grad=True))
    record = data["Module.block._ReentrantBlock.backward.0"]
    assert [g["shape"] for g in record["input"]] == [[3, 4], [4]]
    assert [g["shape"] for g in record["output"]] == [[3, 4]]


class _Passthrough(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _ProbesUnderNoGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.probe = _Passthrough()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        with torch.no_grad():
            self.probe(h)  # returns h, which requires grad, as it is
        return h.sum()


def test_a_module_called_under_no_grad_has_no_backward_record(tmp_path: Path, debugger: Any) -> None:
    # torch's full backward hooks are not set up under no_grad: such a call has no backward, even
    # when it returns a tensor that requires grad (the gradient of h is lin's, not probe's)
    data = _one_step(tmp_path, debugger, "L0", _ProbesUnderNoGrad(), torch.randn(2, 4))
    assert "Module.probe._Passthrough.forward.0" in data
    assert "Module.probe._Passthrough.backward.0" not in data
    assert "Module.lin.Linear.backward.0" in data
