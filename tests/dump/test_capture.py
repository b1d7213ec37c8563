"""L1 capture on real torch calls: names, outermost-only, identity, argument encodings, backward order."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import gelu as early_gelu  # bound before any debugger exists
from torch.nn.functional import max_pool2d as early_max_pool2d

from tests.dump.conftest import load_dump

RANK = Path("dump") / "step0" / "rank"


def run(tmp_path: Path, make: Any, body: Any, **cfg: Any) -> dict[str, Any]:
    dbg = make(**cfg)
    dbg.start()
    body()
    dbg.stop()
    return load_dump(tmp_path / RANK)


def test_early_bound_function_recorded_and_identity_kept(tmp_path: Path, debugger: Any) -> None:
    x = torch.randn(3, 4)
    seen = {}

    def body() -> None:
        seen["is"] = early_gelu is F.gelu and early_max_pool2d is F.max_pool2d
        early_gelu(x)
        early_max_pool2d(x.view(1, 1, 3, 4), 2)  # a Python function of torch's

    data = run(tmp_path, debugger, body)["data"]
    assert seen["is"] is True
    assert list(data) == ["Functional.gelu.0.forward", "Functional.max_pool2d.0.forward"]


def test_outermost_only_and_counters(tmp_path: Path, debugger: Any) -> None:
    x = torch.randn(3, 8)
    w = torch.randn(4, 8)

    def body() -> None:
        F.linear(x, w)  # linear's internals (t, mm...) are not recorded
        F.linear(x, w)
        torch.relu(x)

    data = run(tmp_path, debugger, body)["data"]
    assert list(data) == [
        "Functional.linear.0.forward",
        "Functional.linear.1.forward",
        "Torch.relu.0.forward",
    ]


def test_inplace_input_recorded_before_the_call(tmp_path: Path, debugger: Any) -> None:
    x = torch.ones(4)

    def body() -> None:
        x.add_(1.0)

    rec = run(tmp_path, debugger, body)["data"]["Tensor.add_.0.forward"]
    assert rec["input_args"][0]["Max"] == 1.0
    assert rec["output"][0]["Max"] == 2.0
    assert rec["input_args"][1] == {"type": "float", "value": 1.0}
    assert rec["is_recompute"] is False


def test_user_call_signature_kept(tmp_path: Path, debugger: Any) -> None:
    x = torch.randn(2, 5)

    def body() -> None:
        F.relu(x)  # F.relu re-packs as (x, inplace=False) internally; the record keeps the user's call
        F.log_softmax(x, dim=1)
        F.softmax(x, 1)

    data = run(tmp_path, debugger, body)["data"]
    assert data["Functional.relu.0.forward"]["input_kwargs"] == {}
    assert len(data["Functional.relu.0.forward"]["input_args"]) == 1
    assert data["Functional.log_softmax.0.forward"]["input_kwargs"] == {"dim": {"type": "int", "value": 1}}
    assert data["Functional.softmax.0.forward"]["input_args"][1] == {"type": "int", "value": 1}


def test_a_partial_records_the_arguments_it_added(tmp_path: Path, debugger: Any) -> None:
    """``functools.partial`` passes more than its call site shows: the record keeps every argument
    (as a call through ``fn(*args, **kwargs)`` does), so the replay runs the call that was made."""
    x, target = torch.randn(4, 5), torch.tensor([0, 1, 2, 3])

    def body() -> None:
        functools.partial(F.cross_entropy, reduction="sum")(x, target)
        functools.partial(F.cross_entropy, x)(target)
        F.cross_entropy(x, target, reduction="sum")

    data = run(tmp_path, debugger, body)["data"]
    summed, positional, direct = (data[f"Functional.cross_entropy.{i}.forward"] for i in range(3))
    assert summed["input_kwargs"]["reduction"] == {"type": "str", "value": "sum"}
    assert len(positional["input_args"]) == 2 and positional["input_args"][1]["dtype"] == "torch.int64"
    assert direct["input_kwargs"] == {"reduction": {"type": "str", "value": "sum"}}  # as the user wrote it


def test_value_encodings(tmp_path: Path, debugger: Any) -> None:
    t = torch.arange(12.0).reshape(3, 4)

    def body() -> None:
        t.sum(dim=(0, 1), keepdim=True)
        torch.clamp(t, min=None, max=1.0)
        t.reshape(torch.Size([4, 3]))
        t[0:2] = 0.5  # __setitem__ with a slice
        torch.full([2], 1.0, dtype=torch.float16, device="cpu")
        t.to(torch.float64)
        _ = t > 3
        torch.max(t, 1)
        t[np.int64(1) : np.int64(3)] = 0.0  # numpy bounds
        torch.full((2,), np.float64(1.5))

    data = run(tmp_path, debugger, body)["data"]
    assert data["Tensor.__setitem__.1.forward"]["input_args"][1] == {"type": "slice", "value": [1, 3, None]}
    assert data["Torch.full.1.forward"]["input_args"][1] == {"type": "float64", "value": 1.5}
    assert data["Tensor.sum.0.forward"]["input_kwargs"] == {
        "dim": [{"type": "int", "value": 0}, {"type": "int", "value": 1}],
        "keepdim": {"type": "bool", "value": True},
    }
    assert data["Torch.clamp.0.forward"]["input_kwargs"] == {
        "min": None,
        "max": {"type": "float", "value": 1.0},
    }
    assert data["Tensor.reshape.0.forward"]["input_args"][1] == {"type": "torch.Size", "value": [4, 3]}
    assert data["Tensor.__setitem__.0.forward"]["input_args"][1] == {"type": "slice", "value": [0, 2, None]}
    full = data["Torch.full.0.forward"]
    assert full["input_args"][0] == [{"type": "int", "value": 2}]
    assert full["input_kwargs"]["dtype"] == {"type": "torch.dtype", "value": "torch.float16"}
    assert full["input_kwargs"]["device"] == {"type": "torch.device", "value": "cpu"}
    assert data["Tensor.to.0.forward"]["input_args"][1] == {}  # positional dtype: upstream's quirk
    gt = data["Tensor.__gt__.0.forward"]["output"][0]
    assert (gt["dtype"], gt["Max"], gt["Min"], gt["Mean"], gt["Norm"]) == (
        "torch.bool",
        True,
        False,
        None,
        None,
    )
    assert [o["dtype"] for o in data["Torch.max.0.forward"]["output"]] == ["torch.float32", "torch.int64"]


def test_backward_follows_autograd_node_order(tmp_path: Path, debugger: Any) -> None:
    x = torch.randn(3, 8)
    lin = nn.Linear(8, 4)

    def body() -> None:
        F.linear(x, lin.weight, lin.bias).sum().backward()

    data = run(tmp_path, debugger, body)["data"]
    bw = data["Functional.linear.0.backward"]
    # AddmmBackward: (grad bias, grad x = None since x needs no grad, grad of weight.T)
    assert bw["input"][0]["shape"] == [3, 4]
    assert bw["output"][0]["shape"] == [4]
    assert bw["output"][1] is None
    assert bw["output"][2]["shape"] == [8, 4]
    assert "Torch.ones_like.0.forward" in data  # made by loss.backward() itself, as upstream
    names = list(data)
    assert names.index("Tensor.sum.0.backward") < names.index("Functional.linear.0.backward")


def test_a_call_returning_its_input_records_that_tensors_gradient(tmp_path: Path, debugger: Any) -> None:
    w = torch.randn(3, 8, requires_grad=True)
    grads: list[torch.Tensor] = []

    def body() -> None:
        h = torch.tanh(w)
        h.register_hook(grads.append)
        same = h.to(torch.float32)  # no cast: returns h itself
        assert same is h
        (same * torch.arange(8.0)).sum().backward()

    data = run(tmp_path, debugger, body)["data"]
    (grad,) = grads
    bw = data["Tensor.to.0.backward"]
    # the gradient of h, in and out (before, the output was tanh's input gradient)
    for side in ("input", "output"):
        (g,) = bw[side]
        assert g["shape"] == [3, 8]
        assert g["Max"] == pytest.approx(grad.max().item()) and g["Norm"] == pytest.approx(grad.norm().item())
    assert bw["input"] == bw["output"]
    tanh_grad = data["Torch.tanh.0.backward"]["output"][0]
    assert tanh_grad["Norm"] == pytest.approx((grad * (1 - torch.tanh(w) ** 2)).norm().item())
    names = list(data)
    assert names.index("Tensor.to.0.backward") < names.index("Torch.tanh.0.backward")


def test_backward_after_stop_still_recorded(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger()
    x = torch.randn(2, 3, requires_grad=True)
    dbg.start()
    y = torch.tanh(x)
    dbg.stop()
    y.sum().backward()
    dbg.step()
    data = load_dump(tmp_path / RANK)["data"]
    assert "Torch.tanh.0.backward" in data
    assert "Tensor.sum.0.forward" not in data  # called while off


def test_the_backward_of_an_earlier_steps_graph_takes_no_name_of_this_step(
    tmp_path: Path, debugger: Any
) -> None:
    """Step 0's graph backpropagated in step 1's window: its API backward records were named from step
    0's counters and took the names of step 1's own calls, whose backward records were then dropped
    (a second pass through one name keeps the first)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x0, x1 = torch.randn(3, 4), torch.randn(3, 4) * 100
    dbg = debugger(level="mix")
    dbg.start(model=net)
    loss0 = net(x0).sum()
    dbg.stop()
    dbg.step()
    dbg.start(model=net)
    loss0.backward()
    h = net[0](x1)
    h.retain_grad()  # the gradient of step 1's first linear output, as its backward record shows it
    net[2](net[1](h)).sum().backward()
    dbg.stop()
    dbg.step()
    data = load_dump(tmp_path / "dump" / "step1" / "rank")["data"]
    for record in ("Functional.linear.0.backward", "Module.0.Linear.backward.0"):
        assert data[record]["input"][0]["Norm"] == pytest.approx(h.grad.norm().item(), rel=1e-5), record


