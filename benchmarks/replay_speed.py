"""Replay speed: APIs per second for a 50-API tensor dump of a small real model, 1 worker and -n 2.

The dump is made by msprobe's own dump stage (``PrecisionDebugger``, task ``tensor``, level ``L1``)
from one training step of a small two-layer transformer, cut to its first 50 API calls (forward
records and their backward records). Then ``pytest --msprobe-dump`` replays it in fresh processes,
side by side:

* ``collect``: ``--collect-only`` (process start, imports, parsing) - the fixed cost;
* ``1 worker`` and ``-n 2``: full replay; APIs/s is reported both end to end and net of ``collect``.

Usage: ``python benchmarks/replay_speed.py [--apis 50] [--repeat 3]``. Upstream run_ut on a CPU host
replays about 1.1 s per API, i.e. well under 5 API/s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


class Layer(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (d // self.heads) ** -0.5, dim=-1)
        x = x + F.dropout(
            self.proj(torch.matmul(att, v).transpose(1, 2).reshape(b, s, d)), 0.1, self.training
        )
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Model(nn.Module):
    """Embedding, two pre-norm transformer layers, a vocabulary head: a small real model."""

    def __init__(self, dim: int = 32, vocab: int = 100) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Layer(dim), Layer(dim)])
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def dump_child(folder: Path) -> None:
    """In a fresh process: one training step of ``Model`` dumped by msprobe (tensor mode, L1)."""
    from msprobe.pytorch import PrecisionDebugger, seed_all

    seed_all(1234)
    model = Model()
    ids = torch.randint(0, 100, (2, 16))
    target = torch.randint(0, 100, (2, 16))
    debugger = PrecisionDebugger(dump_path=str(folder), task="tensor", level="L1")
    debugger.start()
    loss = F.cross_entropy(model(ids).reshape(-1, 100), target.reshape(-1))
    loss.backward()
    debugger.stop()
    debugger.step()


def make_dump(folder: Path, apis: int) -> Path:
    """Our dump of one training step of ``Model``, cut to its first ``apis`` API calls."""
    subprocess.run([sys.executable, __file__, "--dump-child", str(folder)], check=True)
    (rank,) = folder.glob("step0/rank*")
    doc = json.loads((rank / "dump.json").read_text(encoding="utf-8"))
    forward = [k[: -len(".forward")] for k in doc["data"] if k.endswith(".forward")][:apis]
    keep = {f"{name}.{direction}" for name in forward for direction in ("forward", "backward")}
    doc["data"] = {k: v for k, v in doc["data"].items() if k in keep}
    (rank / "dump.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return rank


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"replay failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--apis", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dump-child", type=Path, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.dump_child:
        dump_child(ns.dump_child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        dump = make_dump(Path(tmp) / "dump", ns.apis)
        n = sum(1 for k in json.loads((dump / "dump.json").read_text())["data"] if k.endswith(".forward"))
        base = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore",
            "--rootdir",
            tmp,
            "--msprobe-dump",
            str(dump),
        ]
        runs = {
            "collect": [*base, "--collect-only", "--msprobe-out", f"{tmp}/c"],
            "1 worker": [*base, "--msprobe-out", f"{tmp}/n0"],
            "-n 2": [*base, "-n", "2", "--msprobe-out", f"{tmp}/n2"],
        }
        best = {name: min(timed(cmd) for _ in range(ns.repeat)) for name, cmd in runs.items()}
        items = []
        for i in range(ns.repeat):
            timed([*base, "--msprobe-out", f"{tmp}/j{i}", "--junitxml", f"{tmp}/j{i}.xml"])
            cases = ET.parse(f"{tmp}/j{i}.xml").getroot().iter("testcase")
            items.append(sum(float(c.get("time", 0)) for c in cases))
    print(f"dump: {n} APIs (tensor mode, 2-layer transformer, one training step)")
    print(f"1 worker, time inside the items only (junitxml): {min(items):.2f} s = {n / min(items):.1f} API/s")
    print(f"{'run':<10} {'wall s':>8} {'API/s end-to-end':>18} {'API/s net of start-up':>22}")
    for name in ("1 worker", "-n 2"):
        net = best[name] - best["collect"]
        rate = f"{n / net:.1f}" if net > 0 else "n/a"
        print(f"{name:<10} {best[name]:>8.2f} {n / best[name]:>18.1f} {rate:>22}")
    print(f"{'collect':<10} {best['collect']:>8.2f}   (start-up + parsing, subtracted above)")


if __name__ == "__main__":
    main()
