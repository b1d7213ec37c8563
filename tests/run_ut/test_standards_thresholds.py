"""The routing table and the thresholds table."""

from __future__ import annotations

import pytest

from msprobe.run_ut.standards import Standard, bare_name, compare_outputs, standard_for
from msprobe.run_ut.standards.routing import ROUTING
from msprobe.run_ut.standards.thresholds import (
    BF16,
    FP16,
    FP32,
    AbsoluteThreshold,
    Accumulative,
    Benchmark,
    Thousandth,
    Ulp,
    legacy,
    thresholds,
)


@pytest.mark.parametrize(
    ("api", "standard"),
    [
        # 8.1.1's table and notes
        ("Tensor.mul.0", Standard.ABSOLUTE_THRESHOLD),
        ("Tensor.__add__.3", Standard.ABSOLUTE_THRESHOLD),
        ("Torch.div.0", Standard.ABSOLUTE_THRESHOLD),
        ("Torch.rsub.0", Standard.ABSOLUTE_THRESHOLD),
        ("Tensor.__sub__.0", Standard.ABSOLUTE_THRESHOLD),
        ("Tensor.__truediv__.0", Standard.BENCHMARK),  # not listed
        ("Tensor.__rsub__.0", Standard.BENCHMARK),  # not listed
        ("Torch.abs.1", Standard.BINARY),
        ("Tensor.transpose.0", Standard.BINARY),
        ("Tensor.masked_fill.2", Standard.BINARY),
        ("Torch.topk.0", Standard.BINARY),
        ("Functional.relu.0", Standard.BINARY),
        ("Torch.matmul.0", Standard.ULP),
        ("Functional.linear.0", Standard.ULP),
        ("Tensor.__matmul__.0", Standard.ULP),
        ("Functional.conv2d.1", Standard.THOUSANDTH),
        ("Functional.conv1d.0", Standard.THOUSANDTH),
        ("Torch.test_api.0", Standard.ACCUMULATIVE),
        ("Functional.softmax.0", Standard.BENCHMARK),
        ("NPU.npu_rms_norm.0", Standard.BENCHMARK),
        ("Torch.linalg.vector_norm.0", Standard.BENCHMARK),  # 4 segments: "linalg.vector_norm"
        ("Functional.linear.0.forward.output.0", Standard.ULP),  # per-output names work too
        ("matmul", Standard.ULP),  # bare names too
    ],
)
def test_routing(api: str, standard: Standard) -> None:
    assert standard_for(api) is standard


@pytest.mark.parametrize("api", ["Functional.linear.0", "Torch.abs.0", "Tensor.add.0", "Functional.conv2d.0"])
def test_routing_26x_sends_every_float_output_to_benchmark(api: str) -> None:
    """26.x's current routing rule (the documented option)."""
    assert standard_for(api, "26.x") is Standard.BENCHMARK
    assert standard_for(api, "8.1.1") is standard_for(api) is not Standard.BENCHMARK


def test_unknown_routing_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown routing '9\.9'"):
        standard_for("Functional.linear.0", "9.9")
    with pytest.raises(ValueError, match="unknown routing"):
        compare_outputs("Functional.linear.0", "forward", None, None, routing="9.9")


def test_routing_table_sizes_and_first_match() -> None:
    counts = {s: sum(1 for v in ROUTING.values() if v is s) for s in Standard}
    assert counts == {
        Standard.ABSOLUTE_THRESHOLD: 30,
        Standard.BINARY: 62,
        Standard.ULP: 17,
        Standard.THOUSANDTH: 2,
        Standard.ACCUMULATIVE: 1,
        Standard.BENCHMARK: 0,
    }


@pytest.mark.parametrize(
    ("name", "bare"),
    [
        ("Functional.linear.0", "linear"),
        ("Torch.linalg.inv.0", "linalg.inv"),
        ("Tensor.__add__.12", "__add__"),
        ("Tensor.add_.0.backward.output.3", "add_"),
        ("linear", "linear"),
    ],
)
def test_bare_name(name: str, bare: str) -> None:
    assert bare_name(name) == bare


def test_benchmark_thresholds() -> None:
    """Small value / atol / min-error floor; 8.1.1's ratio limits 2 / 2 / 10 / 2, EB 2."""
    assert thresholds(Standard.BENCHMARK, FP16) == Benchmark(2.0**-10, 1e-16, 2.0**-11, 2, 2, 10, 2, 2)
    assert thresholds(Standard.BENCHMARK, BF16) == Benchmark(2.0**-10, 1e-16, 2.0**-8, 2, 2, 10, 2, 2)
    assert thresholds(Standard.BENCHMARK, FP32) == Benchmark(2.0**-20, 2.0**-30, 2.0**-14, 2, 2, 10, 2, 2)
    assert thresholds(Standard.BENCHMARK, "torch.float64") == thresholds(Standard.BENCHMARK, FP32)


def test_absolute_and_accumulative_thresholds() -> None:
    assert thresholds(Standard.ABSOLUTE_THRESHOLD, FP16) == AbsoluteThreshold(2.0**-10, 2.0**-16, 2.0**-10)
    assert thresholds(Standard.ABSOLUTE_THRESHOLD, BF16) == AbsoluteThreshold(2.0**-10, 1e-16, 2.0**-8)
    assert thresholds(Standard.ABSOLUTE_THRESHOLD, FP32) == AbsoluteThreshold(2.0**-20, 2.0**-30, 2.0**-20)
    assert thresholds(Standard.ACCUMULATIVE, FP16) == Accumulative(2.0**-8, 2.0**-20, 1.0)
    assert thresholds(Standard.ACCUMULATIVE, BF16) == Accumulative(2.0**-7, 2.0**-7, 1.0)
    assert thresholds(Standard.ACCUMULATIVE, FP32) == Accumulative(2.0**-11, 2.0**-14, 1.0)


def test_ulp_and_thousandth_thresholds() -> None:
    """ULP: fp32 mean 64, proportion 0.05; fp16/bf16 proportion 0.001; ratio 1."""
    fp16, bf16, fp32 = (thresholds(Standard.ULP, d) for d in (FP16, BF16, FP32))
    assert (fp16.mantissa_bits, fp16.min_exp, fp16.element_threshold) == (10, -14, 1.0)
    assert (bf16.mantissa_bits, bf16.min_exp, bf16.element_threshold) == (7, -126, 1.0)
    assert (fp32.mantissa_bits, fp32.min_exp, fp32.element_threshold) == (23, -126, 32.0)
    assert (fp16.proportion_limit, fp16.mean_limit, fp32.proportion_limit, fp32.mean_limit) == (
        0.001,
        None,
        0.05,
        64,
    )
    assert isinstance(fp32, Ulp) and fp32.ratio_limit == 1.0
    assert thresholds(Standard.THOUSANDTH, FP16) == Thousandth(0.001, 0.999)


def test_legacy_chain_thresholds() -> None:
    """Ratio chain: fp16/bf16 双百 then 双千; fp32/fp64 双千 then 双万; others none (pass)."""
    assert (legacy(FP16).error_t, legacy(FP16).warning_t) == (0.01, 0.001)  # type: ignore[union-attr]
    assert (legacy(BF16).error_t, legacy(BF16).warning_t) == (0.01, 0.001)  # type: ignore[union-attr]
    assert (legacy(FP32).error_t, legacy(FP32).warning_t) == (0.001, 0.0001)  # type: ignore[union-attr]
    assert legacy("torch.float64") == legacy(FP32)
    assert legacy("torch.complex64") is None


def test_unknown_standard_key() -> None:
    with pytest.raises(KeyError):
        thresholds("nonsense", FP32)
