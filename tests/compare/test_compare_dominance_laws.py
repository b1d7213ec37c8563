"""More laws of the compare's verdicts (beside test_compare_laws and test_compare_self):
dominance (an NPU no worse than the GPU on every metric passes), monotonicity (a better NPU or a
worse GPU never turns a pass into an error), swapping the sides, and the result-row merge against a
plain re-statement of docs/compare.md's rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from compare_rows import HEADER, row
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from msprobe.compare.merge import BOTH, GPU_ONLY, NPU_ONLY, merge
from msprobe.compare.results import result_rows
from msprobe.compare.standards import ROUTING, UNSUPPORTED_DTYPES, Standard
from msprobe.compare.table import from_frame
from msprobe.compare.verdicts import ERROR, PASS, evaluate
from msprobe.formats.accuracy_csv import format_cell
from msprobe.run_ut.standards import compare_outputs


def _one_api_per_standard() -> dict[Standard, str]:
    first: dict[Standard, str] = {}
    for bare, standard in ROUTING.items():
        first.setdefault(standard, bare)
    first[Standard.BENCHMARK] = "not_a_listed_api"
    return first


API = _one_api_per_standard()
FLOAT = ("torch.float16", "torch.bfloat16", "torch.float32")
# "higher is worse" metric columns; 双千指标 is "higher is better"
WORSE_UP = (
    "小值域错误占比", "均方根误差", "相对误差最大值", "相对误差平均值", "误差均衡性",
    "二进制一致错误率", "inf/nan错误率", "相对误差错误率", "绝对误差错误率",
    "ULP误差平均值", "ULP误差大于阈值占比",
)  # fmt: skip
BETTER_UP = ("双千指标",)

value = st.one_of(
    st.sampled_from([0.0, 1e-9, 2.0**-14, 2.0**-11, 2.0**-8, 0.0005, 0.001, 0.002, 0.04, 0.05, 0.06,
                     0.5, 0.998, 0.999, 1.0, 2.0, 10.0, 63.0, 64.0, 65.0, 1000.0]),
    st.floats(0, 1e4, allow_nan=False, allow_infinity=False),
)  # fmt: skip
unit = st.one_of(st.sampled_from([0.0, 0.5, 0.998, 0.999, 0.9995, 1.0]), st.floats(0, 1))


def _txt(v: float) -> str:
    return f"{v:.14f}"


@st.composite
def metrics(draw: st.DrawFn) -> dict[str, float]:
    out = {col: draw(value) for col in WORSE_UP}
    out.update({col: draw(unit) for col in BETTER_UP})
    return out


def _row(name: str, dtype: str, vals: dict[str, float], cos: str = "0.99999000000000") -> list[str]:
    cells = {k: _txt(v) for k, v in vals.items()}
    cells["余弦相似度"] = cos
    return row(name, dtype, cells)


def _verdicts(npu_rows: list[list[str]], gpu_rows: list[list[str]]) -> pd.DataFrame:
    n = from_frame(pd.DataFrame(npu_rows, columns=list(HEADER), dtype=object))
    g = from_frame(pd.DataFrame(gpu_rows, columns=list(HEADER), dtype=object))
    return evaluate(merge(n, g), n.numeric)


def _better(draw: st.DrawFn, vals: dict[str, float], worse: bool) -> dict[str, float]:
    """Each metric moved (or not) in one direction: worse (GPU) or better (NPU)."""
    out = {}
    for col, v in vals.items():
        f = draw(st.sampled_from([1.0, 1.0, 1.5, 2.0, 10.0]))
        up = (col in WORSE_UP) == worse
        if col in BETTER_UP:
            out[col] = min(1.0, v + (1 - v) * (1 - 1 / f)) if up else v / f
        else:
            out[col] = v * f if up else v / f
    return out


STANDARDS = pytest.mark.parametrize("standard", list(API), ids=[s.name for s in API])


@STANDARDS
@given(data=st.data(), dtype=st.sampled_from(FLOAT))
def test_an_npu_no_worse_than_the_gpu_on_every_metric_passes(standard, dtype, data) -> None:
    gpu = data.draw(metrics(), label="gpu")
    npu = _better(data.draw, gpu, worse=False)
    name = f"Torch.{API[standard]}.0.forward.output.0"
    d = _verdicts([_row(name, dtype, npu)], [_row(name, dtype, gpu)])
    assert d["比对结果"].iloc[0] == PASS, (d["比对算法"].iloc[0], d["Message"].iloc[0])


@STANDARDS
@given(data=st.data(), dtype=st.sampled_from(FLOAT))
def test_a_better_npu_or_a_worse_gpu_never_turns_a_pass_into_an_error(standard, dtype, data) -> None:
    npu, gpu = data.draw(metrics(), label="npu"), data.draw(metrics(), label="gpu")
    npu2, gpu2 = _better(data.draw, npu, worse=False), _better(data.draw, gpu, worse=True)
    name = f"Torch.{API[standard]}.0.forward.output.0"
    before = _verdicts([_row(name, dtype, npu)], [_row(name, dtype, gpu)])["比对结果"].iloc[0]
    after = _verdicts([_row(name, dtype, npu2)], [_row(name, dtype, gpu2)])
    if before == PASS:
        assert after["比对结果"].iloc[0] == PASS, (npu2, gpu2, after["Message"].iloc[0])


@STANDARDS
@given(data=st.data(), dtype=st.sampled_from(FLOAT))
def test_swapping_the_sides_fails_at_most_one_way_for_one_metric(standard, dtype, data) -> None:
    """Two rows that differ in a single metric: at most one of compare(A, B), compare(B, A) fails."""
    a = data.draw(metrics(), label="a")
    col = data.draw(st.sampled_from(WORSE_UP + BETTER_UP), label="column")
    b = dict(a)
    b[col] = data.draw(unit if col in BETTER_UP else value, label="b value")
    name = f"Torch.{API[standard]}.0.forward.output.0"
    ab = _verdicts([_row(name, dtype, a)], [_row(name, dtype, b)])["比对结果"].iloc[0]
    ba = _verdicts([_row(name, dtype, b)], [_row(name, dtype, a)])["比对结果"].iloc[0]
    assert not (ab == ERROR and ba == ERROR), (col, a[col], b[col])


# --- swapping whole files; the result merge against docs/compare.md ----------------------------------

APIS = ("Torch.matmul", "Tensor.add_", "Functional.conv2d", "Torch.abs", "Functional.softmax", "Torch.topk")
ROW_DTYPES = ("torch.float16", "torch.float32", "torch.int64", "torch.float64", " ")
names = st.builds(
    lambda api, i, d, k: f"{api}.{i}.{d}.output.{k}",
    st.sampled_from(APIS), st.integers(0, 2), st.sampled_from(("forward", "backward")), st.integers(0, 1),
)  # fmt: skip
cell = st.one_of(st.sampled_from(["0", "0.5", "inf", "nan", " ", "1e-9", "3"]), value.map(_txt))


@st.composite
def tables(draw: st.DrawFn) -> pd.DataFrame:
    keys = draw(st.lists(names, max_size=12, unique=True))
    rows = []
    for key in keys:
        cells = {c: draw(cell) for c in (*WORSE_UP, *BETTER_UP)}
        rows.append(row(key, draw(st.sampled_from(ROW_DTYPES)), cells, message=f"m {key}"))
    return pd.DataFrame(rows, columns=list(HEADER), dtype=object)


@given(a=tables(), b=tables())
def test_swapping_the_files_keeps_every_name_and_mirrors_presence(a, b) -> None:
    ta, tb = from_frame(a), from_frame(b)
    ab, ba = evaluate(merge(ta, tb), ta.numeric), evaluate(merge(tb, ta), tb.numeric)
    assert sorted(ab["API Name"]) == sorted(ba["API Name"])
    mirror = {BOTH: BOTH, NPU_ONLY: GPU_ONLY, GPU_ONLY: NPU_ONLY}
    pa = dict(zip(ab["API Name"], ab["_presence"]))
    pb = dict(zip(ba["API Name"], ba["_presence"]))
    assert {k: mirror[v] for k, v in pa.items()} == pb


def _spec_results(details: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """docs/compare.md "Result row per API", restated with plain loops over the rows in order."""
    out: dict[str, tuple[str, str]] = {}
    groups: dict[str, list[pd.Series]] = {}
    for _, r in details.iterrows():
        if r["_kind"] in ("invalid", "exception"):
            continue
        groups.setdefault(r["_full"], []).append(r)
    for full, rs in groups.items():
        judged = [r for r in rs if r["_kind"] == "evaluated"]
        one_sided = any(r["比对结果"] in ("missing", "mismatch") for r in rs)
        if judged and judged[-1]["_dtype"] in UNSUPPORTED_DTYPES and not one_sided:
            out[full] = ("SKIP", "SKIP")
            continue
        cells = []
        for direction in ("forward", "backward"):
            st_ = [
                r["比对结果"]
                for r in rs
                if r["_direction"] == direction
                and not (r["_kind"] == "evaluated" and r["_dtype"] in UNSUPPORTED_DTYPES)
            ]
            if not st_:
                cells.append(" ")
            elif all(s == "SKIP" for s in st_):
                cells.append("SKIP")
            elif "error" in st_:
                cells.append("error")
            elif "mismatch" in st_:
                cells.append("mismatch")
            elif "missing" in st_:
                cells.append("missing")
            else:
                cells.append("pass")
        out[full] = (cells[0], cells[1])
    return out


@given(a=tables(), b=tables())
def test_result_rows_follow_the_documented_merge(a, b) -> None:
    ta, tb = from_frame(a), from_frame(b)
    details = evaluate(merge(ta, tb), ta.numeric)
    res = result_rows(details)
    grouped = res[~res["API Name"].isin(details.loc[details["_kind"].isin(["invalid", "exception"]),
                                                    "API Name"])]  # fmt: skip
    got = {
        r["API Name"]: (r["Forward Test Success"], r["Backward Test Success"]) for _, r in grouped.iterrows()
    }
    assert got == _spec_results(details)


def test_the_last_row_dtype_rule_depends_on_row_order() -> None:
    """8.1.1's "last judged row float64 -> the API is SKIP" rule (kept on purpose) reads the rows in
    file order, so it is the one thing a shuffle of one API's rows can change."""
    fwd = row("Torch.sum.0.forward.output.0", "torch.float32")
    bwd = row("Torch.sum.0.backward.output.0", "torch.float64")
    got = []
    for order in ([fwd, bwd], [bwd, fwd]):
        t = from_frame(pd.DataFrame(order, columns=list(HEADER), dtype=object))
        res = result_rows(evaluate(merge(t, t), t.numeric))
        got.append(tuple(res[["Forward Test Success", "Backward Test Success"]].iloc[0]))
    assert got == [("SKIP", "SKIP"), ("pass", " ")]


