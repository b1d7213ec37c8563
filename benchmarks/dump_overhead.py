"""Dump overhead: step time with the dump on divided by the step time without it.

Two models, one thread each:
- ``gpt``: a GPT-like model (4 blocks, d=256, 4 heads, batch 8x64, vocab 512), forward + backward +
  SGD: few records over large tensors.
- ``llama``: a tiny random-init transformers Llama (d=64, 2 layers, batch 2x16) with AdamW: hundreds
  of records over small tensors, where the host cost per record decides (as on an NPU or GPU, where
  kernels run asynchronously and the host is the bottleneck). Needs ``transformers``.

Each configuration runs in its own fresh process; configurations alternate (round-robin, in a new
shuffled order every round) so drifting machine load and the place in the order hit all of them alike.
Per configuration it prints the ratio of medians, the host time the dump adds per record
(microseconds) and, in tensor mode, the bytes written per step.
``--code NAME=PATH`` (repeatable) runs every configuration also with the msprobe of another checkout
(``git worktree add /tmp/old <rev>``), in the same rounds: old and new side by side in one run.

    python benchmarks/dump_overhead.py [--models gpt,llama] [--rounds 3] [--steps 5] [--configs ...]
                                       [--code old=/tmp/old]
"""

from __future__ import annotations

import argparse
import json
import os
import random
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
    # async_dump: device statistics fetched and records journaled once a step (not in bounded batches)
    "statistics-L1-async": {"task": "statistics", "level": "L1", "async_dump": True},
    "statistics-mix-async": {"task": "statistics", "level": "mix", "async_dump": True},
    # tensor files through torch.save instead of the lean writer (msprobe/dump/pytorch/tensor_io.py)
    "tensor-L1-torchsave": {"task": "tensor", "level": "L1", "env": {"MSPROBE_PT_WRITER": "torch.save"}},
}
LIMITS = {
    "gpt": {"statistics-L1": 1.3, "tensor-L1": 3.5, "statistics-L0": 1.3, "statistics-mix": 1.6},
    "llama": {"statistics-L1": 4.0, "statistics-mix": 5.0},
}
MODELS = ("gpt", "llama")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gpt_step() -> Any:
    """The GPT-like model and one training step of it (SGD)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

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

    def train() -> None:
        loss = F.cross_entropy(model(idx).view(-1, vocab), tgt.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    return model, train


def llama_step() -> Any:
    """The tiny transformers Llama of the tests and one training step of it (AdamW)."""
    import torch

    sys.path.insert(0, REPO)
    from tests import zoo

    model = zoo.build("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, labels = zoo.batch()

    def train() -> None:
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()

    return model, train


def _dumped(out_dir: str) -> tuple[int, int]:
    """(records, tensor bytes) of the steps dumped under ``out_dir``, which are then removed."""
    records = size = 0
    for step in os.listdir(out_dir):
        if not step.startswith("step"):
            continue
        for root, _dirs, files in os.walk(os.path.join(out_dir, step)):
            for name in files:
                path = os.path.join(root, name)
                if name == "dump.json":
                    with open(path, encoding="utf-8") as fh:
                        records += len(json.load(fh).get("data", {}))
                elif name.endswith(".pt"):
                    size += os.path.getsize(path)
        shutil.rmtree(os.path.join(out_dir, step), ignore_errors=True)
    return records, size


def worker(model_name: str, config_name: str, steps: int, out_dir: str) -> list[tuple[float, ...]]:
    import torch

    import msprobe.pytorch  # noqa: F401  (first: the checkout on PYTHONPATH, before REPO's tests)

    torch.set_num_threads(1)
    model, train = {"gpt": gpt_step, "llama": llama_step}[model_name]()
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
            "async_dump": cfg.get("async_dump", False),
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
        train()
        if dbg is not None:
            dbg.stop()
            dbg.step()

    one_step()  # warm-up (allocations, first-call costs)
    _dumped(out_dir)
    times = []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        one_step()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        # counted and removed (so tensor mode does not fill the disk) outside the timed step
        records, size = _dumped(out_dir) if dbg is not None else (0, 0)
        times.append((wall, cpu, records, size))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default=",".join(MODELS), help="gpt, llama or both (comma-separated)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--configs",
        default="statistics-L1,statistics-mix,tensor-L1,md5-L1,statistics-L0,statistics-L1-async",
    )
    parser.add_argument(
        "--code", action="append", default=[], metavar="NAME=PATH", help="also run another checkout"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.model, args.worker, args.steps, args.out)))
        return 0
    names = ["off", *[c for c in args.configs.split(",") if c and c != "off"]]
    for n in names:
        if n not in CONFIGS:
            parser.error(f"unknown config {n!r}; known: {', '.join(CONFIGS)}")
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            parser.error(f"unknown model {m!r}; known: {', '.join(MODELS)}")
    codes = {"": REPO}
    for spec in args.code:
        label, sep, path = spec.partition("=")
        if not sep or not os.path.isdir(os.path.join(path, "msprobe")):
            parser.error(f"--code {spec!r}: expected NAME=PATH of a checkout holding msprobe/")
        codes[label] = os.path.abspath(path)
    runs = [(m, c, n) for m in models for c in codes for n in names if not (c and n == "off")]
    samples: dict[tuple[str, str, str], list[tuple[float, ...]]] = {run: [] for run in runs}
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("MSPROBE_PT_WRITER", None)  # each configuration says which .pt writer
    for r in range(args.rounds):
        # a new order every round (seeded): a place in the order has its own bias (a process
        # inherits the page cache and CPU state of the one before it), which no configuration keeps
        order = list(runs)
        random.Random(r).shuffle(order)
        for m, c, n in order:
            out = tempfile.mkdtemp(prefix="msprobe_bench_")
            cfg = CONFIGS[n]
            try:
                cmd = [sys.executable, __file__, "--model", m, "--worker", n, "--steps", str(args.steps)]
                res = subprocess.run(
                    [*cmd, "--out", out],
                    capture_output=True,
                    text=True,
                    env={**env, "PYTHONPATH": codes[c], **(cfg.get("env", {}) if cfg else {})},
                    check=True,
                )
            finally:
                shutil.rmtree(out, ignore_errors=True)
            samples[(m, c, n)].extend(tuple(x) for x in json.loads(res.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def med(run: tuple[str, str, str], i: int) -> float:
        return statistics.median(s[i] for s in samples[run])

    print("ratio = median step time with the dump / without; 'cpu' uses process CPU time, which a busy")
    print("shared machine disturbs far less than wall time (training is single-threaded).")
    print("us/rec = wall time the dump adds to a step, divided by the records it writes in that step.")
    titles = {
        "gpt": "GPT-like 4x256, batch 8x64, fwd+bwd+SGD",
        "llama": "transformers Llama d=64 x2 layers, batch 2x16, fwd+bwd+AdamW",
    }
    for m in models:
        base_wall, base_cpu = med((m, "", "off"), 0), med((m, "", "off"), 1)
        print(
            f"\n{titles[m]}, 1 thread; baseline step {base_wall * 1000:.1f} ms wall, "
            f"{base_cpu * 1000:.1f} ms CPU (medians of {len(samples[(m, '', 'off')])} steps)"
        )
        print(
            f"{'config':<26} {'wall ms':>9} {'wall':>7} {'cpu':>7} {'limit':>6} "
            f"{'records':>8} {'us/rec':>7} {'MB':>7}"
        )
        for n in names[1:]:
            for c in codes:
                limit = LIMITS.get(m, {}).get(n)
                lim = f"{limit:.1f}x" if limit and not c else "-"
                w, cpu, recs, size = (med((m, c, n), i) for i in range(4))
                per_record = (w - base_wall) / recs * 1e6 if recs else float("nan")
                mb = f"{size / 1e6:>7.1f}" if size else f"{'-':>7}"
                label = f"{c}:{n}" if c else n
                print(
                    f"{label:<26} {w * 1000:>9.1f} {w / base_wall:>6.2f}x {cpu / base_cpu:>6.2f}x {lim:>6} "
                    f"{int(recs):>8} {per_record:>7.0f} {mb}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