def test_list_and_scope_filters(tmp_path: Path, debugger: Any) -> None:
    x = torch.randn(2, 3)

    def body() -> None:
        for _ in range(3):
            F.relu(x)
            torch.tanh(x)

    data = run(tmp_path, debugger, body, statistics={"list": ["relu"]})["data"]
    assert list(data) == [f"Functional.relu.{i}.forward" for i in range(3)]


def test_scope_window_end_api_keeps_inputs_only(tmp_path: Path, debugger: Any) -> None:
    x = torch.randn(2, 3)

    def body() -> None:
        for _ in range(3):
            F.relu(x)

    scope = ["Functional.relu.1.forward", "Functional.relu.2.forward"]
    data = run(tmp_path, debugger, body, statistics={"scope": scope})["data"]
    assert list(data) == scope
    assert "output" in data[scope[0]]
    assert "output" not in data[scope[1]] and "input_args" in data[scope[1]]


def test_data_mode_forward_input(tmp_path: Path, debugger: Any) -> None:
    x = torch.randn(2, 3, requires_grad=True)

    def body() -> None:
        torch.tanh(x).sum().backward()

    data = run(tmp_path, debugger, body, statistics={"data_mode": ["forward", "input"]})["data"]
    assert all(n.endswith(".forward") for n in data)
    assert all("output" not in r and "input_args" in r for r in data.values())