# --- end to end: replay rows of two devices -> compare --------------------------------------------------

E2E_APIS = ("Functional.softmax.0", "Tensor.__add__.0", "Functional.relu.0", "Functional.linear.0",
            "Functional.conv2d.0", "Torch.test_api.0")  # fmt: skip
E2E_DTYPES = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}


def _details(api: str, bench: torch.Tensor, device: torch.Tensor) -> list[str]:
    r = compare_outputs(api, "forward", bench, device)[0]
    return [format_cell(v) for v in r.cells()]


@pytest.mark.parametrize(
    ("api", "verdict"),
    [("Torch.exp.0", "SKIP"), ("Functional.linear.0", PASS)],  # benchmark: no baseline; ULP: its own escapes
)
def test_an_npu_better_than_a_gpu_that_overflowed_is_no_error(api, verdict) -> None:
    bench = torch.tensor([60000.3, 1.0, 2.0, 3.0, 0.5, 0.25], dtype=torch.float32)
    npu = bench.to(torch.float16)  # the bench correctly rounded
    gpu = npu.clone()
    gpu[0] = float("inf")  # the GPU overflowed one element
    d = _verdicts([_details(api, bench, npu)], [_details(api, bench, gpu)])
    assert d["比对结果"].iloc[0] == verdict, d["Message"].iloc[0]


