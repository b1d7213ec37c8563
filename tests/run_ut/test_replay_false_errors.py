"""Rules that remove false errors of fp32 replays: the noise floor of near-zero outputs, statistics
inputs around a recorded -inf, the float32 bench fallback, CPU autocast and the summary counts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from replay_dumps import forward, scalar, tensor

from msprobe.run_ut import execute, registry
from msprobe.run_ut.arg_values import TensorArg
from msprobe.run_ut.draws import random_tensor
from msprobe.run_ut.records import ApiRecord
from msprobe.run_ut.registry import ApiInfo
from msprobe.run_ut.replay import replay
from msprobe.run_ut.results import ResultWriter, api_verdict
from msprobe.run_ut.standards import ERROR, PASS, at_noise_floor, compare_outputs
from msprobe.run_ut.standards.thresholds import NOISE_FLOOR

# --- noise floor -----------------------------------------------------------------------------------


def _sum_rows(args: list[Any], kwargs: dict[str, Any], grad: Any) -> execute.BenchResult:
    """The bench of ``x.sum(0)`` (a bias gradient: a column sum) in float64."""
    return execute.BenchResult(args[0].tensor.double().sum(0), None)


def _judged(g: torch.Tensor, device: torch.Tensor) -> tuple[str, str]:
    """The 8.1.1 chain's verdict of ``device`` as ``g.sum(0)``, and the verdict after the noise-floor
    rule (floors made as replay makes them)."""
    args = [TensorArg(g, False)]
    base = _sum_rows(args, {}, None)
    floor, _ = execute.noise_floors(
        _sum_rows,
        base,
        args,
        {},
        None,
        seed=7,
        draws=NOISE_FLOOR.draws,
        compute=None,
        max_ulps=NOISE_FLOOR.max_ulps,
    )
    rows = compare_outputs("Torch.sum.0", "forward", base.output, device)
    return rows[0].status, at_noise_floor(rows, base.output, device, floor)[0].status


def _cancelling(seed: int, rows: int, cols: int, scale: float) -> torch.Tensor:
    """fp32 values of magnitude ``scale`` whose column sums are zero up to their fp32 rounding."""
    values = np.random.default_rng(seed).standard_normal((rows, cols)) * scale
    return torch.from_numpy(values - values.mean(axis=0)).float()


CANCELLING = dict(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(8, 256),
    cols=st.integers(2, 64),
    scale=st.floats(1e-8, 1e4),
)


@settings(max_examples=60, deadline=None)
@given(**CANCELLING, ulps=st.integers(0, 3))
def test_zero_mean_cancellation_with_ulp_noise_passes(
    seed: int, rows: int, cols: int, scale: float, ulps: int
) -> None:
    """A sum that is zero but for rounding: the fp32 device sum plus a few ulps of the scale passes."""
    g = _cancelling(seed, rows, cols, scale)
    noise = ulps * float(torch.finfo(torch.float32).eps) * scale
    device = g.sum(0) + torch.full((cols,), noise, dtype=torch.float32)
    assert _judged(g, device)[1] == PASS


@settings(max_examples=60, deadline=None)
@given(**CANCELLING, sign_seed=st.integers(0, 2**32 - 1))
def test_a_wrong_near_zero_output_still_fails(
    seed: int, rows: int, cols: int, scale: float, sign_seed: int
) -> None:
    """The same near-zero sum off by a thousandth of its scale (random signs): the chain's error
    stands. (Where the chain passes, e.g. max abs error < 0.001, the rule is never asked.)"""
    g = _cancelling(seed, rows, max(cols, 16), scale)
    signs = torch.randint(0, 2, (g.shape[1],), generator=torch.Generator().manual_seed(sign_seed)) * 2 - 1
    device = g.sum(0) + 1e-3 * scale * signs
    chain, final = _judged(g, device)
    assume(chain == ERROR)
    assert final == ERROR


def test_a_small_output_that_is_not_cancellation_keeps_its_error() -> None:
    """``x * 1e-10`` is small but exact to fp32 precision: a device returning zeros is an error (an
    input-magnitude scale would have excused it; the floor moves with the output instead)."""
    x = torch.linspace(-3, 3, 64)
    args = [TensorArg(x, False)]

    def bench(a: list[Any], k: dict[str, Any], g: Any) -> execute.BenchResult:
        return execute.BenchResult(a[0].tensor.double() * 1e-10, None)

    base = bench(args, {}, None)
    floor, _ = execute.noise_floors(
        bench, base, args, {}, None, seed=1, draws=2, compute=None, max_ulps=NOISE_FLOOR.max_ulps
    )
    device = torch.zeros(64)
    rows = at_noise_floor(
        compare_outputs("Torch.mul.0", "forward", base.output, device), base.output, device, floor
    )
    assert rows[0].status == ERROR


def test_a_jump_of_a_discontinuous_function_is_no_floor() -> None:
    """``floor`` of integer-valued inputs jumps by 1 under a one-ulp perturbation: that is no rounding
    noise, so a device that is off by one keeps its error."""
    x = torch.full((64,), 3.0)
    args = [TensorArg(x, False)]

    def bench(a: list[Any], k: dict[str, Any], g: Any) -> execute.BenchResult:
        return execute.BenchResult(torch.floor(a[0].tensor.double()), None)

    base = bench(args, {}, None)
    floor, _ = execute.noise_floors(
        bench, base, args, {}, None, seed=1, draws=2, compute=None, max_ulps=NOISE_FLOOR.max_ulps
    )
    assert floor is None
    device = torch.full((64,), 2.0)
    rows = compare_outputs("Torch.floor.0", "forward", base.output, device)
    assert rows[0].status == ERROR and at_noise_floor(rows, base.output, device, floor)[0].status == ERROR


def test_floors_depend_only_on_the_seed() -> None:
    g = _cancelling(3, 32, 8, 1e-6)
    args = [TensorArg(g, False)]
    base = _sum_rows(args, {}, None)
    a = execute.noise_floors(
        _sum_rows, base, args, {}, None, seed=5, draws=2, compute=None, max_ulps=NOISE_FLOOR.max_ulps
    )[0]
    b = execute.noise_floors(
        _sum_rows, base, args, {}, None, seed=5, draws=2, compute=None, max_ulps=NOISE_FLOOR.max_ulps
    )[0]
    assert torch.equal(a, b) and float(a.max()) > 0


def _bias_grad_record(cancel: bool) -> ApiRecord:
    """``Functional.linear`` whose bias gradient (backward output 2) is the column sum of the grad."""
    return ApiRecord(
        "Functional.linear.0",
        0,
        forward(
            tensor("torch.float32", [32, 16], -2.0, 2.0, requires_grad=True),
            tensor("torch.float32", [8, 16], -0.1, 0.1, requires_grad=True),
            tensor("torch.float32", [8], 0.0, 0.0, requires_grad=True),
            output=[tensor("torch.float32", [32, 8], -1.0, 1.0)],
        ),
        {"input": [{**tensor("torch.float32", [32, 8], -1e-6, 1e-6), "data_name": "g.pt"}]},
    )


def test_replay_judges_a_cancelled_bias_gradient_by_its_floor(tmp_path: Path) -> None:
    """End to end through ``replay``: a zero-sum gradient makes the bias grad pure rounding noise."""
    g = _cancelling(11, 32, 8, 1e-6)
    torch.save(g, tmp_path / "g.pt")
    result = replay(_bias_grad_record(True), tmp_path, "cpu")
    bias = next(r for r in result.details if r.name.endswith("backward.output.2"))
    assert bias.status == PASS and "noise floor" in bias.message
    assert result.result[1:3] == ["pass", "pass"] and result.outcome == "passed"


# --- statistics inputs around -inf ---------------------------------------------------------------

FLOAT_DTYPES = st.sampled_from(["torch.float16", "torch.bfloat16", "torch.float32"])


def test_an_error_stays_an_error_when_the_floor_cannot_be_measured() -> None:
    """The floor is a second opinion on an error: where the perturbed inputs leave the API's domain
    (a probability of 1 moved above 1 for binary_cross_entropy), there is no floor and the error
    stands; it never turns the API into a SKIP."""
    probability = tensor("torch.float32", [64], 0.5, 1.0, requires_grad=True)
    target = tensor("torch.float32", [64], 0.0, 1.0)
    record = ApiRecord("Functional.binary_cross_entropy.0", 0, forward(probability, target), None)

    def off_by_a_percent(function: Any) -> Any:
        return lambda *args, **kwargs: function(*args, **kwargs) * 1.01

    result = replay(record, None, "cpu", device_function=off_by_a_percent)
    assert result.result[1] == ERROR, result.reason


@settings(max_examples=100, deadline=None)
@given(
    dtype=FLOAT_DTYPES,
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    high=st.floats(-1e3, 1e3),
    mask_value=st.sampled_from(["-inf", "finfo.min", "finfo.min / 1.5"]),
    seed=st.integers(0, 2**31),
)
def test_a_masking_min_is_kept_with_a_safe_finite_rest(
    dtype: str, shape: list[int], high: float, mask_value: str, seed: int
) -> None:
    """A Min of -inf (T5's relative-position ``log``) or near the dtype's lowest value (Hugging Face's
    additive attention masks: ``torch.finfo(dtype).min``) is a mask value, not the low end of a range."""
    torch_dtype = getattr(torch, dtype.removeprefix("torch."))
    lowest = float(torch.finfo(torch_dtype).min)
    low = {"-inf": -math.inf, "finfo.min": lowest, "finfo.min / 1.5": lowest / 1.5}[mask_value]
    spec = {**tensor(dtype, shape, low, high), "Mean": -math.inf, "Norm": math.inf}
    t = random_tensor(spec, torch.Generator().manual_seed(seed)).float().reshape(-1)
    assert not torch.isnan(t).any() and not (t == math.inf).any()
    if t.numel() > 1:
        assert t[0] == torch.tensor(low).to(torch_dtype).float()
        rest = t[1:]
        assert torch.isfinite(rest).all()
        span = max(abs(high), 1.0) * 1.01 + 1e-2  # the dtype's rounding of the bounds
        assert (rest <= high + span * 1e-2).all() and (rest >= high - span).all()
        assert torch.isfinite((rest * 8).to(torch_dtype)).all()  # x * 8 stays finite in the dumped dtype


def test_attention_with_a_float_mask_replays_from_statistics(tmp_path: Path) -> None:
    """An additive float mask (0 where visible, ``finfo.min`` where masked; Falcon's alibi adds a
    positive bias) drawn in ``[finfo.min, Max]`` made every softmax row one-hot: gradients of rounding
    noise only, which the fp32 kernel and the fp64 bench round differently (a false backward error)."""
    qkv = tensor("torch.float32", [2, 4, 16, 8], -0.39, 0.39, requires_grad=True)
    mask = {**tensor("torch.float32", [2, 4, 16, 16], float(torch.finfo(torch.float32).min), 1.3258)}
    mask |= {"Mean": -math.inf, "Norm": math.inf}
    grad = {
        "input": [tensor("torch.float32", [2, 4, 16, 8], -0.03, 0.03)],
        "output": [None, None, None, None],
    }
    record = ApiRecord(
        "Functional.scaled_dot_product_attention.0",
        0,
        forward(qkv, qkv, qkv, attn_mask=mask, scale={"type": "float", "value": 0.35355339059327373}),
        grad,
    )
    result = replay(record, tmp_path, "cpu")
    assert result.result[1:3] == ["pass", "pass"], result.reason


def test_t5_style_log_input_replays_without_one_sided_inf(tmp_path: Path) -> None:
    """``Tensor.__mul__`` of a relative-position ``log`` (Min -inf, Mean -inf, Norm inf) by 8."""
    x = {**tensor("torch.float32", [16, 16], -math.inf, 0.2267), "Mean": -math.inf, "Norm": math.inf}
    record = ApiRecord(
        "Tensor.__mul__.0", 0, forward(x, {"type": "int", "value": 8}, output=[dict(x, Max=1.81)]), None
    )
    result = replay(record, tmp_path, "cpu")
    assert result.result[1] == "pass", result.reason


# --- float32 bench fallback ------------------------------------------------------------------------


def test_api_without_float64_kernel_is_benchmarked_in_float32(tmp_path: Path) -> None:
    """``F.grouped_mm`` has no float64 CPU kernel: benchmarked in float32, said in the Message."""
    pytest.importorskip("torch.nn.functional").grouped_mm  # noqa: B018
    offs = {**tensor("torch.int32", [2], 2, 4)}
    record = ApiRecord(
        "Functional.grouped_mm.0",
        0,
        forward(
            tensor("torch.float32", [4, 8], -1.0, 1.0),
            tensor("torch.float32", [2, 8, 8], -1.0, 1.0),
            offs=offs,
        ),
        None,
    )
    result = replay(record, tmp_path, "cpu")
    row = result.details[0]
    assert result.result[1] == "pass", result.reason
    assert row.bench_dtype == "torch.float32" and row.message.startswith("Bench ran in float32")
    assert "Double" in row.message  # the float64 failure is named


def test_fallback_cast_only_drops_float64_targets() -> None:
    f16, f32, f64 = torch.float16, torch.float32, torch.float64
    assert execute.fallback_cast({f32: f64}) == {}
    assert execute.fallback_cast({f16: f32}) is None
    assert execute.fallback_cast({f16: f32, f32: f64}) == {f16: f32}


# --- autocast --------------------------------------------------------------------------------------


def test_plan_reads_autocast_from_the_dtypes() -> None:
    f32, bf16 = torch.float32, torch.bfloat16
    low_out = execute.make_plan(ApiInfo("linear"), {f32}, "torch.bfloat16")
    assert low_out.autocast_dtype == bf16 and low_out.bench_round == bf16
    mixed_wide_out = execute.make_plan(ApiInfo("mul"), {f32, bf16}, "torch.float32")
    assert mixed_wide_out.autocast_dtype == bf16 and mixed_wide_out.bench_round is None
    plain = execute.make_plan(ApiInfo("linear"), {f32}, "torch.float32")
    assert plain.autocast_dtype is None and plain.bench_round is None


@pytest.mark.parametrize(
    ("name", "dtypes"),
    [
        ("Functional.linear.0", ("torch.float32", "torch.float32")),
        ("Torch.matmul.0", ("torch.bfloat16", "torch.float32")),
    ],
)
def test_autocast_records_replay_in_bf16_on_the_cpu(
    tmp_path: Path, name: str, dtypes: tuple[str, str]
) -> None:
    """fp32 inputs with a bf16 output, or bf16 @ fp32 (mixed: 'expected m1 and m2 to have the same
    dtype' without autocast): the device side runs under CPU autocast and gives bf16."""
    record = ApiRecord(
        name,
        0,
        forward(
            tensor(dtypes[0], [8, 16], -1.0, 1.0),
            tensor(dtypes[1], [16, 16] if "matmul" in name else [4, 16], -1.0, 1.0),
            output=[tensor("torch.bfloat16", [8, 4], -1.0, 1.0)],
        ),
        None,
    )
    result = replay(record, tmp_path, "cpu")
    assert result.outcome != "skipped", result.reason
    assert result.details[0].device_dtype == "torch.bfloat16"
    assert result.result[1] in ("pass", "Warning"), result.reason  # bf16 rounding of the output only


def test_autocast_input_grads_are_judged_in_the_autocast_dtype(tmp_path: Path) -> None:
    """The grads of fp32 inputs that autocast cast to bf16 were computed in bf16: judged as bf16."""
    record = ApiRecord(
        "Functional.linear.0",
        0,
        forward(
            tensor("torch.float32", [32, 64], -1.0, 1.0, requires_grad=True),
            tensor("torch.float32", [16, 64], -0.2, 0.2, requires_grad=True),
            output=[tensor("torch.bfloat16", [32, 16], -1.0, 1.0)],
        ),
        {"input": [tensor("torch.bfloat16", [32, 16], -0.01, 0.01)]},
    )
    result = replay(record, tmp_path, "cpu")
    grads = [r for r in result.details if ".backward." in r.name]
    assert [r.device_dtype for r in grads] == ["torch.bfloat16", "torch.bfloat16"]
    assert result.result[2] in ("pass", "Warning"), result.reason


def test_a_wider_output_of_low_precision_inputs_replays_under_autocast_with_a_float64_bench() -> None:
    """bf16 logits to an fp32 loss: autocast ran ``cross_entropy`` in float32 (its float32 policy), or
    the call cast explicitly; the device replays under bf16 autocast (both then give float32) and the
    bench sits above that float32, in float64."""
    f32, f64, bf16 = torch.float32, torch.float64, torch.bfloat16
    plan = execute.make_plan(ApiInfo("cross_entropy"), {bf16, torch.int64}, "torch.float32")
    assert plan.autocast_dtype == bf16 and plan.bench_dtype == {bf16: f64} and plan.bench_round is None
    # not widened: as before
    same = execute.make_plan(ApiInfo("exp"), {bf16}, "torch.bfloat16")
    assert same.autocast_dtype is None and same.bench_dtype == {bf16: f32}


def test_a_loss_that_autocast_ran_in_float32_replays_in_float32(tmp_path: Path) -> None:
    record = ApiRecord(
        "Functional.cross_entropy.0",
        0,
        forward(
            tensor("torch.bfloat16", [32, 256], -8.0, 8.0, requires_grad=True),
            tensor("torch.int64", [32], 0, 255),
            output=[tensor("torch.float32", [], 5.0, 5.0)],
        ),
        {"input": [tensor("torch.float32", [], 1.0, 1.0)]},
    )
    result = replay(record, tmp_path, "cpu")
    assert result.outcome != "skipped", result.reason
    assert result.details[0].device_dtype == "torch.float32"  # as dumped (without autocast: bf16)
    assert result.details[0].bench_dtype == "torch.float64"
    assert result.result[1:3] == ["pass", "pass"], result.reason


def test_a_norm_with_fp32_weights_of_a_bf16_input_is_the_kernels_mixed_form(tmp_path: Path) -> None:
    """``layer_norm(bf16 x, fp32 weight, fp32 bias)`` with a bf16 output is the kernel's own mixed-dtype
    form (no autocast lowers a norm): the bench keeps the fp32 weight unrounded, and the device's
    weight gradient is judged as the fp32 it is."""
    f32, bf16 = torch.float32, torch.bfloat16
    norm = registry.lookup("Functional", "layer_norm")
    assert execute.make_plan(norm, {bf16, f32}, "torch.bfloat16").bench_round is None
    assert (
        execute.make_plan(registry.lookup("Functional", "linear"), {bf16, f32}, "torch.bfloat16").bench_round
        == bf16
    )
    record = ApiRecord(
        "Functional.layer_norm.0",
        0,
        forward(
            tensor("torch.bfloat16", [16, 64], -2.0, 2.0, requires_grad=True),
            {"type": "torch.Size", "value": [64]},
            tensor("torch.float32", [64], 0.9, 1.1, requires_grad=True),
            tensor("torch.float32", [64], -0.1, 0.1, requires_grad=True),
            output=[tensor("torch.bfloat16", [16, 64], -2.0, 2.0)],
        ),
        {"input": [tensor("torch.bfloat16", [16, 64], -0.1, 0.1)]},
    )
    result = replay(record, tmp_path, "cpu")
    grads = {r.name.rsplit(".", 1)[-1]: r for r in result.details if ".backward." in r.name}
    assert grads["0"].device_dtype == "torch.bfloat16"
    assert grads["1"].device_dtype == "torch.float32" and grads["2"].device_dtype == "torch.float32"


@pytest.mark.parametrize("op", ["npu_rms_norm", "npu_layer_norm_eval", "npu_group_norm_silu"])
def test_a_fused_npu_norm_with_fp32_weights_keeps_them_on_the_bench(op: str) -> None:
    """torch_npu's fused norms take a bf16/fp16 input with an fp32 gamma as they are (no autocast lowers
    a torch_npu kernel): the bench must not round the fp32 weight to bf16 first, as for ``layer_norm``."""
    f32, bf16 = torch.float32, torch.bfloat16
    plan = execute.make_plan(registry.lookup("NPU", op), {bf16, f32}, "torch.bfloat16")
    assert plan.bench_round is None and plan.grads_in is None


def test_npu_rms_norm_of_a_bf16_input_with_an_fp32_gamma_is_no_warning(tmp_path: Path) -> None:
    """A faultless kernel (fp32 gamma, rounded once to bf16) passed as the nearest bf16 of the bench; with
    the gamma rounded to bf16 on the bench, its error doubled and the row was a ``Warning``."""
    record = ApiRecord(
        "NPU.npu_rms_norm.0",
        0,
        forward(
            tensor("torch.bfloat16", [64, 512], -4.0, 4.0),
            tensor("torch.float32", [512], 0.5, 1.5),
            output=[
                tensor("torch.bfloat16", [64, 512], -4.0, 4.0),
                tensor("torch.float32", [64, 1], 0.1, 1.0),
            ],
        ),
        None,
    )
    result = replay(record, tmp_path, "cpu")
    assert result.result[1] == "pass", [(d.name, d.status, d.message) for d in result.details]


def test_an_in_place_op_with_a_wider_operand_is_type_promotion_not_an_autocast_cast() -> None:
    """``bf16.mul_(fp32)``: torch computes in fp32 and rounds once into the bf16 tensor (autocast never
    casts an in-place op), so the bench keeps the fp32 operand unrounded."""
    f32, bf16 = torch.float32, torch.bfloat16
    mul = registry.lookup("Tensor", "mul_")
    assert execute.make_plan(mul, {bf16, f32}, "torch.bfloat16", in_place=True).bench_round is None
    assert execute.make_plan(mul, {bf16, f32}, "torch.bfloat16").bench_round == bf16  # mul under autocast


def test_an_aten_in_place_overload_keeps_its_wider_operand_on_the_bench(tmp_path: Path) -> None:
    """``Aten.mul_.Tensor``: the op is ``mul_`` (in place), not its overload ``Tensor``. The bench keeps
    the fp32 operand, so the bf16 device differs from it by the final rounding only (half a bf16 ulp of
    values below 1); rounding the operand first too would double that error."""
    record = ApiRecord(
        "Aten.mul_.Tensor.0",
        0,
        forward(
            tensor("torch.bfloat16", [4096], -1.0, 1.0),
            tensor("torch.float32", [4096], -1.0, 1.0),
            output=[tensor("torch.bfloat16", [4096], -1.0, 1.0)],
        ),
        None,
    )
    row = replay(record, tmp_path, "cpu").details[0]
    assert row.device_dtype == "torch.bfloat16"
    assert float(row.metrics["最大绝对误差"]) <= 2.0**-9 * 1.001


def test_a_dtype_argument_is_raised_with_the_tensors_on_the_bench(tmp_path: Path) -> None:
    """``x.sum(dtype=torch.bfloat16)`` of a bf16 ``x``: the bench sums in float32 like its inputs (it
    summed in bf16, as the device, and could only pass)."""
    record = ApiRecord(
        "Tensor.sum.0",
        0,
        forward(
            tensor("torch.bfloat16", [4096], 0.5, 1.5),
            dtype={"type": "torch.dtype", "value": "torch.bfloat16"},
            output=[tensor("torch.bfloat16", [], 4096.0, 4096.0)],
        ),
        None,
    )
    result = replay(record, tmp_path, "cpu")
    assert result.details[0].bench_dtype == "torch.float32"
    assert result.details[0].device_dtype == "torch.bfloat16"


# --- summary counts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cells", "verdict"),
    [
        (["a", "pass", "error"], "error"),
        (["a", "error", " "], "error"),
        (["a", "pass", "Warning"], "Warning"),
        (["a", "pass", "SKIP", "Multiple backward is not supported."], "pass"),
        (["a", "SKIP", "SKIP", "why"], "SKIP"),
        (["a", "pass", " "], "pass"),
    ],
)
def test_api_verdict_counts_both_directions(cells: list[str], verdict: str) -> None:
    assert api_verdict(cells) == verdict


def test_summary_counts_an_api_with_a_backward_error_as_error(tmp_path: Path) -> None:
    writer = ResultWriter.create(tmp_path / "dump.json", tmp_path, "20260101000000", {"a": 0, "b": 1})
    writer.add({"api": "a", "result": ["a", "pass", "error"], "details": []})
    writer.add({"api": "b", "result": ["b", "pass", "pass"], "details": []})
    assert writer.counts() == {"error": 1, "pass": 1}


def test_a_call_with_an_empty_piece_replays_without_error(tmp_path: Path) -> None:
    """Phi3 (``partial_rotary_factor`` 1.0) concatenates the rotated query with an empty pass-through
    part; Mamba's ``tensor_split`` gives an empty piece: the empty gradient or output has nothing to
    compare (8.1.1: an error per layer)."""
    rotated = tensor("torch.float32", [2, 4, 16, 8], -1.0, 1.0, requires_grad=True)
    passed = {**tensor("torch.float32", [2, 4, 16, 0], None, None, requires_grad=True), "Mean": None}
    grad = {"input": [tensor("torch.float32", [2, 4, 16, 8], -1e-2, 1e-2)], "output": [None, None]}
    dim = {"type": "int", "value": -1}
    cat = ApiRecord("Torch.cat.0", 0, forward([rotated, passed], dim=dim), grad)
    split = ApiRecord(
        "Torch.tensor_split.0", 0, forward(rotated, [{"type": "int", "value": 8}], dim=dim), None
    )
    for record in (cat, split):
        result = replay(record, tmp_path, "cpu")
        assert "error" not in result.result[1:3], result.reason
        assert any(row.message == "The output is empty: no element to compare." for row in result.details)


# --- inputs drawn from statistics that overflow where the real call did not -------------------------


def _loss_scaled_linear(grad_max: float, *, files: str) -> ApiRecord:
    """A fp16 ``Functional.linear`` of a GradScaler run: its incoming gradient is loss-scaled (tens of
    thousands), and the recorded gradients of its inputs (``grad_max``) say whether the real ones were
    finite. ``files``: the inputs read from ``.pt`` files (``x``, ``w``, ``b``, ``g``), the others drawn."""

    def arg(dtype: str, shape: list[int], lo: float, hi: float, name: str) -> dict[str, Any]:
        spec = tensor(dtype, shape, lo, hi, requires_grad=True)
        return {**spec, "data_name": f"{name}.pt"} if name in files else spec

    grads = [tensor("torch.float16", shape, -grad_max, grad_max) for shape in ([64, 32], [32, 32], [32])]
    return ApiRecord(
        "Functional.linear.0",
        0,
        forward(
            arg("torch.float16", [64, 32], -1.0, 1.0, "x"),
            arg("torch.float16", [32, 32], -0.1, 0.1, "w"),
            arg("torch.float16", [32], -0.1, 0.1, "b"),
            output=[tensor("torch.float16", [64, 32], -4.0, 4.0)],
        ),
        {"input": [arg("torch.float16", [64, 32], -30000.0, 30000.0, "g")], "output": grads},
    )


@pytest.mark.parametrize(
    ("grad_max", "files", "backward"),
    [
        (28960.0, "", "SKIP"),  # drawn inputs, finite real gradients: the overflow is the draw's
        (math.inf, "", ERROR),  # the real gradients overflowed too: a real finding
        (28960.0, "xwbg", ERROR),  # real inputs (a tensor dump) that overflow: a real finding
        (28960.0, "xwg", ERROR),  # real inputs but one: the overflow may be theirs
    ],
)
def test_an_overflow_of_drawn_inputs_where_the_real_call_was_finite_is_no_error(
    tmp_path: Path, grad_max: float, files: str, backward: str
) -> None:
    """fp16 + GradScaler: the loss-scaled gradient drawn uniformly between its Min and Max sums past
    fp16's range in the bias and weight gradients, where the real call's were finite (its record says
    so): that was an ``error`` of every such linear, not a precision loss of the API."""
    gen = torch.Generator().manual_seed(3)
    files_made = (("x", [64, 32], 1.0), ("w", [32, 32], 0.1), ("b", [32], 0.1), ("g", [64, 32], 3e4))
    for name, shape, scale in files_made:
        torch.save(((torch.rand(shape, generator=gen) * 2 - 1) * scale).half(), tmp_path / f"{name}.pt")
    result = replay(_loss_scaled_linear(grad_max, files=files), tmp_path, "cpu")
    assert result.result[1] == PASS
    assert result.result[2] == backward, result.reason
    overflowed = [r for r in result.details if r.name.startswith("Functional.linear.0.backward")]
    if backward == "SKIP":
        assert "inputs drawn from the dump's statistics overflow float16" in result.result[3]
        assert result.outcome == "passed"  # a skipped backward alone passes, as 8.1.1's messages do
        assert {r.status for r in overflowed} >= {"SKIP"} and ERROR not in {r.status for r in overflowed}
    else:
        assert result.outcome == "failed" and "drawn" not in result.reason


def test_grouped_mm_group_ends_drawn_from_statistics_increase(tmp_path: Path) -> None:
    """``grouped_mm``'s ``offs`` (the end of each expert's rows) was drawn like any int tensor, in any
    order (``[5, 31, 16, 32]``): the replay ran the experts on groups the model never made."""
    seen: list[torch.Tensor] = []

    def watching(function: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            seen.append(kwargs["offs"].clone())
            return function(*args, **kwargs)

        return run

    record = ApiRecord(
        "Functional.grouped_mm.0",
        0,
        forward(
            tensor("torch.float32", [32, 16], -1.0, 1.0),
            tensor("torch.float32", [8, 16, 8], -1.0, 1.0),
            offs=tensor("torch.int32", [8], 2, 32),
            output=[tensor("torch.float32", [32, 8], -4.0, 4.0)],
        ),
        None,
    )
    result = replay(record, tmp_path, "cpu", device_function=watching)
    assert seen, result.reason
    offs = seen[0]
    assert torch.equal(offs, offs.sort().values) and int(offs[-1]) == 32 and int(offs[0]) == 2
    assert len(set(offs.tolist())) > 2  # drawn, not a constant that is trivially in order


def test_a_kernel_that_gives_nan_where_the_result_fits_is_an_error_even_on_drawn_inputs() -> None:
    """Only a true result beyond the dtype's range excuses the device's inf or NaN: a kernel that
    fails on its own (NaN where the benchmark is 0.3) stays an error, whatever the inputs."""

    def nan_at_the_end(function: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            out = function(*args, **kwargs).clone()
            out[-4:] = math.nan
            return out

        return run

    record = ApiRecord(
        "Functional.gelu.0",
        0,
        forward(tensor("torch.float32", [64], -3.0, 3.0), output=[tensor("torch.float32", [64], -0.2, 3.0)]),
        None,
    )
    result = replay(record, None, "cpu", device_function=nan_at_the_end)
    assert result.result[1] == ERROR and result.outcome == "failed", result.result


def test_an_excused_overflow_hides_no_other_error() -> None:
    """Another output's error in the direction keeps every row's verdict; a forward SKIP keeps the
    backward's error in the result row."""
    from msprobe.run_ut.standards import DetailsRow, drawn_overflow, result_row

    name = "Torch.var_mean.0.forward.output"
    f64, f16 = torch.float64, torch.float16
    bench = [torch.tensor([7e4, 1.0], dtype=f64), torch.tensor([1.0, 2.0], dtype=f64)]
    device = [torch.tensor([math.inf, 1.0], dtype=f16), torch.tensor([1.5, 2.0], dtype=f16)]
    rows = [DetailsRow(f"{name}.0", ERROR, "inf"), DetailsRow(f"{name}.1", ERROR, "wrong mean")]
    recorded = [tensor("torch.float16", [2], 1.0, 2.0), tensor("torch.float16", [2], 1.0, 2.0)]
    assert drawn_overflow(rows, bench, device, recorded) == rows
    excused = drawn_overflow(rows[:1], bench[:1], device[:1], recorded[:1])
    assert excused[0].status == "SKIP" and excused[0].skips_api
    backward = [DetailsRow("Torch.var_mean.0.backward.output.0", ERROR, "bad grad")]
    assert result_row("Torch.var_mean.0", excused, backward)[:3] == ["Torch.var_mean.0", "SKIP", ERROR]


# --- a selection at computed coordinates --------------------------------------------------------------


def _grid_sample(mode: str) -> ApiRecord:
    return ApiRecord(
        f"Functional.grid_sample.{int(mode == 'bilinear')}",
        0,
        forward(
            tensor("torch.float32", [1, 1, 6, 6], -3.0, 3.0, data_name="x.pt"),
            tensor("torch.float32", [1, 6, 6, 2], -1.0, 1.0, data_name="grid.pt"),
            mode=scalar("str", mode),
            padding_mode=scalar("str", "border"),
            align_corners=scalar("bool", True),
            output=[tensor("torch.float32", [1, 1, 6, 6], -3.0, 3.0)],
        ),
        None,
    )


def test_nearest_grid_sample_picks_the_pixels_a_float32_kernel_picks(tmp_path: Path) -> None:
    """An affine grid (a spatial transformer's) puts float32 coordinates exactly on .5, which the
    kernel rounds to even; raised to float64 they are a hair off .5 and round to the other pixel, so a
    faultless device was an error. The nearest mode's bench keeps float32; bilinear's still upcasts."""
    x = torch.randn(1, 1, 6, 6, generator=torch.Generator().manual_seed(0))
    theta = torch.tensor([[[0.9, 0.1, 0.0], [-0.1, 0.9, 0.1]]])
    grid = torch.nn.functional.affine_grid(theta, [1, 1, 6, 6], align_corners=False)
    coords32, coords64 = (grid + 1) / 2 * 5, (grid.double() + 1) / 2 * 5
    assert bool(((coords32 % 1 == 0.5) & (coords64 % 1 != 0.5)).any())  # the ties this test is about
    torch.save(x, tmp_path / "x.pt")
    torch.save(grid, tmp_path / "grid.pt")
    nearest = replay(_grid_sample("nearest"), tmp_path, "cpu")
    assert nearest.result[1] == "pass", nearest.reason
    assert all(r.bench_dtype == "torch.float32" for r in nearest.details)
    bilinear = replay(_grid_sample("bilinear"), tmp_path, "cpu")
    assert bilinear.result[1] == "pass", bilinear.reason
    assert all(r.bench_dtype == "torch.float64" for r in bilinear.details)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nearest_grid_sample_of_low_precision_still_finds_a_device_picking_other_pixels(
    tmp_path: Path, dtype: torch.dtype
) -> None:
    """fp16/bf16 keep their float32 bench in the nearest mode: the CPU's bf16 kernel rounds each
    coordinate to bf16 before it picks (CUDA's computes it in float32), and that bench's noise floor
    excused a device picking pixels 8 to the left as 'within 8 floors'."""
    name = str(dtype)
    x = torch.arange(60.0).reshape(1, 1, 1, 60).to(dtype)
    xs = torch.tensor([-0.69921875, -0.6328125, -0.56640625, -0.498046875, -0.400390625, -0.365234375])
    torch.save(x, tmp_path / "x.pt")
    torch.save(torch.stack([xs, torch.zeros(6)], -1).reshape(1, 1, 6, 2).to(dtype), tmp_path / "grid.pt")
    record = ApiRecord(
        "Functional.grid_sample.0",
        0,
        forward(
            tensor(name, [1, 1, 1, 60], 0.0, 59.0, data_name="x.pt"),
            tensor(name, [1, 1, 6, 2], -0.7, 0.0, data_name="grid.pt"),
            mode=scalar("str", "nearest"),
            padding_mode=scalar("str", "zeros"),
            align_corners=scalar("bool", False),
            output=[tensor(name, [1, 1, 1, 6], 8.0, 19.0)],
        ),
        None,
    )

    def in_float32(func: Any, pixels: int = 0) -> Any:  # a kernel computing coordinates in float32
        def device(inp: torch.Tensor, grd: torch.Tensor, *a: Any, **k: Any) -> torch.Tensor:
            g = grd.float().clone()
            g[..., 0] -= 2 * pixels / inp.shape[-1]
            return func(inp.float(), g, *a, **k).to(inp.dtype)

        return device

    faultless = replay(record, tmp_path, "cpu", device_function=in_float32)
    assert faultless.result[1] == "pass", faultless.reason
    assert all(r.bench_dtype == "torch.float32" for r in faultless.details)
    faulty = replay(record, tmp_path, "cpu", device_function=lambda f: in_float32(f, 8))
    assert faulty.result[1] == "error", faulty.details[0].message
