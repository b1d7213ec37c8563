"""Every standard and verdict boundary of 8.1.1's compare.

Expected rows are the verified upstream outcomes of 8.1.1 where they are known, else 8.1.1's rule
text applied by hand (the numbers are chosen so the arithmetic is exact).
"""

from __future__ import annotations

import numpy as np
import pytest
from compare_rows import detail, pair, result_list, row

from msprobe.compare.standards import TOPK_HINT, UNSUPPORTED_MESSAGE, empty_shapes

F, B = "forward.output", "backward.output"
SKIPPED = row("Torch.skipped.0.forward.output.0", " ", message="skipped", bench=False)
"""A row with every metric blank: with it in the file, pandas reads the metric columns as text."""


def test_benchmark_mean_rel_ratio_exactly_2_passes_and_2_01_fails(tmp_path):
    npu = [
        row(f"Torch.sum.0.{F}.0", "torch.bfloat16", {"相对误差平均值": str(2**-7)}),
        row(f"Torch.sum.0.{B}.0", "torch.float16", {"相对误差平均值": "0.00201"}),
    ]
    gpu = [
        row(f"Torch.sum.0.{F}.0", "torch.bfloat16", {"相对误差平均值": str(2**-8)}),
        row(f"Torch.sum.0.{B}.0", "torch.float16", {"相对误差平均值": "0.001"}),
    ]
    a = pair(tmp_path, npu, gpu)
    assert result_list(a) == [["Torch.sum.0", "pass", "error", ""]]
    fwd = detail(a, f"Torch.sum.0.{F}.0")
    assert fwd["相对误差平均值比值"] == "2.00000000000000" and fwd["相对误差平均值判定结果"] == "pass"
    assert fwd["比对算法"] == "标杆比对法" and fwd["Message"] == ""
    bwd = detail(a, f"Torch.sum.0.{B}.0")
    assert bwd["相对误差平均值判定结果"] == "error"
    assert bwd["Message"] == "ERROR: 相对误差平均值比值超过阈值\n"


def test_benchmark_max_rel_bound_is_10(tmp_path):
    k = 2**-10
    npu = [
        row(f"Torch.cumsum.0.{F}.0", cells={"相对误差最大值": str(10 * k)}),
        row(f"Torch.cumsum.0.{B}.0", cells={"相对误差最大值": str(10.01 * k)}),
    ]
    gpu = [
        row(f"Torch.cumsum.0.{F}.0", cells={"相对误差最大值": str(k)}),
        row(f"Torch.cumsum.0.{B}.0", cells={"相对误差最大值": str(k)}),
    ]
    assert result_list(pair(tmp_path, npu, gpu)) == [["Torch.cumsum.0", "pass", "error", ""]]


def test_benchmark_gpu_zero_is_floored_per_dtype(tmp_path):
    # fp32 rmse 0.00013 vs 0 -> 0.00013 / 2**-14 = 2.12992 > 2 (8.1.1's Torch.erf.2 row)
    npu = [row(f"Torch.erf.2.{F}.0", cells={"均方根误差": "0.00013"})]
    gpu = [row(f"Torch.erf.2.{F}.0", cells={"均方根误差": "0"})]
    a = pair(tmp_path, npu, gpu)
    assert result_list(a) == [["Torch.erf.2", "error", " ", ""]]
    assert float(detail(a, f"Torch.erf.2.{F}.0")["均方根误差比值"]) == pytest.approx(2.12992)


@pytest.mark.parametrize(
    ("npu_value", "gpu_value", "verdict", "message"),
    [
        ("inf", "inf", "pass", "相对误差最大值同为同号inf或nan\n"),
        ("nan", "nan", "pass", "相对误差最大值同为同号inf或nan\n"),
        ("inf", "-inf", "error", "相对误差最大值inf或nan不一致\nERROR: 相对误差最大值比值超过阈值\n"),
        ("inf", "0.5", "error", "相对误差最大值inf或nan不一致\nERROR: 相对误差最大值比值超过阈值\n"),
    ],
)
def test_benchmark_inf_nan_rule(tmp_path, npu_value, gpu_value, verdict, message):
    name = f"Torch.log.0.{F}.0"
    a = pair(
        tmp_path,
        [row(name, cells={"相对误差最大值": npu_value})],
        [row(name, cells={"相对误差最大值": gpu_value})],
    )
    d = detail(a, name)
    assert (d["比对结果"], d["Message"], d["相对误差最大值比值"]) == (verdict, message, "nan")


