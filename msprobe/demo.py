"""``msprobe demo``: the whole pipeline on a built-in model, no accelerator and no download.

1. dump a small GPT-like block stack at level L1 in tensor mode, once in bfloat16 and once in float32
   (each in its own process: ``PrecisionDebugger`` is a per-process singleton, as upstream's);
2. replay each dump on the CPU (bf16 on CPU vs an fp32 CPU benchmark; fp32 vs fp64);
3. compare the bf16 replay (the "device under test") against the fp32 replay (the "reference
   device"), so every difference the report shows is a real precision difference;
4. write the compare CSVs and the HTML/Markdown report.

Progress of each stage goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from msprobe.errors import MsprobeError

DTYPES = ("bfloat16", "float32")


def build_model(dtype_name: str):  # -> torch.nn.Module (torch is imported lazily)
    """A GPT-like stack: token embedding, 2 pre-norm blocks (attention + GELU MLP), LM head."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            att = torch.matmul(q, k.transpose(-2, -1)) / (d // self.heads) ** 0.5
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class TinyGPT(nn.Module):
        def __init__(self, vocab: int = 64, d: int = 32, heads: int = 4, blocks: int = 2) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(blocks))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, idx):
            x = self.emb(idx)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return TinyGPT().to(getattr(torch, dtype_name))


def dump_child(dtype_name: str, dump_path: str) -> int:
    """Runs in a child process: one training step of the demo model, dumped at L1 in tensor mode."""
    import torch
    from torch.nn import functional as F

    from msprobe.pytorch import PrecisionDebugger, seed_all

    seed_all(1234)
    model = build_model(dtype_name)
    idx = torch.randint(0, 64, (2, 16))
    target = torch.randint(0, 64, (2, 16))
    debugger = PrecisionDebugger(dump_path=dump_path, task="tensor", level="L1")
    debugger.start()
    logits = model(idx)
    loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), target.view(-1))
    loss.backward()
    debugger.stop()
    debugger.step()
    return 0


def _stage(title: str) -> float:
    print(f"[msprobe demo] {title} ...", file=sys.stderr, flush=True)
    return time.perf_counter()


def _done(start: float, what: str) -> None:
    print(f"[msprobe demo]   {what} ({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)


def _rank_dir(dump_root: Path) -> Path:
    found = sorted(dump_root.glob("step0/rank*/dump.json"))
    if not found:
        raise MsprobeError(f"{dump_root}: the demo dump wrote no step0/rank*/dump.json")
    return found[0].parent


def _newest(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if not found:
        raise MsprobeError(f"{folder}: replay wrote no {pattern}")
    return found[-1]


def run_demo(out: Path, workers: int) -> int:
    from msprobe.compare import run_compare
    from msprobe.run_ut.cli import main as run_ut_main

    out.mkdir(parents=True, exist_ok=True)
    details: dict[str, Path] = {}
    for dtype_name in DTYPES:
        dump_root = out / f"dump_{dtype_name}"
        t0 = _stage(f"1/3 dumping the demo model in {dtype_name} (L1, tensor mode)")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        proc = subprocess.run(
            [sys.executable, "-m", "msprobe.demo", "--dump-child", dtype_name, str(dump_root)],
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise MsprobeError(f"demo dump in {dtype_name} failed: {tail[0]}")
        rank_dir = _rank_dir(dump_root)
        _done(t0, f"dump written to {rank_dir}")

        t0 = _stage(f"2/3 replaying the {dtype_name} dump on the CPU")
        replay_out = out / f"replay_{dtype_name}"
        replay_out.mkdir(exist_ok=True)
        argv = ["-api_info", str(rank_dir / "dump.json"), "-o", str(replay_out), "-q"]
        if workers > 1:
            argv += ["-n", str(workers)]
        run_ut_main(argv)  # a non-zero status only means some APIs were flagged: that is the point
        details[dtype_name] = _newest(replay_out, "accuracy_checking_details_*.csv")
        _done(t0, f"details in {details[dtype_name]}")

    t0 = _stage("3/3 comparing bf16 (device under test) against fp32 (reference device)")
    outcome = run_compare(
        details["bfloat16"], details["float32"], out / "compare", dump_dir=_rank_dir(out / "dump_bfloat16")
    )
    _done(t0, "compare written")
    for path in outcome.paths:
        print(f"written: {path}")
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(outcome.counts.items())))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="msprobe demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="msprobe_demo", help="output folder (default ./msprobe_demo)")
    parser.add_argument("-n", "--workers", type=int, default=1, help="replay workers (pytest-xdist)")
    parser.add_argument("--dump-child", nargs=2, metavar=("DTYPE", "DUMP_PATH"), help=argparse.SUPPRESS)
    parser.add_argument("-v", "--verbose", action="store_true", help="tracebacks on errors")
    args = parser.parse_args(argv)
    if args.dump_child:
        return dump_child(*args.dump_child)
    return run_demo(Path(args.out), args.workers)


if __name__ == "__main__":
    raise SystemExit(main())
