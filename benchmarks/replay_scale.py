"""Replay at scale: a synthetic statistics dump of many cheap API calls, collected and replayed.

The dump (``dump.json``, task ``statistics``, level ``L1``) cycles through a few cheap API kinds with
small shapes (``Torch.add``, ``Functional.relu``, ``Tensor.mul``), each record as the dump stage
writes it. In fresh ``pytest --msprobe-dump`` processes it reports, for ``-n 0`` and ``-n 2``:

* ``collect``: wall time of ``--collect-only -q`` (process start, imports, parsing, item creation);
* ``peak MiB``: the largest resident set of the run's process tree (``ru_maxrss`` of the waited child,
  which covers the children it waited for, e.g. xdist workers);
* ``APIs/s``: replayed APIs per second, end to end and net of the collection time.

It checks the run, not only times it: every API must have a result row. Usage:
``python benchmarks/replay_scale.py [--apis 50000]`` (a few minutes at 50,000 APIs on two cores).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: (record name prefix, input tensors): the API kinds the synthetic dump cycles through.
KINDS: tuple[tuple[str, int], ...] = (("Torch.add", 2), ("Functional.relu", 1), ("Tensor.mul", 2))
SHAPE = [4, 8]


def _tensor(lo: float, hi: float) -> dict[str, Any]:
    return {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": SHAPE,
        "Max": hi,
        "Min": lo,
        "Mean": (lo + hi) / 2,
        "Norm": 1.0,
        "requires_grad": False,
    }


def make_dump(folder: Path, apis: int) -> Path:
    """``folder/dump.json`` with ``apis`` forward records; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {}
    counts = dict.fromkeys((k for k, _ in KINDS), 0)
    for i in range(apis):
        kind, inputs = KINDS[i % len(KINDS)]
        lo = -1.0 - (i % 7) / 10
        data[f"{kind}.{counts[kind]}.forward"] = {
            "input_args": [_tensor(lo, 1.0) for _ in range(inputs)],
            "input_kwargs": {},
            "output": [_tensor(lo, 2.0)],
        }
        counts[kind] += 1
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    (folder / "dump.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


def run(cmd: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak MiB of the process tree, exit code, output tail) of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / 1024, proc.returncode, out[-2000:]


def pytest_cmd(dump: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
            "--rootdir", str(dump), f"--msprobe-dump={dump}", *extra]  # fmt: skip


def result_rows(out: Path) -> int:
    (result,) = out.glob("accuracy_checking_result_*.csv")
    with open(result, encoding="utf-8-sig", newline="") as fh:
        return sum(1 for _ in csv.reader(fh)) - 1


def measure(dump: Path, out: Path, apis: int, workers: str) -> dict[str, float]:
    collect, collect_mib, code, tail = run(pytest_cmd(dump, "--collect-only", "-n", workers))
    if code != 0 or f"{apis} test" not in tail:
        raise SystemExit(f"--collect-only -n {workers} failed (exit {code}):\n{tail}")
    wall, mib, code, tail = run(pytest_cmd(dump, f"--msprobe-out={out}", "-n", workers))
    if code not in (0, 1) or result_rows(out) != apis:
        raise SystemExit(f"replay -n {workers} failed (exit {code}):\n{tail}")
    net = max(wall - collect, 1e-9)
    return {"collect": collect, "collect_mib": collect_mib, "wall": wall, "mib": mib,
            "rate": apis / wall, "net_rate": apis / net}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apis", type=int, default=50_000, help="API calls in the dump (default 50000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dump = make_dump(Path(tmp) / "dump", args.apis)
        size = (dump / "dump.json").stat().st_size / 2**20
        print(f"synthetic statistics dump: {args.apis} APIs, dump.json {size:.1f} MiB")
        print(f"{'':6} {'collect s':>10} {'collect MiB':>12} {'replay s':>9} {'peak MiB':>9} "
              f"{'APIs/s':>8} {'net APIs/s':>11}")  # fmt: skip
        rates = {}
        for workers in ("0", "2"):
            m = measure(dump, Path(tmp) / f"out-n{workers}", args.apis, workers)
            rates[workers] = m["net_rate"]
            print(f"-n {workers:3} {m['collect']:10.2f} {m['collect_mib']:12.0f} {m['wall']:9.2f} "
                  f"{m['mib']:9.0f} {m['rate']:8.0f} {m['net_rate']:11.0f}")  # fmt: skip
        print(f"net APIs/s, -n 2 / -n 0: {rates['2'] / rates['0']:.2f}")


if __name__ == "__main__":
    main()