def test_benchmark_error_balance_is_reported_but_not_counted(tmp_path):
    name = f"Torch.tanh.0.{F}.0"
    a = pair(tmp_path, [row(name, cells={"误差均衡性": "0.128"})], [row(name)])
    d = detail(a, name)
    assert (d["误差均衡性比值"], d["误差均衡性判定结果"], d["比对结果"]) == (
        "128.00000000000000",
        "error",
        "pass",
    )
    assert result_list(a) == [["Torch.tanh.0", "pass", " ", ""]]


def test_benchmark_small_value_bound_is_2(tmp_path):
    fwd, bwd = f"Tensor.exp.0.{F}.0", f"Tensor.exp.0.{B}.0"
    npu = [row(fwd, cells={"小值域错误占比": "0.5"}), row(bwd, cells={"小值域错误占比": "0.5000001"})]
    gpu = [row(fwd, cells={"小值域错误占比": "0.25"}), row(bwd, cells={"小值域错误占比": "0.25"})]
    a = pair(tmp_path, npu, gpu)
    assert result_list(a) == [["Tensor.exp.0", "pass", "error", ""]]
    assert detail(a, bwd)["Message"] == "ERROR: 小值域错误比值超过阈值\n"


def test_blank_cell_makes_an_exception_row_named_per_output(tmp_path):
    # 8.1.1: Tensor.mul_.0.forward.output.0,SKIP,SKIP,ERROR: Input data is an empty string
    name = f"Tensor.mul_.0.{F}.0"
    a = pair(tmp_path, [row(name, bench=False)])
    assert result_list(a) == [[name, "SKIP", "SKIP", "ERROR: Input data is an empty string"]]
    d = detail(a, name)
    assert (d["比对结果"], d["比对算法"], d["Message"]) == (
        "SKIP",
        " ",
        "ERROR: Input data is an empty string",
    )


def test_text_cell_cannot_be_converted(tmp_path):
    name = f"Torch.exp.3.{F}.0"
    a = pair(tmp_path, [row(name, cells={"均方根误差": "abc"})])
    assert result_list(a) == [[name, "SKIP", "SKIP", "ERROR: Input data cannot be converted to float"]]


def test_blank_error_balance_on_gpu_side_also_skips(tmp_path):
    name = f"Torch.exp.4.{F}.0"
    a = pair(tmp_path, [row(name)], [row(name, cells={"误差均衡性": " "})])
    assert detail(a, name)["Message"] == "ERROR: Input data is an empty string"


@pytest.mark.parametrize(
    ("dtype", "mean", "p", "q", "verdict"),
    [
        ("torch.float32", "100", "0.1", "0.1", "error"),  # r = 1.0, not < 1
        ("torch.float32", "64", "0.05", "0.05", "error"),  # every escape just missed (r = 1)
        ("torch.float32", "63.99", "0.5", "0.1", "pass"),  # mean < 64
        ("torch.float32", "100", "0.0499", "0.01", "pass"),  # proportion < 0.05
        ("torch.float32", "100", "0.1", "0.2", "pass"),  # ratio 0.5 < 1
        ("torch.bfloat16", "9", "0.003", "0", "pass"),  # r = 0.003 / 2**-8 = 0.768
        ("torch.float16", "9", "0.002", "0", "error"),  # r = 0.002 / 2**-11 = 4.096
        ("torch.float16", "9", "0.000999", "0.0001", "pass"),  # proportion < 0.001
    ],
)
def test_ulp_boundaries(tmp_path, dtype, mean, p, q, verdict):
    name = f"Functional.linear.0.{F}.0"
    a = pair(
        tmp_path,
        [row(name, dtype, {"ULP误差平均值": mean, "ULP误差大于阈值占比": p}, bench=False)],
        [row(name, dtype, {"ULP误差平均值": mean, "ULP误差大于阈值占比": q}, bench=False)],
        npu_alone=True,  # 8.1.1's bounds: (p = q) fails the ratio escape there
    )
    d = detail(a, name)
    assert (d["比对算法"], d["ULP误差判定结果"], d["比对结果"]) == ("ULP误差比对法", verdict, verdict)
    assert d["Message"] == ("ERROR: ULP误差不满足标准\n" if verdict == "error" else "")