def test_custom_api(tmp_path: Path, debugger: Any) -> None:
    import types

    mod = types.ModuleType("custom_mod")

    def add_and_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a + b) * b

    mod.add_and_mul = add_and_mul  # type: ignore[attr-defined]
    dbg = debugger()
    dbg.register_custom_api(mod, "add_and_mul")
    a, b = torch.ones(2), torch.ones(2)
    dbg.start()
    mod.add_and_mul(a, b)  # type: ignore[attr-defined]
    dbg.restore_custom_api(mod, "add_and_mul")
    mod.add_and_mul(a, b)  # type: ignore[attr-defined]
    dbg.stop()
    names = list(load_dump(tmp_path / RANK)["data"])
    assert names == [
        "custom_mod.add_and_mul.0.forward",
        "Tensor.__add__.0.forward",
        "Tensor.__mul__.0.forward",
    ]
    assert mod.add_and_mul is add_and_mul  # type: ignore[attr-defined]


@pytest.mark.parametrize("replaced", ["before the debugger", "after the debugger"])
def test_a_listed_function_a_library_wrapped_is_recorded_under_its_name(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, replaced: str
) -> None:
    """A library that puts a Python wrapper calling the original in place of ``F.linear`` (as
    DeepSpeed ZeRO-3 does) or ``F.gelu``: the call is still ``Functional.linear``, recorded once."""
    wrapped = []

    def wrap(name: str) -> None:
        original = getattr(F, name)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            wrapped.append(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(F, name, wrapper)

    if replaced == "before the debugger":
        wrap("linear")
        wrap("gelu")
    dbg = debugger()
    if replaced == "after the debugger":
        wrap("linear")
        wrap("gelu")
    x, w = torch.randn(2, 4, requires_grad=True), torch.randn(3, 4)
    dbg.start()
    F.gelu(F.linear(x, w)).sum().backward()
    dbg.stop()
    data = load_dump(tmp_path / RANK)["data"]
    assert wrapped == ["linear", "gelu"]
    assert list(data) == [
        "Functional.linear.0.forward",
        "Functional.gelu.0.forward",
        "Tensor.sum.0.forward",
        "Torch.ones_like.0.forward",
        "Tensor.sum.0.backward",
        "Functional.gelu.0.backward",
        "Functional.linear.0.backward",
    ]
    assert data["Functional.linear.0.forward"]["input_args"][1]["shape"] == [3, 4]


def test_recording_failure_goes_to_error_log(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from msprobe.dump.pytorch import encode

    real = encode.Encoder.output

    def broken(self: Any, out: Any, record: str) -> Any:
        if record.startswith("Torch.relu"):
            raise RuntimeError("injected\nbackends: CPU, CUDA, ...\n(torch's errors run many lines)")
        return real(self, out, record)

    monkeypatch.setattr(encode.Encoder, "output", broken)
    x = torch.randn(3)

    def body() -> None:
        torch.relu(x)
        torch.tanh(x)

    with caplog.at_level("WARNING", logger="msprobe"):
        data = run(tmp_path, debugger, body)["data"]
    assert "output" not in data["Torch.relu.0.forward"] and "input_args" in data["Torch.relu.0.forward"]
    assert "output" in data["Torch.tanh.0.forward"]
    log = (tmp_path / RANK / "dump_error_info.log").read_text()
    assert "forward_output_data_collect failed: name=Torch.relu.0.forward" in log and "many lines" in log
    (line,) = [r.getMessage() for r in caplog.records if "Torch.relu.0.forward" in r.getMessage()]
    assert line.endswith(": injected (see dump_error_info.log)")  # the console gets the first line


def test_repeated_failures_of_one_kind_are_said_once_and_counted_at_stop(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk fails every tensor file of a step: the console gets the first failure of each kind
    and one count at stop(); dump_error_info.log keeps every one."""
    from msprobe.dump.pytorch import encode

    def full_disk(self: Any, out: Any, record: str) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(encode.Encoder, "output", full_disk)
    x = torch.randn(3)

    def body() -> None:
        for _ in range(10):
            torch.relu(x)

    with caplog.at_level("WARNING", logger="msprobe"):
        run(tmp_path, debugger, body)
    said = [r.getMessage() for r in caplog.records if "forward_output_data_collect" in r.getMessage()]
    assert said == [
        "msprobe: forward_output_data_collect failed for Torch.relu.0.forward: [Errno 28] No space left on "
        "device (see dump_error_info.log)",
        "msprobe: forward_output_data_collect failed 9 more times with OSError [Errno 28] "
        "(see dump_error_info.log)",
    ]
    log = (tmp_path / RANK / "dump_error_info.log").read_text()
    assert all(f"name=Torch.relu.{i}.forward" in log for i in range(10))


def test_a_statistics_failure_names_the_records_of_its_batch(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Statistics are fetched per batch: a failure there cannot be pinned on one record, so the log
    names the batch's records; the values that were read are kept."""
    from msprobe.dump.pytorch import stat_batch

    def broken(dtype: torch.dtype, copies: list[torch.Tensor]) -> Any:
        raise RuntimeError("injected")

    monkeypatch.setattr(stat_batch, "_group_statistics", broken)
    x, big = torch.randn(3), torch.randn(1 << 15)  # grouped (fails), summarised at once (kept)

    def body() -> None:
        torch.relu(x)
        torch.tanh(x)
        torch.relu(big)

    data = run(tmp_path, debugger, body)["data"]
    assert data["Torch.relu.0.forward"]["output"][0]["Max"] is None
    assert data["Torch.relu.1.forward"]["output"][0]["Max"] == torch.relu(big).max().item()
    log = (tmp_path / RANK / "dump_error_info.log").read_text()
    assert "statistics failed: name=one of the 3 records Torch.relu.0.forward to Torch.relu.1.forward" in log
    assert "injected" in log


def test_files_and_layout(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger()
    x = torch.randn(3)
    for _ in range(2):
        dbg.start()
        torch.tanh(x)
        dbg.stop()
        dbg.step()
    for step in (0, 1):
        rank = tmp_path / "dump" / f"step{step}" / "rank"
        dump = load_dump(rank)
        assert list(dump) == ["task", "level", "framework", "dump_data_dir", "data"]
        assert (dump["task"], dump["level"], dump["framework"], dump["dump_data_dir"]) == (
            "statistics",
            "L1",
            "pytorch",
            None,
        )
        assert list(dump["data"]) == ["Torch.tanh.0.forward"]  # counters restart every step
        assert json.loads((rank / "construct.json").read_text()) == {}
        stack = json.loads((rank / "stack.json").read_text())
        assert stack["0"][0] == ["Torch.tanh.0.forward"]
        assert any("test_capture.py" in frame for frame in stack["0"][1])
        assert not any("msprobe" + "/dump/" in frame for frame in stack["0"][1])
        assert sorted(p.name for p in rank.iterdir()) == ["construct.json", "dump.json", "stack.json"]


def test_step_and_nan_literals(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(step=[1])
    x = torch.tensor([1.0, float("nan")])
    for _ in range(3):
        dbg.start()
        torch.tanh(x)
        dbg.stop()
        dbg.step()
    assert not (tmp_path / "dump" / "step0").exists()
    assert not (tmp_path / "dump" / "step2").exists()
    text = (tmp_path / "dump" / "step1" / "rank" / "dump.json").read_text()
    assert '"Max": NaN' in text
    assert text.startswith('{\n "task": "statistics",\n "level": "L1",')  # indent=1


def test_other_threads_are_not_recorded(tmp_path: Path, debugger: Any) -> None:
    import threading

    x = torch.ones(3)

    def elsewhere() -> None:
        torch.relu(x)
        _ = x + 1  # operators are patched process-wide; still only the starting thread records

    def body() -> None:
        th = threading.Thread(target=elsewhere)
        th.start()
        th.join()
        torch.tanh(x)

    assert list(run(tmp_path, debugger, body)["data"]) == ["Torch.tanh.0.forward"]


@pytest.mark.parametrize("broken", ["args", "grads", "value"])
def test_a_module_record_that_fails_is_logged_under_its_name(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """Forward, backward and parameter-gradient records of a module: the log names the record."""
    from msprobe.dump.pytorch import encode

    real = getattr(encode.Encoder, broken)

    def failing(self: Any, *args: Any) -> Any:
        record = args[1]
        if broken != "value" or record.endswith("parameters_grad"):
            raise RuntimeError("injected")
        return real(self, *args)

    monkeypatch.setattr(encode.Encoder, broken, failing)
    model = nn.Sequential(nn.Linear(3, 2))
    dbg = debugger(level="L0")
    dbg.start(model=model)
    model(torch.randn(4, 3)).sum().backward()
    dbg.stop()
    log = (tmp_path / RANK / "dump_error_info.log").read_text()
    expected = {
        "args": "record_forward failed: name=Module.0.Linear.forward.0",
        "grads": "record_backward failed: name=Module.0.Linear.backward.0",
        "value": "record_param_grad failed: name=Module.0.Linear.parameters_grad",
    }[broken]
    assert expected in log and "injected" in log


def test_a_scope_opens_on_forward_names_when_only_backward_is_dumped(tmp_path: Path, debugger: Any) -> None:
    x = torch.randn(3, requires_grad=True)

    def body() -> None:
        torch.exp(torch.tanh(torch.sin(x))).sum().backward()

    # the window opens at tanh's forward and closes at sin's backward, the last record of the step
    section = {
        "scope": ["Torch.tanh.0.forward", "Torch.sin.0.backward"],
        "list": [],
        "data_mode": ["backward"],
    }
    data = run(tmp_path, debugger, body, statistics=section)["data"]
    expected = [
        "Tensor.sum.0.backward",
        "Torch.exp.0.backward",
        "Torch.sin.0.backward",
        "Torch.tanh.0.backward",
    ]
    assert sorted(data) == expected


class _ScaledLoss(torch.Tensor):
    """A ``__torch_function__`` subclass of the kind libraries ship (loss scaling, logging): it acts on
    ``Tensor.backward`` (a gradient of 8) and passes everything else on."""

    seen: ClassVar[list[Any]] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.seen.append(func)
        if func is torch.Tensor.backward:
            with torch._C.DisableTorchFunctionSubclass():
                return torch.Tensor.backward(args[0], torch.full_like(args[0], 8.0))
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_a_subclass_handles_the_python_functions_it_handles_without_the_dump(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """Unlisted Python functions (``Tensor.backward``, ``__format__``) are re-dispatched with the dump's
    mode on, so that what they call is recorded; a subclass's own ``__torch_function__`` must still
    see them (re-dispatching skipped it: its backward ran unscaled, its ``repr`` raised)."""

    def grads(dump: bool) -> torch.Tensor:
        torch.manual_seed(0)
        lin = nn.Linear(3, 1)
        dbg = debugger(level=level) if dump else None
        if dbg is not None:
            dbg.start(model=lin)
        _ScaledLoss.seen = []
        loss = lin(torch.randn(4, 3)).sum().as_subclass(_ScaledLoss)
        loss.backward()
        text = repr(loss)
        if dbg is not None:
            dbg.stop()
        assert torch.Tensor.backward in _ScaledLoss.seen and "_ScaledLoss" in text
        assert lin.weight.grad is not None
        return lin.weight.grad

    assert torch.equal(grads(dump=False), grads(dump=True))


def test_a_later_steps_folder_the_os_refuses_is_a_warning_not_an_error(
    tmp_path: Path, debugger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk that fills up or turns read-only during the training never reaches it: a later step's
    rank folder that cannot be created is one warning line, that step is not dumped, the steps already
    written stay, and a later step whose folder can be made again is dumped."""
    from msprobe.dump import writer

    dbg = debugger(task="statistics", level="L1")
    x = torch.randn(3)
    real = writer.make_dirs

    def read_only(path: str) -> None:
        raise OSError(30, "Read-only file system")

    for step in range(3):
        monkeypatch.setattr(writer, "make_dirs", read_only if step == 1 else real)
        with caplog.at_level("WARNING", logger="msprobe"):
            for _ in range(3):  # micro-batches: a window each, one line for the step
                dbg.start()  # raised into the training before
                torch.relu(x)
                dbg.stop()
            dbg.step()
    said = [r.getMessage() for r in caplog.records if "is not dumped" in r.getMessage()]
    step1 = tmp_path / "dump" / "step1" / "rank"
    why = "Read-only file system; step 1 is not dumped"
    assert said == [f"msprobe: cannot write the dump folder {step1}: {why}"]
    relus = [f"Torch.relu.{i}.forward" for i in range(3)]
    assert list(load_dump(tmp_path / RANK)["data"]) == relus
    assert not (tmp_path / "dump" / "step1").exists()
    assert list(load_dump(tmp_path / "dump" / "step2" / "rank")["data"]) == relus
