"""Merge and verdict laws: every key once with a status, order-free, self-compare = 1."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
from compare_rows import HEADER, row
from hypothesis import given
from hypothesis import strategies as st

from msprobe.compare.merge import BOTH, GPU_ONLY, NPU_ONLY, merge
from msprobe.compare.results import result_rows
from msprobe.compare.standards import DTYPE_NUMBERS
from msprobe.compare.table import from_frame
from msprobe.compare.verdicts import evaluate
from msprobe.formats import accuracy_csv as ac

APIS = ("Torch.matmul", "Tensor.add_", "Functional.conv2d", "Torch.abs", "Functional.softmax", "Torch.exp")
DTYPES = ("torch.float16", "torch.bfloat16", "torch.float32", "torch.int64", "torch.float64", " ")

names = st.builds(
    lambda api, i, d, k: f"{api}.{i}.{d}.output.{k}",
    st.sampled_from(APIS),
    st.integers(0, 2),
    st.sampled_from(("forward", "backward")),
    st.integers(0, 1),
)
metric = st.one_of(
    st.sampled_from(["0", "0.5", "inf", "nan", " ", "1e-9"]),
    st.floats(0, 10, allow_nan=False).map(lambda v: f"{v:.14f}"),
)
METRIC_COLUMNS = (
    "小值域错误占比",
    "均方根误差",
    "相对误差最大值",
    "相对误差平均值",
    "误差均衡性",
    "二进制一致错误率",
    "inf/nan错误率",
    "相对误差错误率",
    "绝对误差错误率",
    "ULP误差平均值",
    "ULP误差大于阈值占比",
    "双千指标",
)


def _dtype(name: str) -> str:
    """One dtype per API (so no order-dependent 'last row' rule is exercised by the shuffle law)."""
    full = name.rsplit(".", 3)[0]
    return DTYPES[zlib.crc32(full.encode()) % len(DTYPES)]


@st.composite
def tables(draw, unique=True):
    keys = draw(st.lists(names, max_size=12, unique=unique))
    rows = []
    for key in keys:
        cells = {c: draw(metric) for c in METRIC_COLUMNS}
        rows.append(row(key, _dtype(key), cells, message=f"msg {key.rsplit('.', 3)[0]}"))
    return pd.DataFrame(rows, columns=list(HEADER), dtype=object)


@given(npu=tables(unique=False), gpu=tables(unique=False))
def test_every_key_of_the_union_appears_once_with_a_status(npu, gpu):
    m = merge(from_frame(npu), from_frame(gpu))
    a, b = set(npu["API Name"]), set(gpu["API Name"])
    assert sorted(m["name"]) == sorted(a | b)
    for name, presence, dup in zip(m["name"], m["presence"], m["duplicated_in"]):
        assert presence == (BOTH if name in a and name in b else NPU_ONLY if name in a else GPU_ONLY)
        in_npu = (npu["API Name"] == name).sum() > 1
        in_gpu = (gpu["API Name"] == name).sum() > 1
        assert dup == ("both" if in_npu and in_gpu else "npu" if in_npu else "gpu" if in_gpu else "")
    details = evaluate(m)
    assert len(details) == len(m) and details["比对结果"].isin(["pass", "error", "SKIP", "missing"]).all()


def _outputs(npu: pd.DataFrame, gpu: pd.DataFrame) -> tuple[dict, dict]:
    n, g = from_frame(npu), from_frame(gpu)
    details = evaluate(merge(n, g), n.numeric)
    results = result_rows(details)
    d = {r[0]: tuple(r) for r in details[list(ac.COMPARE_DETAILS_HEADER)].to_numpy(dtype=object).tolist()}
    r = {x[0]: tuple(x) for x in results[list(ac.COMPARE_RESULT_HEADER)].to_numpy(dtype=object).tolist()}
    assert len(d) == len(details) and len(r) == len(results)
    return d, r


@given(npu=tables(), gpu=tables(), seed=st.integers(0, 2**32 - 1))
def test_shuffling_rows_changes_nothing(npu, gpu, seed):
    rng = np.random.default_rng(seed)
    expected = _outputs(npu, gpu)
    shuffled = _outputs(npu.sample(frac=1, random_state=rng), gpu.sample(frac=1, random_state=rng))
    assert shuffled == expected


@given(table=tables())
def test_a_table_against_itself_gives_ratios_of_one(table):
    t = from_frame(table)
    details = evaluate(merge(t, t), t.numeric)
    assert (details["_presence"] == BOTH).all()
    assert not (details["比对结果"] == "missing").any()
    bench = details[details["比对算法"] == "标杆比对法"]
    for (_, npu_row), (_, out) in zip(
        table.set_index("API Name").loc[bench["API Name"]].iterrows(), bench.iterrows()
    ):
        floor = DTYPE_NUMBERS[npu_row["DEVICE Dtype"]].min_error
        for col, ratio_col in (("均方根误差", "均方根误差比值"), ("相对误差最大值", "相对误差最大值比值")):
            x = float(npu_row[col])
            if np.isfinite(x) and abs(x) >= floor:
                assert out[ratio_col] == "1.00000000000000"
            elif np.isfinite(x):
                assert float(out[ratio_col]) <= 1.0
            else:  # inf vs the same inf, nan vs nan: consistent, no ratio
                assert out[ratio_col] == "nan" and f"{col}同为同号inf或nan" in out["Message"]
        assert out["比对结果"] == "pass"