def test_ulp_ratio_values_are_written(tmp_path):
    name = f"Torch.bmm.0.{F}.0"
    a = pair(
        tmp_path,
        [row(name, "torch.bfloat16", {"ULP误差平均值": "2", "ULP误差大于阈值占比": "0.003"}, bench=False)],
        [row(name, "torch.bfloat16", {"ULP误差平均值": "2", "ULP误差大于阈值占比": "0"}, bench=False)],
    )
    d = detail(a, name)
    assert (d["ULP误差平均值"], d["ULP误差大于阈值占比"], d["ULP误差大于阈值占比比值"]) == (
        "2.00000000000000",
        "0.00300000000000",
        "0.76800000000000",
    )


def test_ulp_inf_nan_mismatch_errors_with_blank_ulp_verdict(tmp_path):
    name = f"Torch.matmul.0.{F}.0"
    a = pair(
        tmp_path,
        [row(name, cells={"ULP误差平均值": "inf", "ULP误差大于阈值占比": "0"}, bench=False)],
        [row(name, cells={"ULP误差平均值": "1", "ULP误差大于阈值占比": "0"}, bench=False)],
    )
    d = detail(a, name)
    assert (d["比对结果"], d["ULP误差判定结果"]) == ("error", " ")
    assert d["Message"] == "ULP误差平均值inf或nan不一致\nERROR: ULP误差不满足标准\n"
    assert d["_worst"] == "mean ULP error (ULP误差平均值): inf/nan on one side only"


@pytest.mark.parametrize(("value", "verdict"), [("1.0", "pass"), ("0.999", "pass"), ("0.9989", "error")])
def test_thousandth_bound_is_at_least_0_999(tmp_path, value, verdict):
    name = f"Functional.conv2d.0.{F}.0"
    a = pair(tmp_path, [row(name, cells={"双千指标": value}, bench=False), SKIPPED], npu_alone=True)
    d = detail(a, name)
    assert (d["比对算法"], d["双千指标"], d["双千指标判定结果"], d["比对结果"]) == (
        "双千指标法",
        value,
        verdict,
        verdict,
    )
    assert d["Message"] == ("ERROR: 双千指标不达标\n" if verdict == "error" else "")
    assert d["_worst"] == ("thousandth ratio (双千指标) 0.9989 < 0.999" if verdict == "error" else "")


def test_absolute_threshold_rates_must_be_zero_and_messages_concatenate(tmp_path):
    ok, bad = f"Tensor.add_.0.{F}.0", f"Tensor.add_.1.{F}.0"
    rates = {"inf/nan错误率": "0", "相对误差错误率": "0", "绝对误差错误率": "0"}
    a = pair(
        tmp_path,
        [
            row(ok, cells=rates, bench=False),
            row(bad, cells={**rates, "inf/nan错误率": "0.5", "相对误差错误率": "1e-9"}, bench=False),
        ],
        npu_alone=True,
    )
    assert detail(a, ok)["比对结果"] == "pass" and detail(a, ok)["比对算法"] == "绝对阈值法"
    d = detail(a, bad)
    assert (d["inf/nan判定结果"], d["相对误差判定结果"], d["绝对误差判定结果"]) == ("error", "error", "pass")
    assert d["Message"] == "ERROR: inf/nan错误率超过阈值ERROR: 相对误差错误率超过阈值"
    assert d["inf/nan错误率"] == "0.50000000000000"
    assert result_list(a) == [["Tensor.add_.0", "pass", " ", ""], ["Tensor.add_.1", "error", " ", ""]]


