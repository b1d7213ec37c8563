"""Compared details rows per second: ``run_compare`` on 100,000 rows synthesised from real upstream rows.

The rows are the 8.1.1 run_ut details of ``tests/data/compare/upstream_v811_cnn`` (a small CNN), repeated
with fresh call numbers (``Functional.conv2d.0`` → ``Functional.conv2d.{copy}00``) until there are
``--rows`` rows; the GPU file is the same rows with the benchmark metrics scaled by a seeded random
factor in [0.25, 4] (the benchmark ratios and the error rates the other standards read), so every
standard and both verdicts occur. Upstream's api_precision_compare (26.2) was
measured at about 200 rows/s on this machine (a pandas filter per NPU row, so
it slows down as the files grow); the ratio printed is ours over that figure.

    .venv/bin/python benchmarks/compare_speed.py [--rows 100000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from msprobe.compare.run import analyse, run_compare, write_csvs
from msprobe.compare.table import load_details
from msprobe.formats import accuracy_csv as ac

UPSTREAM_ROWS_PER_S = 200.0
SOURCE = Path(__file__).parents[1] / "tests" / "data" / "compare" / "upstream_v811_cnn"
SCALED = (
    "小值域错误占比", "均方根误差", "相对误差最大值", "相对误差平均值", "ULP误差大于阈值占比",
    "inf/nan错误率", "相对误差错误率", "绝对误差错误率", "二进制一致错误率",
)  # fmt: skip
"""GPU metrics scaled: the ratios, and the NPU-only rates (a GPU rate below the NPU's fails it)."""


def synthesise(rows: int, seed: int = 1234) -> tuple[pd.DataFrame, pd.DataFrame]:
    src = next(SOURCE.glob("accuracy_checking_details_*.csv"))
    base = pd.DataFrame(ac.read_rows(src, ac.RUN_UT_DETAILS_HEADER), columns=list(ac.RUN_UT_DETAILS_HEADER))
    copies = -(-rows // len(base))
    npu = pd.concat([base] * copies, ignore_index=True).iloc[:rows].copy()
    copy = np.repeat(np.arange(copies), len(base))[:rows].astype(str)
    parts = npu["API Name"].str.split(".", n=3, expand=True)  # Type, api, N, rest
    npu["API Name"] = parts[0] + "." + parts[1] + "." + copy + "00" + parts[2] + "." + parts[3]
    gpu = npu.copy()
    rng = np.random.default_rng(seed)
    for col in SCALED:
        values = pd.to_numeric(gpu[col], errors="coerce")
        factor = 2.0 ** rng.uniform(-2, 2, len(gpu))
        scaled = (values * factor).map(lambda v: f"{v:.14f}")
        gpu[col] = scaled.where(values.notna(), gpu[col])
    return npu, gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    npu, gpu = synthesise(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        npu_csv, gpu_csv = tmpdir / "npu.csv", tmpdir / "gpu.csv"
        ac.write_text_rows(npu_csv, ac.RUN_UT_DETAILS_HEADER, npu.to_numpy(dtype=object).tolist())
        ac.write_text_rows(gpu_csv, ac.RUN_UT_DETAILS_HEADER, gpu.to_numpy(dtype=object).tolist())

        t0 = time.perf_counter()
        tables = load_details(npu_csv), load_details(gpu_csv)
        t1 = time.perf_counter()
        analysis = analyse(*tables)
        t2 = time.perf_counter()
        write_csvs(analysis, tmpdir / "r.csv", tmpdir / "d.csv")
        t3 = time.perf_counter()
        outcome = run_compare(npu_csv, gpu_csv, tmpdir / "out")
        t4 = time.perf_counter()

    total = t4 - t3
    print(f"rows: {args.rows} (NPU) vs {args.rows} (GPU), APIs: {sum(outcome.api_counts.values())}")
    print(f"verdicts: APIs {outcome.api_counts}, rows {outcome.row_counts}")
    print(f"stages: load {t1 - t0:.2f} s, analyse {t2 - t1:.2f} s, write CSVs {t3 - t2:.2f} s")
    print(f"run_compare (load + analyse + CSVs + HTML/Markdown report): {total:.2f} s")
    ours = args.rows / total
    print(f"ours: {ours:,.0f} rows/s; upstream 26.2: {UPSTREAM_ROWS_PER_S:,.0f} rows/s; "
          f"ratio: {ours / UPSTREAM_ROWS_PER_S:,.0f}x")  # fmt: skip


if __name__ == "__main__":
    main()
