"""The API registry (declarative entries, lookup, fused-op entries) and the execution rules it drives."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from replay_dumps import forward, scalar, tensor

from msprobe.run_ut import api_table, execute, registry
from msprobe.run_ut.api_info import ApiInfo
from msprobe.run_ut.arg_values import TensorArg
from msprobe.run_ut.records import ApiRecord
from msprobe.run_ut.replay import replay

TORCH_TYPES = ("Functional", "Torch", "Tensor")


TYPE_FREE_NAMES = [(n, i) for i in api_table.ENTRIES if i.types is None for n in i.names]


@pytest.mark.parametrize(("name", "info"), TYPE_FREE_NAMES, ids=[n for n, _ in TYPE_FREE_NAMES])
def test_every_type_free_name_has_a_real_function(name: str, info: ApiInfo) -> None:
    if name == "test_api":
        pytest.skip("upstream's accumulative list holds only this placeholder name")
    found = [registry.resolve(t, name, info) for t in TORCH_TYPES]
    assert any(f is not None for f in found), name


def test_lookup_exact_then_family_default() -> None:
    conv = registry.lookup("Functional", "conv2d")
    assert conv.upcast_fp32 is False and conv.hf32 and conv == api_table.CONV.variant("conv2d")
    assert registry.lookup("Functional", "dropout").prepare is not None
    plain = registry.lookup("Torch", "tanh")
    assert plain == api_table.PLAIN.variant("tanh") and plain.upcast
    assert registry.resolve("Torch", "linalg.vector_norm", plain) is torch.linalg.vector_norm
    assert registry.resolve("Tensor", "__add__", plain) is torch.Tensor.__add__
    assert registry.resolve("Torch", "no_such", plain) is None


def test_unsupported_types_and_grammar() -> None:
    assert registry.unsupported_reason("Distributed.all_reduce.0", "Distributed", True) == (
        "API Distributed.all_reduce.0 not support for run ut. SKIP."
    )
    assert registry.unsupported_reason("Foo.x.0", "Foo", True) is not None
    assert registry.unsupported_reason("Torch.a.b.c.0", "Torch", False) is not None
    assert registry.unsupported_reason("Torch.exp.0", "Torch", True) is None


def test_skips_are_scoped_by_device() -> None:
    info = registry.lookup("Torch", "randn")
    assert info.skip_reason("cpu", set()) is None
    assert info.skip_reason("cuda", set()) == registry.RANDOM_REASON


def test_npu_record_without_a_reference_is_skipped_with_the_reason() -> None:
    record = ApiRecord("NPU.npu_not_an_op.0", 0, forward(tensor("torch.float32", [16], -1.0, 1.0)), None)
    assert replay(record, None, "cpu").reason == "no CPU reference for NPU.npu_not_an_op"


def test_fused_ops_run_their_entrys_reference() -> None:
    record = ApiRecord("NPU.npu_fast_gelu.0", 0, forward(tensor("torch.float32", [16], -1.0, 1.0)), None)
    entry = registry.lookup("NPU", "npu_fast_gelu")
    assert entry.reference is not None and registry.resolve("NPU", "npu_fast_gelu", entry) is not None
    wrong = ApiInfo("npu_fast_gelu", reference=lambda x: x * 3.0, backward_message=registry.NO_BACKWARD_UT)
    # the entry's reference is what runs on both sides: a fake one is used as it is
    result = replay(record, None, "cpu", info=wrong)
    assert result.result[:2] == ["NPU.npu_fast_gelu.0", "pass"]


def test_fused_prepare_inputs_sees_plain_tensors_and_can_add_one() -> None:
    seen: list[Any] = []

    def prepare_inputs(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        seen.extend(args)
        return args, {**kwargs, "mask": torch.zeros(16, dtype=torch.bool)}

    def reference(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x.masked_fill(mask, 0.0) * 2

    entry = ApiInfo("npu_twice", types=("NPU",), reference=reference, prepare_inputs=prepare_inputs)
    spec = tensor("torch.float16", [16], -1.0, 1.0, requires_grad=True)
    record = ApiRecord(
        "NPU.npu_twice.0", 0, forward(spec), {"input": [tensor("torch.float16", [16], -1.0, 1.0)]}
    )
    result = replay(record, None, "cpu", info=entry)
    assert isinstance(seen[0], torch.Tensor) and seen[0].dtype == torch.float16
    assert result.result == ["NPU.npu_twice.0", "pass", "pass"]


def test_fused_prepare_inputs_runs_on_inputs_read_from_files_too(tmp_path: Any) -> None:
    """docs/npu_ops.md: prepare_inputs runs on the one set of inputs, drawn or read from .pt files."""
    seen: list[torch.Tensor] = []

    def prepare_inputs(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        seen.append(args[0])
        return args, kwargs

    entry = ApiInfo(
        "npu_twice",
        types=("NPU",),
        reference=lambda x: x * 2,
        prepare_inputs=prepare_inputs,
        backward_message=registry.NO_BACKWARD_UT,
    )
    saved = torch.arange(16, dtype=torch.float32)
    torch.save(saved, tmp_path / "x.pt")
    record = ApiRecord(
        "NPU.npu_twice.0", 0, forward(tensor("torch.float32", [16], 0.0, 15.0, data_name="x.pt")), None
    )
    result = replay(record, tmp_path, "cpu", info=entry)
    assert result.result[:2] == ["NPU.npu_twice.0", "pass"]
    assert len(seen) == 1 and torch.equal(seen[0], saved)


def test_upcast_plan_single_and_mixed_dtypes() -> None:
    plain = registry.lookup("Torch", "add")
    one = execute.make_plan(plain, {torch.float16, torch.int64}, "torch.float16")
    assert one.bench_dtype == {torch.float16: torch.float32} and one.autocast_dtype is None
    assert execute.make_plan(plain, {torch.float32}, None).bench_dtype == {torch.float32: torch.float64}
    mixed = execute.make_plan(plain, {torch.float16, torch.float32}, "torch.float32")
    assert mixed.bench_dtype == {torch.float16: torch.float32, torch.float32: torch.float32}
    assert mixed.autocast_dtype == torch.float16
    conv = execute.make_plan(registry.lookup("Functional", "conv2d"), {torch.float32}, "torch.float32")
    assert conv.bench_dtype == {}
    type_as = execute.make_plan(registry.lookup("Tensor", "type_as"), {torch.float16}, "torch.float16")
    assert type_as.bench_dtype == {}


def test_hf32_rounding_clears_low_mantissa_bits() -> None:
    x = torch.tensor([1.0, 1.0 + 2**-23, 1.0 + 2**-12, 3.14159265], dtype=torch.float32)
    r = execute.hf32_round(x)
    bits = r.view(torch.int32)
    assert bool(((bits & 0xFFF) == 0).all())
    assert r[0] == 1.0 and r[1] == 1.0 and r[2] == 1.0 + 2**-11  # half of the last kept bit rounds up
    assert torch.allclose(r, x, rtol=2**-11)


def test_backward_returns_grads_of_positional_tensors_in_order() -> None:
    side = execute.Side("cpu", {torch.float32: torch.float64}, hf32=False)
    a = TensorArg(torch.randn(3), requires_grad=True)
    b = TensorArg(torch.randn(3), requires_grad=False)
    out = execute.run_forward(torch.mul, side, [a, b], {}, seed=1, autocast=None)
    assert out.dtype == torch.float64
    grads = execute.run_backward(side, out, torch.ones(3), None)
    assert grads[1] is None and torch.allclose(grads[0], b.tensor.double())


def test_in_place_api_on_a_grad_requiring_tensor_works() -> None:
    record = ApiRecord(
        "Tensor.add_.1",
        0,
        forward(
            tensor("torch.float32", [4], -1.0, 1.0, requires_grad=True),
            tensor("torch.float32", [4], -1.0, 1.0),
        ),
        None,
    )
    assert replay(record, None, "cpu").result[:2] == ["Tensor.add_.1", "pass"]


def test_dropout_is_replayed_with_p_zero() -> None:
    args: list[Any] = [TensorArg(torch.ones(4), False), 0.5]
    kwargs: dict[str, Any] = {"p": 0.3}
    prepare = registry.lookup("Functional", "dropout").prepare
    assert prepare is not None
    prepare(args, kwargs)
    assert args[1] == 0.0 and kwargs["p"] == 0.0


def test_multi_dimensional_index_list_becomes_a_tuple() -> None:
    index = [{"type": "slice", "value": [None, None, None]}, {"type": "slice", "value": [0, 2, None]}]
    record = ApiRecord(
        "Tensor.__getitem__.0", 0, forward(tensor("torch.float32", [4, 8], -1.0, 1.0), index), None
    )
    result = replay(record, None, "cpu")
    assert result.result[:2] == ["Tensor.__getitem__.0", "pass"]
    assert result.details[0].shape == "(4, 2)"


@pytest.mark.parametrize(
    ("index", "shape"),
    [
        ([3, 4], "(2, 2)"),  # rows 3 and 4: no element of a 5x2 tensor, so a tensor index
        ([True, False, True, False, True], "(3, 2)"),  # a mask, never a tuple of bools
        ([4, 1], "()"),  # fits the shape: read as x[4, 1], as the dump writes a tuple index
    ],
)
def test_an_int_or_bool_list_index_is_a_tuple_only_when_it_names_an_element(
    index: list[Any], shape: str
) -> None:
    """The dump writes ``x[i, j]`` and ``x[[i, j]]`` alike, as a JSON list."""
    kind = "bool" if isinstance(index[0], bool) else "int"
    spec = [{"type": kind, "value": v} for v in index]
    record = ApiRecord(
        "Tensor.__getitem__.0", 0, forward(tensor("torch.float32", [5, 2], -1.0, 1.0), spec), None
    )
    result = replay(record, None, "cpu")
    assert result.result[:2] == ["Tensor.__getitem__.0", "pass"], result.result
    assert result.details[0].shape == shape


def test_aten_overloads_resolve_through_torch_ops() -> None:
    spec = tensor("torch.float16", [8], -1.0, 1.0)
    record = ApiRecord("Aten.mul.Tensor.0", 0, forward(spec, tensor("torch.float16", [8], -1.0, 1.0)), None)
    assert (
        registry.resolve("Aten", "mul.Tensor", registry.lookup("Aten", "mul.Tensor"))
        is torch.ops.aten.mul.Tensor
    )
    assert replay(record, None, "cpu").result[:2] == ["Aten.mul.Tensor.0", "pass"]


GRID = torch.randperm(64, generator=torch.Generator().manual_seed(3)).float().view(1, 1, 8, 8)


@pytest.mark.parametrize(
    ("api_type", "name", "call"),
    [
        ("Functional", "gumbel_softmax", lambda: torch.nn.functional.gumbel_softmax(torch.zeros(4, 8))),
        (
            "Functional",
            "fractional_max_pool2d",
            lambda: torch.nn.functional.fractional_max_pool2d(GRID, 2, output_size=5),
        ),
        ("Functional", "rrelu_", lambda: torch.nn.functional.rrelu_(torch.full((16,), -1.0), training=True)),
    ],
)
def test_apis_that_draw_random_numbers_are_skipped_on_devices(api_type: str, name: str, call: Any) -> None:
    """Each draws from the generator (two seeds, two results), so a device's result is not the CPU's."""
    torch.manual_seed(0)
    first = call()
    torch.manual_seed(1)
    assert not torch.equal(first, call())
    info = registry.lookup(api_type, name)
    assert info.skip_reason("cpu", set()) is None
    assert info.skip_reason("npu", set()) == info.skip_reason("cuda", set()) == registry.RANDOM_REASON


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("Torch.randn_like.0", [tensor("torch.float32", [64], 0.0, 1.0)]),
        ("Torch.rand_like.0", [tensor("torch.float16", [64], 0.0, 1.0)]),
        ("Torch.bernoulli.0", [tensor("torch.float32", [64], 0.25, 0.75)]),
        ("Tensor.uniform_.0", [tensor("torch.bfloat16", [64], 0.0, 1.0)]),
        ("Tensor.normal_.0", [tensor("torch.float32", [64], 0.0, 1.0)]),
    ],
)
def test_random_apis_replay_identically_on_the_cpu(name: str, args: list[Any]) -> None:
    """On the CPU both sides draw from the same seed, in the recorded dtype: the generator draws other
    numbers in a wider dtype, so a raised benchmark would differ by its draws, not by precision."""
    result = replay(ApiRecord(name, 0, forward(*args), None), None, "cpu")
    assert result.result[1] == "pass", result.reason
    assert [row.bench_dtype for row in result.details] == [args[0]["dtype"]]


@pytest.mark.parametrize("name", ["Functional.cross_entropy.0", "Functional.nll_loss.0"])
def test_a_class_target_with_ignored_positions_replays(name: str) -> None:
    """Labels padded with ignore_index -100 (a causal LM's labels): the statistics' Min is -100, and
    the drawn targets are classes, not out-of-range indices."""
    scores = tensor("torch.float32", [8, 10], -5.0, -0.01, requires_grad=True)
    target = tensor("torch.int64", [8], -100, 9)
    record = ApiRecord(name, 0, forward(scores, target, ignore_index=scalar("int", -100)), None)
    assert replay(record, None, "cpu").result[1] == "pass"


def test_torch_lu_records_are_linalg_lu() -> None:
    """The dump names ``torch.linalg.lu`` ``Torch.lu`` (and never records the deprecated ``torch.lu``):
    its records replay ``torch.linalg.lu`` (three outputs P, L, U), not ``torch.lu``."""
    info = registry.lookup("Torch", "lu")
    assert registry.resolve("Torch", "lu", info) is torch.linalg.lu
