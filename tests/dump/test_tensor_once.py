"""Tensor mode writes a tensor seen again unchanged once: the later records name the earlier file."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.dump.conftest import load_dump


def _dumped(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    rank = tmp_path / "dump" / "step0" / "rank"
    return load_dump(rank)["data"], rank / "dump_tensor_data"


def _name(data: dict[str, Any], record: str, side: str, k: int = 0) -> str:
    name = data[record][side][k]["data_name"]
    assert isinstance(name, str)
    return name


def _load(folder: Path, name: str) -> torch.Tensor:
    return torch.load(folder / name, weights_only=True)


def _saved_leaves(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tensor leaf of the records that names a file."""
    leaves: list[dict[str, Any]] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict) and "data_name" in v:
            leaves.append(v)
        elif isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)

    walk(data)
    return leaves


def _every_leaf_matches_its_file(data: dict[str, Any], folder: Path) -> set[str]:
    """Each tensor leaf's file has the leaf's shape and dtype; the names of all files named."""
    for v in _saved_leaves(data):
        t = _load(folder, v["data_name"])
        assert list(t.shape) == v["shape"] and str(t.dtype) == v["dtype"], v["data_name"]
    return {v["data_name"] for v in _saved_leaves(data)}


def test_an_output_that_is_the_next_input_is_written_once(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(task="tensor")
    x = torch.randn(4, 8)
    dbg.start()
    y = torch.relu(x)
    torch.exp(y)
    dbg.stop()
    data, folder = _dumped(tmp_path)
    assert _name(data, "Torch.exp.0.forward", "input_args") == "Torch.relu.0.forward.output.0.pt"
    assert sorted(os.listdir(folder)) == [
        "Torch.exp.0.forward.output.0.pt",
        "Torch.relu.0.forward.input.0.pt",
        "Torch.relu.0.forward.output.0.pt",
    ]
    assert torch.equal(_load(folder, "Torch.relu.0.forward.output.0.pt"), y)
    assert _every_leaf_matches_its_file(data, folder) == set(os.listdir(folder))


def test_an_in_place_change_in_between_gives_two_files(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(task="tensor")
    x = torch.randn(4, 8)
    dbg.start()
    y = torch.relu(x)
    before = y.clone()
    y.mul_(2.0)
    torch.exp(y)
    dbg.stop()
    data, folder = _dumped(tmp_path)
    relu_out = _name(data, "Torch.relu.0.forward", "output")
    assert _name(data, "Tensor.mul_.0.forward", "input_args") == relu_out  # unchanged until the call
    exp_in = _name(data, "Torch.exp.0.forward", "input_args")
    assert exp_in == _name(data, "Tensor.mul_.0.forward", "output") != relu_out
    assert torch.equal(_load(folder, relu_out), before)
    assert torch.equal(_load(folder, exp_in), before * 2.0)
    _every_leaf_matches_its_file(data, folder)


@pytest.mark.parametrize(
    ("views", "shared"),
    [
        # Tensor.view is not recorded: exp's input is a new shape of y, or y read in another order
        ((lambda y: y.view(2, 16), lambda y: y.t()), False),
        # other tensor objects, the same elements read the same way
        ((lambda y: y.view(4, 8), lambda y: y[:]), True),
    ],
    ids=["other-layouts", "same-layout"],
)
def test_a_view_shares_the_file_only_with_the_same_layout(
    tmp_path: Path, debugger: Any, views: tuple[Callable[[torch.Tensor], torch.Tensor], ...], shared: bool
) -> None:
    dbg = debugger(task="tensor")
    x = torch.randn(4, 8)
    dbg.start()
    y = torch.relu(x)
    for view in views:
        torch.exp(view(y))
    dbg.stop()
    data, folder = _dumped(tmp_path)
    relu_out = _name(data, "Torch.relu.0.forward", "output")
    inputs = [_name(data, f"Torch.exp.{k}.forward", "input_args") for k in range(len(views))]
    if shared:
        assert inputs == [relu_out] * len(views)
        assert "Torch.exp.0.forward.input.0.pt" not in os.listdir(folder)
    else:
        assert len({relu_out, *inputs}) == 1 + len(views)
        for name, view in zip(inputs, views):
            assert torch.equal(_load(folder, name), view(y))
    _every_leaf_matches_its_file(data, folder)


def test_a_write_without_a_version_bump_is_written_again(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(task="tensor")
    x = torch.randn(4, 8)
    running_mean, running_var = torch.zeros(8), torch.ones(8)
    dbg.start()
    F.batch_norm(x, running_mean, running_var, training=True)  # updates the running statistics
    torch.abs(running_mean)
    dbg.stop()
    data, folder = _dumped(tmp_path)
    before = _name(data, "Functional.batch_norm.0.forward", "input_args", 1)
    after = _name(data, "Torch.abs.0.forward", "input_args")
    assert before != after
    assert torch.equal(_load(folder, before), torch.zeros(8))
    assert torch.equal(_load(folder, after), running_mean) and running_mean.abs().sum() > 0


def test_each_step_folder_has_its_own_files(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(task="tensor")
    w = torch.randn(8)
    for _ in range(2):
        dbg.start()
        torch.exp(w)  # the same unchanged tensor in both steps
        dbg.stop()
        dbg.step()
    for step in (0, 1):
        rank = tmp_path / "dump" / f"step{step}" / "rank"
        name = load_dump(rank)["data"]["Torch.exp.0.forward"]["input_args"][0]["data_name"]
        assert torch.equal(_load(rank / "dump_tensor_data", name), w)


def _every_leaf_holds_its_files_values(data: dict[str, Any], folder: Path) -> int:
    """Each tensor leaf's Max/Min/Norm are those of the values its file holds; how many leaves."""
    leaves = _saved_leaves(data)
    for v in leaves:
        t = _load(folder, v["data_name"]).double()
        got = (t.max().item(), t.min().item(), t.norm().item())
        assert got == pytest.approx((v["Max"], v["Min"], v["Norm"]), rel=1e-5), v["data_name"]
    return len(leaves)


def test_a_second_backward_through_a_call_rewrites_no_file_a_record_names(
    tmp_path: Path, debugger: Any
) -> None:
    """A gradient penalty runs the backward of each call twice (``autograd.grad(create_graph=True)``,
    then ``backward()``). The module's backward record names the file of the API's backward output;
    the API's second pass rewrote that file, so the module record's statistics were not its file's.
    Both keep the first pass now."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Softplus(), torch.nn.Linear(4, 1))
    x = torch.randn(5, 3, requires_grad=True)
    dbg = debugger(task="tensor", level="mix")
    dbg.start(model=model)
    (g,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    ((g.norm(dim=1) - 1) ** 2).mean().backward()
    dbg.stop()
    data, folder = _dumped(tmp_path)
    assert "Functional.linear.0.backward" in data and "Module.0.Linear.backward.0" in data
    assert _every_leaf_holds_its_files_values(data, folder) > 20


def test_a_parameters_grad_file_rewritten_later_in_the_step_is_named_by_no_other_record(
    tmp_path: Path, debugger: Any
) -> None:
    """A gradient penalty on the weights: ``autograd.grad(create_graph=True)`` gives the weight's
    gradient, recorded as the module's ``parameters_grad`` and then as the input of ``__pow__``;
    the final ``backward()`` delivers the weight's gradient again and ``parameters_grad`` keeps the
    step's last one (8.1.1), rewriting its file. The ``__pow__`` record named that file."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3))
    x, y = torch.randn(5, 4), torch.randn(5, 3)
    dbg = debugger(task="tensor", level="mix")
    dbg.start(model=net)
    loss = ((net(x) - y) ** 2).mean()
    (g,) = torch.autograd.grad(loss, [net[0].weight], create_graph=True)
    (loss + (g**2).sum()).backward()
    dbg.stop()
    data, folder = _dumped(tmp_path)
    pow_record = "Tensor.__pow__.1.forward"  # the loss's square is __pow__.0
    assert torch.equal(_load(folder, _name(data, pow_record, "input_args")), g.detach())
    assert _every_leaf_holds_its_files_values(data, folder) > 10


def test_a_tied_weights_gradient_is_written_once_for_all_its_modules(tmp_path: Path, debugger: Any) -> None:
    """An embedding and an output projection sharing one weight: each gradient of it was written once
    per owning module's ``parameters_grad`` (the vocabulary-sized tensor twice a step)."""
    torch.manual_seed(0)
    emb, out = torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50, bias=False)
    out.weight = emb.weight
    net = torch.nn.Sequential(emb, torch.nn.Tanh(), out)
    dbg = debugger(task="tensor", level="L0")
    dbg.start(model=net)
    before = torch.zeros(50, 8)
    for _ in range(2):  # two gradients in one step: both records keep the last one
        before = emb.weight.grad.clone() if emb.weight.grad is not None else before
        net(torch.randint(0, 50, (3, 5))).logsumexp(-1).mean().backward()
    last = emb.weight.grad - before
    dbg.stop()
    data, folder = _dumped(tmp_path)
    names = {data[r]["weight"][0]["data_name"] for r in data if r.endswith("parameters_grad")}
    assert len(names) == 1
    (name,) = names
    assert torch.allclose(_load(folder, name), last)
    assert _every_leaf_holds_its_files_values(data, folder) > 5
