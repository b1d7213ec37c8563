"""Dump overhead: step time with the dump on divided by the step time without it.

GPT-like model (4 blocks, d=256, 4 heads, batch 8x64, vocab 512), one thread, forward + backward +
SGD. Each configuration runs in its own fresh process; configurations alternate (round-robin) so
drifting machine load hits all of them alike. The ratio of medians is printed per configuration.

    python benchmarks/dump_overhead.py [--rounds 3] [--steps 5] [--configs statistics-L1,tensor-L1,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

CONFIGS: dict[str, dict[str, Any] | None] = {
    "off": None,
    "statistics-L1": {"task": "statistics", "level": "L1"},
    "md5-L1": {"task": "statistics", "level": "L1", "summary_mode": "md5"},
    "tensor-L1": {"task": "tensor", "level": "L1"},
    "statistics-L0": {"task": "statistics", "level": "L0"},
    "statistics-mix": {"task": "statistics", "level": "mix"},
    # the same without the background statistics worker (MSPROBE_STAT_THREAD=0: all in the training thread)
    "statistics-L1-sync": {"task": "statistics", "level": "L1", "env": {"MSPROBE_STAT_THREAD": "0"}},
    "statistics-L0-sync": {"task": "statistics", "level": "L0", "env": {"MSPROBE_STAT_THREAD": "0"}},
    "statistics-mix-sync": {"task": "statistics", "level": "mix", "env": {"MSPROBE_STAT_THREAD": "0"}},
    # tensor files through torch.save instead of the lean writer (msprobe/dump/pytorch/tensor_io.py)
    "tensor-L1-torchsave": {"task": "tensor", "level": "L1", "env": {"MSPROBE_PT_WRITER": "torch.save"}},
}
LIMITS = {"statistics-L1": 1.5, "tensor-L1": 4.0, "statistics-L0": 1.3, "statistics-mix": 2.0}


def worker(config_name: str, steps: int, out_dir: str) -> list[tuple[float, float]]:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    d, heads, vocab, seq, batch = 256, 4, 512, 64, 8

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q = q.view(b, t, heads, d // heads).transpose(1, 2)
            k = k.view(b, t, heads, d // heads).transpose(1, 2)
            v = v.view(b, t, heads, d // heads).transpose(1, 2)
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(4))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    model = GPT()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    idx = torch.randint(0, vocab, (batch, seq))
    tgt = torch.randint(0, vocab, (batch, seq))
    cfg = CONFIGS[config_name]
    dbg = None
    if cfg is not None:
        from msprobe.pytorch import PrecisionDebugger

        full = {
            "task": cfg["task"],
            "dump_path": out_dir,
            "rank": [],
            "step": [],
            "level": cfg["level"],
            cfg["task"]: {
                "scope": [],
                "list": [],
                "data_mode": ["all"],
                "summary_mode": cfg.get("summary_mode", "statistics"),
            },
        }
        cfg_path = os.path.join(out_dir, "config.json")
        with open(cfg_path, "w") as fh:
            json.dump(full, fh)
        dbg = PrecisionDebugger(config_path=cfg_path)

    def one_step() -> None:
        if dbg is not None:
            dbg.start(model=model)
        loss = F.cross_entropy(model(idx).view(-1, vocab), tgt.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dbg is not None:
            dbg.stop()
            dbg.step()

    one_step()  # warm-up (allocations, first-call costs)
    times = []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        one_step()
        times.append((time.perf_counter() - t0, time.process_time() - c0))
        if dbg is not None:  # keep the disk from filling up in tensor mode; not timed
            for name in os.listdir(out_dir):
                if name.startswith("step"):
                    shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--configs",
        default="statistics-L1,tensor-L1,md5-L1,statistics-L0,statistics-mix,"
        "statistics-L1-sync,statistics-L0-sync,statistics-mix-sync",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.out)))
        return 0
    names = ["off", *[c for c in args.configs.split(",") if c and c != "off"]]
    for n in names:
        if n not in CONFIGS:
            parser.error(f"unknown config {n!r}; known: {', '.join(CONFIGS)}")
    samples: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # each configuration says whether it wants the worker and which .pt writer
    env.pop("MSPROBE_STAT_THREAD", None)
    env.pop("MSPROBE_PT_WRITER", None)
    for r in range(args.rounds):
        for n in names:
            out = tempfile.mkdtemp(prefix="msprobe_bench_")
            cfg = CONFIGS[n]
            try:
                res = subprocess.run(
                    [sys.executable, __file__, "--worker", n, "--steps", str(args.steps), "--out", out],
                    capture_output=True,
                    text=True,
                    env={**env, **(cfg.get("env", {}) if cfg else {})},
                    check=True,
                )
            finally:
                shutil.rmtree(out, ignore_errors=True)
            samples[n].extend(tuple(x) for x in json.loads(res.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def med(n: str, i: int) -> float:
        return statistics.median(s[i] for s in samples[n])

    base_wall, base_cpu = med("off", 0), med("off", 1)
    print(
        f"GPT-like 4x256, batch 8x64, 1 thread, fwd+bwd+SGD; baseline step {base_wall * 1000:.1f} ms wall, "
        f"{base_cpu * 1000:.1f} ms CPU (medians of {len(samples['off'])} steps)"
    )
    print("ratio = median step time with the dump / without; 'cpu' uses process CPU time, which a busy")
    print("shared machine disturbs far less than wall time (training is single-threaded; the statistics")
    print("worker of the statistics rows adds its own CPU time; '-sync' rows run without it).")
    print(f"{'config':<20} {'wall ms':>9} {'wall':>7} {'cpu':>7} {'limit':>6}")
    for n in names[1:]:
        limit = LIMITS.get(n)
        lim = f"{limit:.1f}x" if limit else "-"
        w, c = med(n, 0), med(n, 1)
        print(f"{n:<20} {w * 1000:>9.1f} {w / base_wall:>6.2f}x {c / base_cpu:>6.2f}x {lim:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