def test_absolute_threshold_nan_rate_fails(tmp_path):
    name = f"Torch.mul.0.{F}.0"
    a = pair(
        tmp_path,
        [
            row(
                name,
                cells={"inf/nan错误率": "nan", "相对误差错误率": "0", "绝对误差错误率": "0"},
                bench=False,
            )
        ],
        npu_alone=True,
    )
    assert detail(a, name)["比对结果"] == "error"


def test_accumulative_joins_messages_with_newlines_and_checks_eb_per_dtype(tmp_path):
    name = f"Torch.test_api.0.{F}.0"
    cells = {"inf/nan错误率": "0.1", "相对误差错误率": "0", "绝对误差错误率": "0", "误差均衡性": str(2**-6)}
    a = pair(tmp_path, [row(name, "torch.bfloat16", cells, bench=False)], npu_alone=True)
    d = detail(a, name)
    assert d["比对算法"] == "累积误差比对法"
    assert d["误差均衡性判定结果"] == "error"  # bf16 bound 2**-7
    assert d["Message"] == "ERROR: inf/nan错误率超过阈值\n\nERROR: 误差均衡性超过阈值\n"
    ok = pair(
        tmp_path,
        [row(name, "torch.bfloat16", {**cells, "inf/nan错误率": "0", "误差均衡性": str(2**-7)}, bench=False)],
    )
    assert detail(ok, name)["比对结果"] == "pass"


@pytest.mark.parametrize(
    ("api", "dtype", "rate", "expected_rate", "verdict"),
    [
        ("Torch.argmax.0", "torch.int64", "0.00000000000000", "0.00000000000000", "pass"),
        ("Tensor.gt.0", "torch.bool", "0.125", "0.125", "error"),  # text copied as read
        ("Torch.abs.0", "torch.float32", "0.0", "0.0", "pass"),  # listed binary API, float output
        ("Torch.add.0", "torch.int32", "0.5", "0.5", "error"),  # non-float dtype beats the absolute list
        ("Torch.size.0", "<class 'int'>", "0", "0", "pass"),
    ],
)
def test_binary(tmp_path, api, dtype, rate, expected_rate, verdict):
    name = f"{api}.{F}.0"
    a = pair(tmp_path, [row(name, dtype, {"二进制一致错误率": rate}, bench=False), SKIPPED], npu_alone=True)
    d = detail(a, name)
    assert (d["比对算法"], d["二进制一致错误率"], d["比对结果"]) == ("二进制一致法", expected_rate, verdict)
    assert d["Message"] == ("ERROR: 二进制一致错误率超过阈值\n" if verdict == "error" else "")


def test_copied_value_is_reprinted_when_pandas_reads_the_column_as_numbers(tmp_path):
    # 8.1.1: "a float column is re-printed %.14f" - here every cell of the column is a number
    name = f"Torch.argmax.1.{F}.0"
    a = pair(tmp_path, [row(name, "torch.int64", {"二进制一致错误率": "0"}, bench=False)])
    assert detail(a, name)["二进制一致错误率"] == "0.00000000000000"


def test_topk_hint_on_forward_error(tmp_path):
    npu = [
        row(f"Torch.topk.0.{F}.0", bench=False, cells={"二进制一致错误率": "0"}),
        row(f"Torch.topk.0.{F}.1", "torch.int64", {"二进制一致错误率": "0.2"}, bench=False),
        row(f"Torch.topk.0.{B}.0", bench=False, cells={"二进制一致错误率": "0"}),
    ]
    assert result_list(pair(tmp_path, npu, npu_alone=True)) == [["Torch.topk.0", "error", "pass", TOPK_HINT]]


