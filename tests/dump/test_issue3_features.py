"""token_range, debugger.save (level debug), module_dump, task structure: end to end on small models."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from msprobe.dump.exceptions import MsprobeException
from tests.dump.conftest import load_dump

RANK = Path("dump") / "step0" / "rank"


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 11, d: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.tanh(self.emb(idx)))


def greedy(model: nn.Module, steps: int) -> list[int]:
    idx = torch.tensor([[1]])
    out = []
    with torch.no_grad():
        for _ in range(steps):
            nxt = int(model(idx)[0, -1].argmax())
            out.append(nxt)
            idx = torch.cat([idx, torch.tensor([[nxt]])], dim=1)
    return out


def test_token_range_dumps_only_those_forward_passes(tmp_path: Path, debugger: Any) -> None:
    torch.manual_seed(0)
    model = TinyLM()
    ref = greedy(model, 5)
    dbg = debugger()
    dbg.start(model=model, token_range=[1, 2])
    assert greedy(model, 5) == ref  # generation unchanged
    dbg.stop()
    dbg.step()
    data = load_dump(tmp_path / RANK)["data"]
    # two forward passes (tokens 1 and 2): counters start at 0 at the first selected token; the switch is
    # on from the pre-hook of pass 1 to the pre-hook of pass 3, so the loop's argmax/cat in between count
    model_calls = [n for n in data if n.split(".")[1] in ("embedding", "tanh", "linear")]
    assert model_calls == [
        "Functional.embedding.0.forward",
        "Torch.tanh.0.forward",
        "Functional.linear.0.forward",
        "Functional.embedding.1.forward",
        "Torch.tanh.1.forward",
        "Functional.linear.1.forward",
    ]
    assert next(iter(data)) == "Functional.embedding.0.forward" and "Tensor.argmax.0.forward" in data
    shapes = [data[f"Functional.embedding.{i}.forward"]["input_args"][0]["shape"] for i in (0, 1)]
    assert shapes == [[1, 2], [1, 3]]  # the prompt grew by one token per pass: tokens 1 and 2


@pytest.mark.parametrize(
    ("token_range", "match"),
    [((1,), "2 items"), ([1.0, 2], "integer"), ([3, 1], "less than the end"), ("1-2", "list or tuple")],
)
def test_token_range_validation(debugger: Any, token_range: Any, match: str) -> None:
    dbg = debugger()
    with pytest.raises(MsprobeException, match=match):
        dbg.start(model=TinyLM(), token_range=token_range)


def test_token_range_needs_model(debugger: Any) -> None:
    dbg = debugger()
    with pytest.raises(MsprobeException, match="'model'"):
        dbg.start(token_range=[0, 1])


def test_l0_needs_model_and_a_module(debugger: Any) -> None:
    dbg = debugger(level="L0")
    with pytest.raises(MsprobeException, match="'model'"):
        dbg.start()
    with pytest.raises(MsprobeException, match=r"torch\.nn\.Module"):
        dbg.start(model=[TinyLM(), "not a module"])


def test_save_debug_json(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(task="tensor", level="debug")
    x = torch.randn(2, 3, requires_grad=True)
    for _ in range(2):
        y = x * 2
        dbg.save(y, "y_var")
        dbg.save({"a": x, "b": [x + 1, 3], "c": "s"}, "nested", save_backward=False)
        dbg.save(object(), "bad")  # unsupported: warning, skipped
        y.sum().backward()
        dbg.step()
    rank = tmp_path / RANK
    assert sorted(os.listdir(rank)) == ["debug.json", "dump_tensor_data"]
    debug = json.loads((rank / "debug.json").read_text())
    assert (debug["task"], debug["level"], debug["framework"]) == ("tensor", "debug", "pytorch")
    data = debug["data"]
    assert list(data) == ["y_var.0.debug", "y_var_grad.0.debug", "nested.0.debug"]
    assert data["y_var.0.debug"]["data_name"] == "y_var.0.debug.pt"
    assert data["y_var_grad.0.debug"]["Max"] == 1.0 and data["y_var_grad.0.debug"]["shape"] == [2, 3]
    assert data["nested.0.debug"]["b"][1] == {"type": "int", "value": 3}
    assert data["nested.0.debug"]["c"] == {"type": "str", "value": "s"}
    files = set(os.listdir(rank / "dump_tensor_data"))
    assert {
        "y_var.0.debug.pt",
        "y_var_grad.0.debug.pt",
        "nested.0.debug.a.pt",
        "nested.0.debug.b.0.pt",
    } <= files
    got = torch.load(rank / "dump_tensor_data" / "nested.0.debug.a.pt", weights_only=True)
    assert torch.equal(got, x.detach())
    assert (tmp_path / "dump" / "step1" / "rank" / "debug.json").exists()


def test_every_saved_record_has_its_own_file(tmp_path: Path, debugger: Any) -> None:
    """8.1.1 names each save's files after its record: saving one tensor twice in a step (or under two
    names) gives {name}.{k}.debug.pt and {name}_grad.{k}.debug.pt for every k, never another record's file."""
    dbg = debugger(task="tensor", level="debug")
    x = torch.randn(2, 3, requires_grad=True)
    h = x * 2
    dbg.save(h, "h")
    dbg.save(h, "h")
    dbg.save({"a": h}, "nested")
    h.sum().backward()
    dbg.step()
    rank = tmp_path / RANK
    data = json.loads((rank / "debug.json").read_text())["data"]
    for record in ("h.0.debug", "h_grad.0.debug", "h.1.debug", "h_grad.1.debug"):
        assert data[record]["data_name"] == f"{record}.pt"
        assert (rank / "dump_tensor_data" / f"{record}.pt").exists()
    assert data["nested_grad.0.debug"]["a"]["data_name"] == "nested_grad.0.debug.a.pt"
    assert (rank / "dump_tensor_data" / "nested_grad.0.debug.a.pt").exists()


