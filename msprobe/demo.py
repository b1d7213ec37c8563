"""``msprobe demo``: the whole pipeline on a built-in model with a known answer, no accelerator needed.

1. dump one training step of a small GPT-like model at level L1 in tensor mode (in a child process:
   ``PrecisionDebugger`` is a per-process singleton, as upstream's);
2. replay that dump on the CPU as the reference device (the "GPU" side of the compare);
3. replay the same dump on a simulated faulty device: the CPU with one precision fault planted by the
   replay plugin ``msprobe.demo_fault`` (the device side of ``Functional.softmax`` sums in bfloat16);
4. compare the faulty replay (the "NPU" side) against the reference replay and write the report.

The answer is known: the report must name the planted API first, and every other API must pass. The
stages are printed to stderr, what was planted and which file to open to stdout.
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
from msprobe.formats.accuracy_csv import RUN_UT_DETAILS_NAME, run_ut_files

DTYPE = "float32"
FAULT_PLUGIN = "msprobe.demo_fault"
STAGES = 4


def build_model(dtype_name: str = DTYPE):  # -> torch.nn.Module (torch is imported lazily)
    """A GPT-like stack: token embedding, 2 pre-norm blocks (bias-free QKV attention + GELU MLP), LM head."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d, bias=False)  # a key bias has a zero gradient: no ULP to compare
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


def _stage(number: int, title: str) -> float:
    print(f"[{number}/{STAGES}] {title} ...", file=sys.stderr, flush=True)
    return time.perf_counter()


def _done(start: float, what: str) -> None:
    print(f"      {what} ({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)


def _rank_dir(dump_root: Path) -> Path:
    found = sorted(dump_root.glob("step0/rank*/dump.json"))
    if not found:
        raise MsprobeError(f"{dump_root}: the demo dump wrote no step0/rank*/dump.json")
    return found[0].parent


def dump(dump_root: Path) -> Path:
    """Stage 1: the child process that dumps; the rank folder it wrote."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "msprobe.demo", "--dump-child", DTYPE, str(dump_root)],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise MsprobeError(f"demo dump failed: {tail[0]}")
    return _rank_dir(dump_root)


def replay(rank_dir: Path, out: Path, workers: int, plugins: Sequence[str] = ()) -> Path:
    """Stages 2 and 3: ``msprobe run_ut`` on the CPU, with extra pytest plugins; its details CSV."""
    import pytest

    from msprobe.run_ut.cli import pytest_args

    argv = ["-api_info", str(rank_dir / "dump.json"), "-o", str(out), "-device_type", "cpu", "-q"]
    if workers > 1:
        argv += ["-n", str(workers)]
    out.mkdir(parents=True, exist_ok=True)
    extra = [arg for name in plugins for arg in ("-p", name)]
    status = int(pytest.main([*pytest_args(argv), *extra]))
    if status not in (0, 1):  # 1 only means some API failed its check: expected of the faulty run
        raise MsprobeError(f"{out}: the demo's replay stopped with pytest exit status {status}")
    found = run_ut_files(out, RUN_UT_DETAILS_NAME)
    if not found:
        raise MsprobeError(f"{out}: replay wrote no accuracy_checking_details_<ts>.csv")
    return found[-1]


def run_demo(out: Path, workers: int) -> int:
    from msprobe.compare import run_compare
    from msprobe.demo_fault import PLANTED, PLANTED_API

    out.mkdir(parents=True, exist_ok=True)
    t0 = _stage(1, f"dump: one training step of the demo model ({DTYPE}, L1, tensor mode)")
    rank_dir = dump(out / "dump")
    _done(t0, f"written to {rank_dir}")

    t0 = _stage(2, "replay on the reference device (the CPU)")
    reference = replay(rank_dir, out / "replay_reference", workers)
    _done(t0, f"details in {reference}")

    t0 = _stage(3, f"replay on the simulated faulty device (the CPU with a planted fault in {PLANTED_API})")
    faulty = replay(rank_dir, out / "replay_faulty", workers, plugins=(FAULT_PLUGIN,))
    _done(t0, f"details in {faulty}")

    t0 = _stage(4, "compare: the faulty device (as NPU) against the reference device (as GPU)")
    outcome = run_compare(faulty, reference, out / "compare", dump_dir=rank_dir)
    _done(t0, f"written to {outcome.report_html.parent}")

    failing = outcome.failing_apis
    print(f"planted:  {PLANTED}")
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(outcome.counts.items())))
    print("failing:  " + (", ".join(failing) if failing else "none (the planted fault was not found)"))
    print(f"open:     {outcome.report_html}")
    print("next:     docs/workflow.md walks through the same steps on a real NPU training job")
    # the answer is known: a demo that missed its fault, or blamed another API, is a failed run
    found = bool(failing) and all(name.rsplit(".", 1)[0] == PLANTED_API for name in failing)
    if not found:
        print(f"msprobe demo: the compare did not single out {PLANTED_API}", file=sys.stderr)
    return 0 if found else 1


def main(argv: Sequence[str] | None = None, prog: str = "msprobe demo") -> int:
    summary = __doc__.splitlines()[0].split(": ", 1)[-1]
    parser = argparse.ArgumentParser(prog=prog, description=summary)
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