@pytest.mark.slow
@pytest.mark.parametrize("api", E2E_APIS[:-1])  # not test_api: error balance is a sign count, not a size
@pytest.mark.parametrize("dtype", list(E2E_DTYPES), ids=str)
@given(data=st.data())
def test_an_npu_at_least_as_accurate_as_a_finite_gpu_passes(api, dtype, data) -> None:
    """Per element |npu - bench| <= |gpu - bench| (the NPU is the GPU's result with some elements
    moved toward the bench), every value finite: compare must not call the NPU worse."""
    n = data.draw(st.integers(2, 30), label="n")
    b = data.draw(hnp.arrays(np.float64, n, elements=st.floats(-1e4, 1e4)), label="bench")
    e = data.draw(
        hnp.arrays(np.float64, n, elements=st.one_of(st.floats(-1e-2, 1e-2), st.just(0.0))), label="gpu error"
    )
    lam = data.draw(hnp.arrays(np.float64, n, elements=st.sampled_from([0.0, 0.5, 1.0])), label="npu share")
    bench = torch.from_numpy(b).to(E2E_DTYPES[dtype])
    with np.errstate(all="ignore"):
        gpu_vals = b + b * e
        npu_vals = np.where(lam == 1.0, gpu_vals, np.where(lam == 0.0, b, b + 0.5 * b * e))
    gpu = torch.from_numpy(gpu_vals).to(dtype)
    npu = torch.from_numpy(npu_vals).to(dtype)
    # the premise, checked on what the devices return
    bn = bench.double().numpy()
    with np.errstate(all="ignore"):
        en = np.abs(npu.double().numpy() - bn)
        eg = np.abs(gpu.double().numpy() - bn)
    assert np.all(en <= eg)
    if not np.isfinite(gpu.double().numpy()).all():
        return  # the rounding to the device dtype overflowed
    name = f"{api}.forward.output.0"
    d = _verdicts([_details(api, bench, npu)], [_details(api, bench, gpu)])
    assert d["API Name"].iloc[0] == name
    assert d["比对结果"].iloc[0] in (PASS, "SKIP"), (d["比对算法"].iloc[0], d["Message"].iloc[0])