def test_a_saved_parameters_gradient_lands_in_its_own_step_and_hooks_do_not_pile_up(
    tmp_path: Path, debugger: Any
) -> None:
    dbg = debugger(level="debug")
    w = torch.nn.Parameter(torch.ones(3))
    saved_in = {0, 1, 3} | set(range(5, 25))
    for step in range(25):
        if step in saved_in:
            dbg.save(w, "w", save_backward=True)
        (w * (step + 1)).sum().backward()  # the gradient tells the step
        w.grad = None
        dbg.step()
    assert len(w._backward_hooks or {}) <= 2
    for step in range(25):
        path = tmp_path / "dump" / f"step{step}" / "rank" / "debug.json"
        data = json.loads(path.read_text())["data"] if path.exists() else {}
        grads = [v["Max"] for k, v in data.items() if k.startswith("w_grad.")]
        assert grads == ([step + 1.0] if step in saved_in else [])


def test_save_is_silent_outside_debug_level(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger()
    dbg.save(torch.ones(2), "x")
    assert not (tmp_path / "dump").exists()


def test_module_dump(tmp_path: Path, debugger: Any) -> None:
    from msprobe.pytorch import module_dump, module_dump_end

    dbg = debugger()
    net = TinyLM()
    idx = torch.tensor([[1, 2]])
    dbg.start()
    module_dump(net, "MyNet")
    net(idx).sum().backward()
    module_dump_end()
    F.relu(torch.ones(2))
    net(idx)  # after module_dump_end: the hook stays but does not fire
    dbg.stop()
    data = load_dump(tmp_path / RANK)["data"]
    names = list(data)
    assert "Module.MyNet.TinyLM.forward.0" in names and "Module.MyNet.TinyLM.backward.0" in names
    assert "Module.MyNet.TinyLM.forward.1" not in names
    assert not any(n.startswith("Functional.embedding.0") for n in names[:3])  # APIs inside: not recorded
    assert "Functional.relu.0.forward" in names


def test_a_module_named_with_a_slash_keeps_its_records_and_files(tmp_path: Path, debugger: Any) -> None:
    """torch accepts ``add_module("a/b", ...)``: in task tensor its file names held a path separator,
    and the module lost its forward and backward records (its parameters_grad placeholder stayed)."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add_module("a/b", nn.Linear(4, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return getattr(self, "a/b")(x)

    net = Net()
    dbg = debugger(task="tensor", level="L0")
    dbg.start(model=net)
    net(torch.randn(2, 4, requires_grad=True)).sum().backward()
    dbg.stop()
    rank = tmp_path / RANK
    data = json.loads((rank / "dump.json").read_text())["data"]
    forward = data["Module.a/b.Linear.forward.0"]
    assert forward["input_args"][0]["data_name"] == "Module.a%2Fb.Linear.forward.0.input.0.pt"
    assert "Module.a/b.Linear.backward.0" in data
    names = [t["data_name"] for r in data.values() for t in _tensor_specs(r)]
    assert names and all((rank / "dump_tensor_data" / name).is_file() for name in names)


def _tensor_specs(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        if "data_name" in value:
            return [value]
        return [t for v in value.values() for t in _tensor_specs(v)]
    if isinstance(value, list):
        return [t for v in value for t in _tensor_specs(v)]
    return []


def test_module_dump_needs_instance() -> None:
    from msprobe.pytorch import PrecisionDebugger, module_dump

    PrecisionDebugger._shutdown()
    with pytest.raises(MsprobeException, match="instantiated before using module_dump"):
        module_dump(TinyLM(), "x")


def test_structure_task(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(task="structure", level="mix")
    net = nn.Sequential(nn.Linear(3, 2))
    dbg.start(model=net)
    net(torch.ones(1, 3))
    dbg.stop()
    rank = tmp_path / RANK
    assert load_dump(rank)["data"] == {}
    construct = json.loads((rank / "construct.json").read_text())
    assert construct == {
        "Functional.linear.0.forward": "Module.0.Linear.forward.0",
        "Module.0.Linear.forward.0": None,
    }
    assert json.loads((rank / "stack.json").read_text())


def test_mix_parents_optimizer_and_clip_grad(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(level="mix")
    net = nn.Sequential(nn.Linear(3, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    dbg.start(model=net)
    net(torch.ones(1, 3)).sum().backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    dbg.stop()
    construct = json.loads((tmp_path / RANK / "construct.json").read_text())
    assert construct["optimizer"] is None and construct["clip_grad"] is None
    assert construct["Tensor.add_.0.forward"] == "optimizer"  # SGD's param.add_
    clip = [k for k, v in construct.items() if v == "clip_grad"]
    assert clip and all(not k.startswith("Module") for k in clip)
    assert construct["Functional.linear.0.forward"] == "Module.0.Linear.forward.0"


def test_enable_dataloader(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(enable_dataloader=True)
    loader = torch.utils.data.DataLoader(torch.arange(6.0).reshape(3, 2), batch_size=1)
    dbg.start()  # skipped with a warning: the loader drives the steps
    for batch in loader:
        torch.relu(batch)
    dbg.service.stop()
    steps = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert steps == ["step0", "step1", "step2"]
    for s in steps:
        assert list(load_dump(tmp_path / "dump" / s / "rank")["data"]) == ["Torch.relu.0.forward"]


def test_enable_dataloader_counts_every_batch_of_every_epoch_as_one_step(
    tmp_path: Path, debugger: Any
) -> None:
    """The StopIteration that ends an epoch closes its last step; the next epoch's first batch opens
    the next step number (it counted an empty step in between, so ``step: [N]`` missed batch N)."""
    debugger(enable_dataloader=True)
    loader = torch.utils.data.DataLoader(torch.arange(6.0).reshape(3, 2), batch_size=1)
    for _epoch in range(2):
        for batch in loader:
            torch.relu(batch)
    steps = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert steps == [f"step{i}" for i in range(6)]
