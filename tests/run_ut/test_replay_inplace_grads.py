"""The gradient of an in-place API's ``self`` is the gradient of the value it was given (as the dump
records it), not the incoming gradient: Mixtral's router does ``routing_weights /= sum`` in training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from replay_dumps import forward, tensor

from msprobe.run_ut.records import ApiRecord
from msprobe.run_ut.replay import replay


def _record(name: str) -> ApiRecord:
    return ApiRecord(
        name,
        0,
        forward(
            tensor("torch.float32", [8, 4], 0.5, 1.5, requires_grad=True),
            tensor("torch.float32", [8, 1], 1.0, 2.0, requires_grad=True),
            output=[tensor("torch.float32", [8, 4], 0.25, 1.5)],
        ),
        {"input": [tensor("torch.float32", [8, 4], -1.0, 1.0)]},
    )


class _SelfGradTwice(torch.autograd.Function):
    """``x / y`` whose gradient for ``x`` is twice the true one (``y``'s is right)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, y)
        return x / y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = ctx.saved_tensors
        return 2 * g / y, (-g * x / (y * y)).sum(-1, keepdim=True)


def _faulty_div_(func: Any) -> Any:
    def div_(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        return self.copy_(_SelfGradTwice.apply(self.clone(), other))

    return div_


def test_the_self_gradient_of_an_in_place_api_is_that_of_its_input(tmp_path: Path) -> None:
    result = replay(_record("Tensor.div_.0"), tmp_path, "cpu", keep_tensors=True)
    assert result.result[1:3] == ["pass", "pass"], result.reason
    (x, y), _ = result.saved["forward.input"]
    g = result.saved["backward.input"]
    for side in ("bench", "device"):
        grad_x, grad_y = result.saved[f"backward.output.{side}"]
        assert torch.allclose(grad_x.double(), g.double() / y.tensor.double()), side  # not g itself
        expected_y = (-g.double() * x.tensor.double() / y.tensor.double() ** 2).sum(-1, keepdim=True)
        assert torch.allclose(grad_y.double(), expected_y), side


def test_a_wrong_self_gradient_of_an_in_place_api_is_an_error(tmp_path: Path) -> None:
    result = replay(_record("Tensor.div_.0"), tmp_path, "cpu", device_function=_faulty_div_)
    rows = {r.name: r.status for r in result.details}
    assert result.result[1:3] == ["pass", "error"], result.reason
    assert rows["Tensor.div_.0.backward.output.0"] == "error"
    assert rows["Tensor.div_.0.backward.output.1"] == "pass"


def test_out_of_place_gradients_are_unchanged(tmp_path: Path) -> None:
    """``x * 1`` has an exact gradient of 1: the leaf's gradient is the copy's, bit for bit."""
    result = replay(_record("Tensor.div.0"), tmp_path, "cpu", keep_tensors=True)
    (_x, y), _ = result.saved["forward.input"]
    g = result.saved["backward.input"]
    grad_x = result.saved["backward.output.bench"][0]
    assert torch.equal(grad_x, g.double() / y.tensor.double())


def test_a_tensor_file_saved_with_requires_grad_keeps_its_backward(tmp_path: Path) -> None:
    """A ``.pt`` holding a leaf that requires grad (``torch.save(param)``, weights_only loads it so):
    its copy on each side is a non-leaf of the loaded tensor, so the leaf whose ``.grad`` is read must
    be made from it detached (the backward rows were SKIP 'Bench output is None' and the API passed)."""
    g = torch.Generator().manual_seed(0)
    values = {
        "x.pt": torch.rand(8, 4, generator=g) + 0.5,
        "y.pt": torch.rand(8, 1, generator=g) + 1.0,
        "g.pt": torch.rand(8, 4, generator=g) - 0.5,
    }
    for name, value in values.items():
        torch.save(value.requires_grad_(name != "g.pt"), tmp_path / name)
    record = ApiRecord(
        "Tensor.div_.0",
        0,
        forward(
            tensor("torch.float32", [8, 4], 0.5, 1.5, requires_grad=True, data_name="x.pt"),
            tensor("torch.float32", [8, 1], 1.0, 2.0, requires_grad=True, data_name="y.pt"),
            output=[tensor("torch.float32", [8, 4], 0.25, 1.5)],
        ),
        {"input": [tensor("torch.float32", [8, 4], -1.0, 1.0, data_name="g.pt")]},
    )
    result = replay(record, tmp_path, "cpu", keep_tensors=True)
    rows = {r.name: r.status for r in result.details}
    assert rows["Tensor.div_.0.backward.output.0"] == "pass", result.reason
    assert rows["Tensor.div_.0.backward.output.1"] == "pass", result.reason
    grad_x = result.saved["backward.output.bench"][0]
    assert torch.allclose(grad_x, values["g.pt"].double() / values["y.pt"].detach().double())
