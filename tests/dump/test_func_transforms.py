"""torch.func transforms (vmap, grad, jacrev, jvp, functionalize) with the dump on: the tensors an API sees
there are wrappers of the transform's level; their records hold the values under the wrappers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.dump.conftest import load_dump

RANK = ("dump", "step0", "rank")


def _tensors(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            return [value]
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, list):
        return [t for v in value for t in _tensors(v)]
    return []


def _per_sample_grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(model, p, (xi[None],))
        return ((out - yi) ** 2).mean()

    return torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)  # type: ignore[no-any-return]


def _run(
    make: Callable[..., Any],
    tmp_path: Path,
    work: Callable[[], Any],
    model: torch.nn.Module | None = None,
    **config: Any,
) -> Any:
    dbg = make(**config)
    dbg.start(model=model)
    result = work()
    dbg.stop()
    dbg.step()
    rank = tmp_path.joinpath(*RANK)
    assert not (rank / "dump_error_info.log").exists(), (rank / "dump_error_info.log").read_text()
    return result, load_dump(rank)["data"]


@pytest.mark.parametrize("level", ["L1", "mix"])
@pytest.mark.parametrize("summary_mode", ["statistics", "md5"])
def test_per_sample_gradients_are_recorded_whole_and_unchanged(
    debugger: Callable[..., Any], tmp_path: Path, level: str, summary_mode: str
) -> None:
    """vmap(grad(...)) over functional_call, the per-sample gradient recipe: the gradients are the
    ones computed without the dump, and every record's tensors have their statistics."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x, y = torch.randn(5, 4), torch.randn(5, 1)
    plain = _per_sample_grads(model, x, y)
    grads, data = _run(
        debugger,
        tmp_path,
        lambda: _per_sample_grads(model, x, y),
        level=level,
        model=model,
        statistics={"summary_mode": summary_mode},
    )
    assert all(torch.equal(grads[k], plain[k]) for k in plain)
    assert "Functional.linear.0.backward" in data
    tensors = [t for record in data.values() for t in _tensors(record)]
    assert tensors and all(t["Max"] is not None for t in tensors if 0 not in t["shape"]), [
        (name, t) for name, r in data.items() for t in _tensors(r) if t["Max"] is None
    ]
    if summary_mode == "md5":
        assert all(t["md5"] for t in tensors if 0 not in t["shape"])
    # the first Linear's input: one example's shape, the values of every example
    first = data["Functional.linear.0.forward"]["input_args"][0]
    assert first["shape"] == [1, 4]
    assert (first["Max"], first["Min"]) == (x.max().item(), x.min().item())


@pytest.mark.parametrize(
    "transform",
    [
        pytest.param(lambda f: torch.func.grad(lambda t: f(t).sum()), id="grad"),
        pytest.param(lambda f: torch.func.jacrev(f), id="jacrev"),
        pytest.param(lambda f: torch.func.functionalize(f), id="functionalize"),
        pytest.param(lambda f: lambda t: torch.func.jvp(f, (t,), (torch.ones_like(t),))[1], id="jvp"),
    ],
)
def test_an_api_under_a_transform_records_the_values_it_saw(
    debugger: Callable[..., Any], tmp_path: Path, transform: Callable[[Any], Any]
) -> None:
    x = torch.tensor([0.5, -2.0, 3.0])

    def f(t: torch.Tensor) -> torch.Tensor:
        u = t * 2
        u.add_(1)  # an in-place write under the transform
        return torch.sin(u)

    want = transform(f)(x)
    got, data = _run(debugger, tmp_path, lambda: transform(f)(x))
    assert torch.equal(got, want)
    sin_in = data["Torch.sin.0.forward"]["input_args"][0]
    assert sin_in["shape"] == [3]
    assert (sin_in["Max"], sin_in["Min"]) == (7.0, -3.0)  # x * 2 + 1, after the in-place add


def test_a_vmapped_api_has_every_examples_statistics_and_the_first_examples_file(
    debugger: Callable[..., Any], tmp_path: Path
) -> None:
    """Under vmap an API runs once for the whole batch: its statistics cover every example; its
    tensor file is the first example, the input that replays the call as recorded (one example)."""
    x = torch.tensor([[1.0, 2.0, 3.0], [-4.0, 5.0, 6.0]])
    got, data = _run(debugger, tmp_path, lambda: torch.func.vmap(torch.sin, in_dims=1)(x), task="tensor")
    assert torch.equal(got, torch.sin(x).T)
    record = data["Torch.sin.0.forward"]
    arg = record["input_args"][0]
    assert arg["shape"] == [2]
    assert (arg["Max"], arg["Min"]) == (6.0, -4.0)
    files = tmp_path.joinpath(*RANK, "dump_tensor_data")
    saved = torch.load(files / arg["data_name"], weights_only=True)
    assert torch.equal(saved, x[:, 0])
    out = torch.load(files / record["output"][0]["data_name"], weights_only=True)
    assert torch.equal(out, torch.sin(x[:, 0]))


@pytest.mark.parametrize("level", ["L0", "mix"])
@pytest.mark.parametrize(
    "transform",
    [
        pytest.param(lambda f: torch.func.grad(lambda t: f(t).sum()), id="grad"),
        pytest.param(lambda f: torch.func.jacrev(f), id="jacrev"),
        pytest.param(lambda f: lambda t: torch.func.vjp(f, t)[1](torch.ones(4))[0], id="vjp"),
    ],
)
def test_a_module_called_on_the_transformed_input_has_its_backward_record(
    debugger: Callable[..., Any], tmp_path: Path, transform: Callable[[Any], Any], level: str
) -> None:
    """A module whose input is the input a transform differentiates (an input-gradient penalty,
    a saliency map, a Jacobian): that input is a leaf at the transform's level; its module backward
    record is made (no watch_backward failure in dump_error_info.log), with the gradient torch.func
    computes as the module's input gradient."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh())
    x = torch.randn(3)
    want = transform(model)(x)
    got, data = _run(debugger, tmp_path, lambda: transform(model)(x), model=model, level=level)
    assert torch.equal(got, want)
    record = data["Module.0.Linear.backward.0"]
    grad_x = record["output"][0]
    assert grad_x["shape"] == [3]
    if want.shape == (3,):  # grad and vjp: the module's input gradient is the transform's result
        assert (grad_x["Max"], grad_x["Min"]) == (want.max().item(), want.min().item())
