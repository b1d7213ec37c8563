"""The gradient of an in-place API's ``self`` is the gradient of the value it was given (as the dump
records it), not the incoming gradient: Mixtral's router does ``routing_weights /= sum`` in training."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from replay_dumps import forward, tensor

from msprobe.run_ut import execute, registry
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


# --- a low-precision self with a wider operand ------------------------------------------------------


def _mixed(name: str, out_dtype: str, operand: str = "torch.float32") -> ApiRecord:
    """``bf16 x`` times (or ``*=``) ``y`` of dtype ``operand``, both requiring grad; the incoming
    gradient in ``out_dtype``."""
    return ApiRecord(
        name,
        0,
        forward(
            tensor("torch.bfloat16", [4096], -1.0, 1.0, requires_grad=True),
            tensor(operand, [4096], -1.0, 1.0, requires_grad=True),
            output=[tensor(out_dtype, [4096], -1.0, 1.0)],
        ),
        {"input": [tensor(out_dtype, [4096], -1.0, 1.0)]},
    )


def _on_operand(gradient: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A device function running the API with its second argument passed through the identity whose
    gradient is ``gradient(incoming)``."""

    class Fault(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, y: torch.Tensor) -> torch.Tensor:
            return y.clone()

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return gradient(g)

    def device_function(func: Any) -> Any:
        def faulty(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
            return func(self, Fault.apply(other))

        return faulty

    return device_function


def _rounded_to_bf16(g: torch.Tensor) -> torch.Tensor:
    """The gradient rounded to bfloat16 and widened back."""
    return g.to(torch.bfloat16).to(g.dtype)


@pytest.mark.parametrize("operand", ["torch.float32", "torch.float64"])
@pytest.mark.parametrize("name", ["Tensor.mul_.0", "Tensor.__imul__.0"])
def test_the_wider_operands_gradient_of_an_in_place_api_is_judged_in_selfs_dtype(
    tmp_path: Path, name: str, operand: str
) -> None:
    """``bf16.mul_(fp32)``: the incoming gradient is bf16, and torch computes the fp32 operand's
    gradient from it in bf16, then widens it. Judged by fp32 thresholds against the float32 bench, that
    rounding was a backward ``error`` of a faultless device; it is judged (and shown) as bf16. The same
    for an fp64 operand (whose plan was not autocast's, so it was never narrowed)."""
    result = replay(_mixed(name, "torch.bfloat16", operand), tmp_path, "cpu")
    rows = {r.name: r for r in result.details}
    other = rows[f"{name}.backward.output.1"]
    assert other.device_dtype == "torch.bfloat16"
    assert other.status != "error", other.message
    assert result.result[2] != "error", result.reason


@pytest.mark.parametrize("operand", ["torch.float32", "torch.float64"])
def test_a_doubled_operand_gradient_of_an_in_place_api_is_still_an_error(
    tmp_path: Path, operand: str
) -> None:
    result = replay(
        _mixed("Tensor.mul_.0", "torch.bfloat16", operand),
        tmp_path,
        "cpu",
        device_function=_on_operand(lambda g: 2 * g),  # twice the true gradient
    )
    rows = {r.name: r.status for r in result.details}
    assert rows["Tensor.mul_.0.backward.output.1"] == "error", result.reason
    assert rows["Tensor.mul_.0.backward.output.0"] != "error", result.reason


def test_the_fp32_operands_gradient_of_an_fp32_output_keeps_fp32_thresholds(tmp_path: Path) -> None:
    """``bf16 * fp32`` out of place computes in fp32 (an fp32 output and gradient): a device that
    rounds the fp32 operand's gradient to bf16 is an error, judged as the fp32 it is."""
    f32, bf16 = torch.float32, torch.bfloat16
    mul, mul_ = registry.lookup("Tensor", "mul"), registry.lookup("Tensor", "mul_")
    assert execute.make_plan(mul, {bf16, f32}, "torch.float32").grads_in is None
    assert execute.make_plan(mul_, {bf16, f32}, "torch.float32", in_place=True).grads_in is None  # fp32 self
    assert execute.make_plan(mul_, {bf16, f32}, "torch.bfloat16", in_place=True).grads_in == bf16
    record = _mixed("Tensor.mul.0", "torch.float32")
    plain = replay(record, tmp_path, "cpu")
    rows = {r.name: r for r in plain.details}
    assert rows["Tensor.mul.0.backward.output.1"].device_dtype == "torch.float32"
    assert rows["Tensor.mul.0.backward.output.1"].status == "pass", plain.reason
    faulty = replay(record, tmp_path, "cpu", device_function=_on_operand(_rounded_to_bf16))
    rows = {r.name: r for r in faulty.details}
    assert rows["Tensor.mul.0.backward.output.1"].status == "error", faulty.reason


def test_an_operand_gradient_beyond_selfs_range_is_judged_as_computed(tmp_path: Path) -> None:
    """``fp16.div_(fp32)`` computes the fp32 operand's gradient (``-g * x / y**2``) in float32: values
    beyond float16's range are not rounded to the ``inf`` that fp16 would make of them (an error of a
    faultless device); the gradient is judged as the float32 it is."""
    record = ApiRecord(
        "Tensor.div_.0",
        0,
        forward(
            tensor("torch.float16", [256], 1.0, 2.0, requires_grad=True),
            tensor("torch.float32", [256], 0.002, 0.003, requires_grad=True),
            output=[tensor("torch.float16", [256], 300.0, 1000.0)],
        ),
        {"input": [tensor("torch.float16", [256], 0.5, 1.0)]},
    )
    result = replay(record, tmp_path, "cpu")
    rows = {r.name: r for r in result.details}
    other = rows["Tensor.div_.0.backward.output.1"]
    assert other.device_dtype == "torch.float32"
    assert other.status == "pass", other.message


class _AddcmulOperandGradOff(torch.autograd.Function):
    """``s + value * t1 * t2`` whose gradient for ``t1`` is 0.3% too large (bf16's rounding is 0.4%)."""

    @staticmethod
    def forward(ctx: Any, s: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, value: float) -> torch.Tensor:
        ctx.save_for_backward(t1, t2)
        ctx.value = value
        return s + value * t1 * t2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        t1, t2 = ctx.saved_tensors
        return g, g * t2 * ctx.value * 1.003, g * t1 * ctx.value, None


def _faulty_addcmul_(func: Any) -> Any:
    def addcmul_(self: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, value: float = 1) -> torch.Tensor:
        return self.copy_(_AddcmulOperandGradOff.apply(self.clone(), t1, t2, value))

    return addcmul_


def test_an_operand_gradient_computed_in_fp32_keeps_fp32_thresholds(tmp_path: Path) -> None:
    """``bf16.addcmul_(t1, t2)`` with fp32 ``t1``/``t2``: torch computes ``t1``'s gradient ``g * t2 *
    value`` in float32 (exactly the bench's): rounded to bf16 it gained a bf16 rounding error (a
    faultless device's ``pass`` became ``Warning``) and a device 0.3% off passed as a ``Warning``."""
    record = ApiRecord(
        "Tensor.addcmul_.0",
        0,
        forward(
            tensor("torch.bfloat16", [4096], -1.0, 1.0, requires_grad=True),
            tensor("torch.float32", [4096], -1.0, 1.0, requires_grad=True),
            tensor("torch.float32", [4096], -1.0, 1.0, requires_grad=True),
            value={"type": "float", "value": 0.5},
            output=[tensor("torch.bfloat16", [4096], -1.0, 1.0)],
        ),
        {"input": [tensor("torch.bfloat16", [4096], -1.0, 1.0)]},
    )
    result = replay(record, tmp_path, "cpu")
    rows = {r.name: r for r in result.details}
    assert rows["Tensor.addcmul_.0.backward.output.1"].device_dtype == "torch.float32"
    assert rows["Tensor.addcmul_.0.backward.output.1"].status == "pass", result.reason
    faulty = replay(record, tmp_path, "cpu", device_function=_faulty_addcmul_)
    rows = {r.name: r for r in faulty.details}
    assert rows["Tensor.addcmul_.0.backward.output.1"].status == "error", faulty.reason
