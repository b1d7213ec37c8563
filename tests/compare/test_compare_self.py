"""The law compare(X, X): a details table compared with itself never gives an ``error`` verdict.

Rows are generated over every standard (one routed API name of each, taken from the routing table),
every dtype the routing distinguishes, and metric cells that are numbers of any size, 0, blank, ``nan``,
``inf``, ``-inf`` or junk text; the same table is both the NPU and the GPU side.
"""

from __future__ import annotations

import pandas as pd
import pytest
from compare_rows import HEADER, detail, pair, row
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.compare.merge import merge
from msprobe.compare.results import VERDICT, result_rows
from msprobe.compare.standards import ROUTING, Standard
from msprobe.compare.table import from_frame
from msprobe.compare.verdicts import ERROR, evaluate
from msprobe.formats import accuracy_csv as ac


def _one_api_per_standard() -> tuple[str, ...]:
    first: dict[Standard, str] = {}
    for bare, standard in ROUTING.items():
        first.setdefault(standard, bare)
    return (*first.values(), "not_a_listed_api")  # the last one routes to the benchmark standard


BARE = _one_api_per_standard()
TYPES = ("Torch", "Tensor", "Functional", "NPU")
DTYPES = (
    "torch.float16", "torch.bfloat16", "torch.float32", "torch.float64", "torch.complex64",
    "torch.int64", "torch.bool", "torch.uint8", "<class 'int'>", " ", "", "nan",
)  # fmt: skip
METRIC_COLUMNS = tuple(HEADER[4:21])

names = st.builds(
    lambda t, api, i, d, k: f"{t}.{api}.{i}.{d}.output.{k}",
    st.sampled_from(TYPES),
    st.sampled_from(BARE),
    st.integers(0, 3),
    st.sampled_from(("forward", "backward")),
    st.integers(0, 2),
)
cell = st.one_of(
    st.sampled_from(["0", "0.0", "1", " ", "", "nan", "NaN", "inf", "-inf", "junk", "1e-300", "0.999"]),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda v: f"{v:.14f}"),
    st.floats(-1e6, 1e6).map(repr),
)


@st.composite
def details_tables(draw: st.DrawFn) -> pd.DataFrame:
    keys = draw(st.lists(names, max_size=16, unique=True))
    rows = []
    for key in keys:
        cells = {c: draw(cell) for c in METRIC_COLUMNS}
        shape = draw(st.sampled_from(["(2, 3)", "(0,)", " ", "[]"]))
        rows.append(row(key, draw(st.sampled_from(DTYPES)), cells, shape=shape, message=draw(cell)))
    return pd.DataFrame(rows, columns=list(HEADER), dtype=object)


@settings(max_examples=300)
@given(table=details_tables())
def test_a_details_table_compared_with_itself_has_no_error(table):
    t = from_frame(table)
    details = evaluate(merge(t, t), t.numeric)
    results = result_rows(details)
    assert not (details["比对结果"] == ERROR).any(), details.loc[
        details["比对结果"] == ERROR, "Message"
    ].tolist()
    assert not (results[VERDICT] == ERROR).any()
    for column in ac.COMPARE_DETAILS_HEADER:
        if column.endswith("判定结果"):
            assert not (details[column] == ERROR).any(), column


F = "forward.output"
RATES = {"inf/nan错误率": "0", "相对误差错误率": "0", "绝对误差错误率": "0"}


@pytest.mark.parametrize(
    ("npu_rate", "gpu_rate", "verdict", "note"),
    [
        ("0.5", "0", "error", False),  # the GPU is exact: the NPU is worse
        ("0.5", "0.4", "error", False),
        ("0.5", "0.5", "pass", True),  # as bad on the GPU
        ("0.5", "0.7", "pass", True),
        ("0.5", " ", "error", False),  # no GPU number: judged on the NPU alone (no SKIP either)
        ("0.5", "nan", "error", False),
        ("nan", "nan", "pass", True),
        ("nan", "0.5", "error", False),
    ],
)
def test_an_npu_only_rate_fails_only_where_the_gpu_is_better(tmp_path, npu_rate, gpu_rate, verdict, note):
    name = f"Tensor.add_.0.{F}.0"
    npu = [row(name, cells={**RATES, "绝对误差错误率": npu_rate}, bench=False)]
    gpu = [row(name, cells={**RATES, "绝对误差错误率": gpu_rate}, bench=False)]
    d = detail(pair(tmp_path, npu, gpu), name)
    assert (d["比对算法"], d["绝对误差判定结果"], d["比对结果"]) == ("绝对阈值法", verdict, verdict)
    assert ("NOTE: 绝对误差错误率 past its bound on the GPU too" in d["Message"]) == note
    assert ("ERROR: 绝对误差错误率超过阈值" in d["Message"]) == (verdict == "error")
    # 8.1.1 judges the NPU value alone
    assert detail(pair(tmp_path, npu, gpu, npu_alone=True), name)["比对结果"] == "error"


@pytest.mark.parametrize(("gpu", "verdict"), [("0.99", "pass"), ("0.98", "pass"), ("0.995", "error")])
def test_thousandth_below_bound_on_both_sides_passes_unless_the_gpu_is_better(tmp_path, gpu, verdict):
    name = f"Functional.conv2d.0.{F}.0"
    a = pair(
        tmp_path,
        [row(name, cells={"双千指标": "0.99"}, bench=False)],
        [row(name, cells={"双千指标": gpu}, bench=False)],
    )
    assert detail(a, name)["比对结果"] == verdict


@pytest.mark.parametrize(
    ("dtype", "npu", "gpu", "verdict"),
    [
        (
            "torch.float32",
            ("100", "0.1"),
            ("100", "0.1"),
            "pass",
        ),  # identical: ratio 1, mean and share as bad
        ("torch.float32", ("100", "0.1"), ("70", "0.1"), "pass"),  # the share is no worse than the GPU's
        ("torch.float32", ("100", "0.2"), ("200", "0.1"), "pass"),  # the mean is no worse than the GPU's
        ("torch.float32", ("100", "0.1"), ("70", "0.06"), "error"),  # GPU better on every escape
        # the GPU passes outright on its share: a mean as bad as the GPU's excuses nothing
        ("torch.float32", ("70", "0.5"), ("70", "0.01"), "error"),
        ("torch.float32", ("70", "0.5"), ("30", "0.5"), "error"),  # the GPU passes on its mean
        ("torch.float16", ("9", "0.01"), ("9", "0.01"), "pass"),
        ("torch.float16", ("9", "0.01"), ("9", "0.005"), "error"),
    ],
)
def test_ulp_escapes_read_the_gpu_too(tmp_path, dtype, npu, gpu, verdict):
    name = f"Functional.linear.0.{F}.0"
    a = pair(
        tmp_path,
        [row(name, dtype, {"ULP误差平均值": npu[0], "ULP误差大于阈值占比": npu[1]}, bench=False)],
        [row(name, dtype, {"ULP误差平均值": gpu[0], "ULP误差大于阈值占比": gpu[1]}, bench=False)],
    )
    d = detail(a, name)
    assert (d["ULP误差判定结果"], d["比对结果"]) == (verdict, verdict)
    # the note names the escape that let the row pass, the one no worse than the GPU's
    share_excuse = verdict == "pass" and float(npu[1]) <= float(gpu[1])
    mean_excuse = verdict == "pass" and not share_excuse
    assert ("NOTE: ULP误差大于阈值占比 past its bound on the GPU too" in d["Message"]) == share_excuse
    assert ("NOTE: ULP误差平均值 past its bound on the GPU too" in d["Message"]) == mean_excuse