def test_skip_rows_and_forward_skip_message(tmp_path):
    npu = [
        row(f"Torch.unique.0.{F}.0", " ", message="first skip message", bench=False),
        row(f"Torch.unique.0.{F}.1", " ", message="second skip message", bench=False),
        row(f"Torch.unique.0.{B}.0"),
        row(
            f"Distributed.all_reduce.0.{F}.0",
            " ",
            message="API Distributed.all_reduce.0 not support for run ut. SKIP.",
            bench=False,
        ),
        row(
            f"Torch.zeros.0.{F}.0",
            shape="(0,)",
            message="There is not bench calculation result.",
            bench=False,
        ),
    ]
    a = pair(tmp_path, npu)
    assert result_list(a) == [
        ["Torch.unique.0", "SKIP", "pass", "second skip message"],
        [
            "Distributed.all_reduce.0",
            "SKIP",
            " ",
            "API Distributed.all_reduce.0 not support for run ut. SKIP.",
        ],
        ["Torch.zeros.0", "SKIP", " ", "There is not bench calculation result."],
    ]
    d = detail(a, f"Torch.unique.0.{F}.0")
    assert (d["比对结果"], d["比对算法"], d["Message"]) == ("SKIP", " ", "first skip message")


def test_empty_skip_message_is_written_nan(tmp_path):
    name = f"Torch.max.0.{B}.0"
    a = pair(tmp_path, [row(name, " ", message="", bench=False)])
    assert detail(a, name)["Message"] == "nan"


def test_last_row_float64_makes_the_api_skip(tmp_path):
    npu = [row(f"Torch.max.3.{F}.0", "torch.float16"), row(f"Torch.max.3.{F}.1", "torch.float64")]
    a = pair(tmp_path, npu)
    assert result_list(a) == [["Torch.max.3", "SKIP", "SKIP", UNSUPPORTED_MESSAGE]]
    assert detail(a, f"Torch.max.3.{F}.1")["比对结果"] == "SKIP"


def test_float64_rows_are_not_counted_when_not_last(tmp_path):
    npu = [
        row(f"Torch.max.4.{F}.0", "torch.float64", {"均方根误差": "1"}),
        row(f"Torch.max.4.{F}.1", "torch.float16"),
    ]
    assert result_list(pair(tmp_path, npu)) == [["Torch.max.4", "pass", " ", ""]]


@pytest.mark.parametrize("shape", ["(0, 4)", "(2, 4, 16, 0)", "(2, 0, 3)"])
def test_every_empty_output_is_skipped_and_its_api_judged_by_the_rest(tmp_path, shape):
    """Phi3's ``cat`` of a rotary part with an empty pass-through part: the empty output has blank
    metrics; 8.1.1 knows only ``(0,)`` as empty and turns the others into exception rows named by
    the output ("ERROR: Input data is an empty string") instead of judging the API."""
    empty = f"Torch.cat.0.{B}.1"
    npu = [
        row(f"Torch.cat.0.{F}.0"),
        row(f"Torch.cat.0.{B}.0"),
        row(empty, shape=shape, message="empty", bench=False),
    ]
    a = pair(tmp_path, npu)
    assert result_list(a) == [["Torch.cat.0", "pass", "pass", ""]]
    assert (detail(a, empty)["比对结果"], detail(a, empty)["Message"]) == ("SKIP", "empty")
    for not_empty in ("(10, 4)", "(4, 10)", "(2, 40)"):
        assert not empty_shapes(np.array([not_empty, " ", np.nan], dtype=object)).any()


def test_empty_dtype_cell_is_upstreams_isspace_error(tmp_path):
    name = f"Torch.odd.0.{F}.0"
    a = pair(tmp_path, [row(name, "")])
    assert result_list(a) == [[name, "SKIP", "SKIP", "'float' object has no attribute 'isspace'"]]


def test_seven_segment_names_use_prefix_api_as_bare_name(tmp_path):
    # Torch.linalg.vector_norm: bare name "linalg.vector_norm" is in no list -> benchmark
    name = f"Torch.linalg.vector_norm.0.{F}.0"
    a = pair(tmp_path, [row(name)])
    assert detail(a, name)["比对算法"] == "标杆比对法"
    assert result_list(a) == [["Torch.linalg.vector_norm.0", "pass", " ", ""]]


