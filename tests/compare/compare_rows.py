"""Building hand-made details CSV rows and pairs for the compare tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from msprobe.compare.run import Analysis, analyse
from msprobe.compare.table import load_details
from msprobe.formats import accuracy_csv as ac

HEADER = ac.RUN_UT_DETAILS_HEADER
BENCH = {
    "小值域错误占比": "0.01",
    "均方根误差": "0.001",
    "相对误差最大值": "0.001",
    "相对误差平均值": "0.0001",
    "误差均衡性": "0.001",
}
"""Benchmark defaults of the hand-made examples."""


def row(
    name: str,
    dtype: str = "torch.float32",
    cells: Mapping[str, str] | None = None,
    shape: str = "(2, 3)",
    message: str = "",
    bench: bool = True,
) -> list[str]:
    """A details row: blanks everywhere, the benchmark defaults unless ``bench=False``, then ``cells``."""
    values = dict.fromkeys(HEADER, " ")
    values.update(
        {
            "API Name": name,
            "Bench Dtype": "torch.float64",
            "DEVICE Dtype": dtype,
            "Shape": shape,
            "Status": "pass",
            "Message": message,
        }
    )
    if bench:
        values.update(BENCH)
    values.update(cells or {})
    return [values[h] for h in HEADER]


def write(path: Path, rows: Sequence[Sequence[str]]) -> Path:
    ac.write_rows(path, HEADER, rows)
    return path


def pair(
    tmp: Path,
    npu: Sequence[Sequence[str]],
    gpu: Sequence[Sequence[str]] | None = None,
    npu_alone: bool = False,
) -> Analysis:
    """Analyse NPU rows against GPU rows (GPU = the same rows when not given).

    ``npu_alone``: 8.1.1's verdicts exactly (NPU-only metrics judged without the GPU row).
    """
    n = write(tmp / "npu.csv", npu)
    g = write(tmp / "gpu.csv", npu if gpu is None else gpu)
    return analyse(load_details(n), load_details(g), npu_alone=npu_alone)


def result_list(a: Analysis) -> list[list[str]]:
    return a.results[list(ac.COMPARE_RESULT_HEADER)].to_numpy(dtype=object).tolist()


def detail(a: Analysis, name: str) -> pd.Series:
    rows = a.details[a.details["API Name"] == name]
    assert len(rows) == 1, f"{name}: {len(rows)} rows"
    return rows.iloc[0]