def test_invalid_names_come_first_then_the_open_api(tmp_path):
    # 8.1.1: immediate rows appear before the result row of an API still open
    npu = [
        row(f"Functional.silu.0.{F}.0"),
        row("Tensor.bad_name.forward.output.0"),
        row(f"Functional.silu.0.{B}.0"),
        row("nodots"),
        row(f"Torch.exp.0.{F}.0"),
    ]
    a = pair(tmp_path, npu)
    assert result_list(a) == [
        [
            "Tensor.bad_name.forward.output.0",
            "SKIP",
            "SKIP",
            "The API name Tensor.bad_name.forward.output.0 is invalid.",
        ],
        ["nodots", "SKIP", "SKIP", "The API name nodots is invalid."],
        ["Functional.silu.0", "pass", "pass", ""],
        ["Torch.exp.0", "pass", " ", ""],
    ]
    assert a.details["API Name"].tolist() == [r[0] for r in npu]
    d = detail(a, "nodots")
    assert (d["比对结果"], d["Message"], d["比对算法"]) == ("SKIP", "The API name nodots is invalid.", " ")


def test_an_api_skipped_on_one_side_only_is_a_skip_with_its_reason_not_a_shape_mismatch(tmp_path):
    """The NPU replay raised (one SKIP row: blank dtype and shape, the reason in Message); the GPU
    evaluated the API. A blank Shape is no shape that differs: 8.1.1's blank-NPU-dtype SKIP, and the
    other way round its blank-GPU-metrics SKIP; neither makes the files look like different runs."""
    name = f"Torch.exp.0.{F}.0"
    skipped = row(name, " ", shape=" ", message="NPU kernel raised: out of memory", bench=False)
    evaluated = row(name, cells={"双千指标": "1"})
    a = pair(tmp_path, [skipped], [evaluated])
    assert result_list(a) == [["Torch.exp.0", "SKIP", " ", "NPU kernel raised: out of memory"]]
    assert (detail(a, name)["比对结果"], detail(a, name)["Message"]) == (
        "SKIP",
        "NPU kernel raised: out of memory",
    )
    assert a.warning() == ""
    b = pair(tmp_path, [evaluated], [skipped])
    assert result_list(b) == [[name, "SKIP", "SKIP", "ERROR: Input data is an empty string"]]  # 8.1.1's row
    assert b.warning() == ""


@pytest.mark.parametrize(
    ("name", "cells"),
    [
        (f"Tensor.transpose.0.{F}.0", {"二进制一致错误率": "0.001"}),  # binary
        (f"Tensor.__add__.0.{F}.0", {"inf/nan错误率": "1", "相对误差错误率": "0", "绝对误差错误率": "0"}),
    ],
)
def test_npu_only_nan_ranks_infinitely_far_whatever_the_standard(tmp_path, name, cells):
    # a NaN in the NPU output alone (the replay's cosine NaN, a number on the GPU) is an inf/nan mismatch:
    # ranked above any finite loss and named, under the binary and absolute-threshold standards too
    zero = {k: "0" for k in cells}
    npu = [row(name, cells={**cells, "余弦相似度": "nan"}, bench=False)]
    gpu = [row(name, cells={**zero, "余弦相似度": "1.0"}, bench=False)]
    d = detail(pair(tmp_path, npu, gpu), name)
    assert d["比对结果"] == "error"
    assert d["_severity"] == np.inf
    assert d["_worst"] == "NPU cosine similarity (余弦相似度): inf/nan on one side only"
    # the same NaN on both sides changes nothing (compare(X, X) stays clean)
    same = detail(pair(tmp_path, npu, npu), name)
    assert same["比对结果"] == "pass"


def test_a_ulp_proportion_of_1_leaves_the_severity_to_the_other_escapes(tmp_path):
    """Every element past the ULP bound (proportion 1) is the proportion's ceiling, 20x its fp32 bound
    whatever the error: a float32 ``linear`` a million ULP off would rank below a milder failure of
    another standard. The nearest of the other escapes measures it (here the ratio, 1 / 0.001)."""
    name = f"Functional.linear.0.{F}.0"
    npu = [row(name, cells={"ULP误差平均值": "1000000", "ULP误差大于阈值占比": "1"}, bench=False)]
    gpu = [row(name, cells={"ULP误差平均值": "1", "ULP误差大于阈值占比": "0.001"}, bench=False)]
    d = detail(pair(tmp_path, npu, gpu), name)
    assert d["比对结果"] == "error"
    assert d["_severity"] == pytest.approx(1000.0)
    assert d["_worst"].startswith("ULP proportion ratio")
    # below the ceiling the proportion still counts: 0.5 is 10x its bound, nearer than the ratio
    npu = [row(name, cells={"ULP误差平均值": "1000000", "ULP误差大于阈值占比": "0.5"}, bench=False)]
    d = detail(pair(tmp_path, npu, gpu), name)
    assert d["_severity"] == pytest.approx(10.0)


def test_an_inf_or_nan_on_the_gpu_only_is_not_counted_against_the_npu(tmp_path):
    """The GPU overflowed where the NPU did not (the replay's cosine NaN on the GPU, a number on the
    NPU). The benchmark metrics leave the GPU's inf out, so its ratios compare different elements: the
    row is a SKIP saying why. Under ULP the NPU is judged by its own escapes (here it passes)."""
    name = f"Torch.exp.0.{F}.0"
    npu = [row(name, "torch.float16", {"均方根误差": "0.1", "余弦相似度": "1.0"})]
    gpu = [row(name, "torch.float16", {"均方根误差": "0.0001", "余弦相似度": "nan"})]
    d = detail(pair(tmp_path, npu, gpu), name)
    assert d["比对结果"] == "SKIP" and "inf/nan on the GPU only" in d["Message"]
    assert d["_worst"] == "" and np.isnan(d["_severity"])
    assert detail(pair(tmp_path, npu, gpu, npu_alone=True), name)["比对结果"] == "error"  # 8.1.1's
    assert result_list(pair(tmp_path, npu, gpu))[0][3].startswith("NOTE: inf/nan on the GPU only")
    # an NPU row its own replay calls an error (wrong against the bench) is judged by the ratios
    bad = [row(name, "torch.float16", {"均方根误差": "0.1", "余弦相似度": "0.3", "Status": "error"})]
    assert detail(pair(tmp_path, bad, gpu), name)["比对结果"] == "error"
    name = f"Functional.linear.0.{F}.0"
    npu = [row(name, cells={"ULP误差平均值": "0.5", "ULP误差大于阈值占比": "0"}, bench=False)]
    gpu = [row(name, cells={"ULP误差平均值": "inf", "ULP误差大于阈值占比": "0.2"}, bench=False)]
    d = detail(pair(tmp_path, npu, gpu), name)
    assert (d["比对结果"], d["ULP误差判定结果"]) == ("pass", "pass")
    assert "ULP误差平均值 inf/nan on the GPU only" in d["Message"]
    # the NPU's own escapes still fail it where it is far off
    npu = [row(name, cells={"ULP误差平均值": "500", "ULP误差大于阈值占比": "0.9"}, bench=False)]
    assert detail(pair(tmp_path, npu, gpu), name)["比对结果"] == "error"
    # an inf/nan on the NPU only stays an error
    assert detail(pair(tmp_path, gpu, npu), name)["比对结果"] == "error"


def test_a_benchmark_metric_inf_on_the_gpu_only_is_not_counted_against_the_npu(tmp_path):
    """The GPU row's RMSE overflowed (its replay squares float32 errors: 8.1.1's nan_to_num bench put
    float32's max where a bf16 device put bf16's, an error of 1.3e36) while its cosine is a number; the
    NPU's RMSE is 0. 8.1.1 calls the NPU row an inf/nan mismatch (error, heading the report as
    infinitely far); the NPU is no worse, so the row passes with a note. An inf on the NPU only stays
    an error, and 8.1.1's verdict is kept under npu_alone."""
    name = f"Torch.nan_to_num.1.{F}.0"
    npu = [row(name, "torch.bfloat16", {"均方根误差": "0", "余弦相似度": "1.0"})]
    gpu = [row(name, "torch.bfloat16", {"均方根误差": "inf", "余弦相似度": "1.0"})]
    d = detail(pair(tmp_path, npu, gpu), name)
    assert (d["比对结果"], d["均方根误差判定结果"]) == ("pass", "pass")
    assert "均方根误差 inf/nan on the GPU only" in d["Message"]
    assert np.isnan(d["_severity"])
    assert result_list(pair(tmp_path, npu, gpu))[0][1] == "pass"
    assert detail(pair(tmp_path, gpu, npu), name)["比对结果"] == "error"
    assert detail(pair(tmp_path, npu, gpu, npu_alone=True), name)["比对结果"] == "error"  # 8.1.1's


RATES = {"inf/nan错误率": "0", "相对误差错误率": "{v}", "绝对误差错误率": "0"}
BENCH_COLUMNS = {"小值域错误占比": "0.001", "均方根误差": "{v}", "相对误差最大值": "0.001", "误差均衡性": "0"}
ULP_COLUMNS = {"ULP误差平均值": "{v}", "ULP误差大于阈值占比": "{v}"}


@pytest.mark.parametrize(
    "api, scored, routed, cells",
    [
        # a project's own op a conftest routed to the absolute threshold (the table: benchmark)
        ("NPU.my_op", "绝对阈值法", "标杆比对法", RATES),
        # a listed API a conftest routed to the benchmark standard (the table: absolute threshold)
        ("Tensor.add_", "标杆比对法", "绝对阈值法", {**BENCH_COLUMNS, "相对误差平均值": "0.0001"}),
        ("Functional.my_ulp_op", "ULP误差比对法", "标杆比对法", ULP_COLUMNS),
    ],
)
def test_rows_both_replays_scored_by_another_standard_are_judged_by_it(tmp_path, api, scored, routed, cells):
    """A ``pytest_msprobe_api_info`` answer routing an API to another standard made the replay fill that
    standard's columns; compare routed by its table, found blanks and made every row a silent SKIP
    (an NPU op failing its rates passed ``--strict``)."""
    name = f"{api}.0.{F}.0"

    # an API scored by the standard the table routes it to: the files are 8.1.1's routing, not 26.x's
    linear = row(f"Functional.linear.0.{F}.0", cells={k: "0" for k in ULP_COLUMNS}, bench=False)

    def side(value: str) -> list[list[str]]:
        scored_row = row(name, "torch.float16", {k: v.format(v=value) for k, v in cells.items()}, bench=False)
        return [scored_row, linear]

    a = pair(tmp_path, side("0.5"), side("0"))
    d = detail(a, name)
    assert (d["比对结果"], d["比对算法"]) == ("error", scored)
    note = (
        f"judged by {scored}, the standard both replays scored it by (compare's table routes it to {routed})"
    )
    assert d["Message"].endswith(f"NOTE: {note}\n")
    # a rerouting is no dtype/shape difference: not counted nor listed as one (CompareOutcome.flagged)
    assert d["_flag"] == ""
    assert detail(pair(tmp_path, side("0"), side("0")), name)["比对结果"] == "pass"
    # 8.1.1's own verdicts keep its routing: blank columns, SKIP
    assert detail(pair(tmp_path, side("0.5"), side("0"), npu_alone=True), name)["比对结果"] == "SKIP"
    # the two replays scored it differently: nothing to judge it by on both sides, the table's routing
    other = [row(name, "torch.float16", {"二进制一致错误率": "0"}, bench=False), linear]
    assert detail(pair(tmp_path, side("0.5"), other), name)["比对结果"] == "SKIP"
