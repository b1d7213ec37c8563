"""Replay speed: APIs per second for a 50-API tensor dump of a small real model, 1 worker and -n 2.

The dump is made here (the dump stage is built separately): a tiny transformer block runs one
training step under a ``TorchFunctionMode`` that records every public torch API call in upstream's
``dump.json`` layout (task ``tensor``, level ``L1``: forward records with ``.pt`` inputs, backward
records with the output gradient caught by a tensor hook). Then ``pytest --msprobe-dump`` replays it
in fresh processes, side by side:

* ``collect``: ``--collect-only`` (process start, imports, parsing) - the fixed cost;
* ``1 worker`` and ``-n 2``: full replay; APIs/s is reported both end to end and net of ``collect``.

Usage: ``python benchmarks/replay_speed.py [--apis 50] [--repeat 3]``. Upstream run_ut on a CPU host
replays about 1.1 s per API (``shared/spec/run_ut_compare.md`` §11), i.e. well under 5 API/s.
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
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode


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


def _stats(t: torch.Tensor) -> dict[str, Any]:
    f = t.detach().float()
    if t.numel() == 0:
        return {"Max": None, "Min": None, "Mean": None, "Norm": None}
    return {"Max": f.max().item(), "Min": f.min().item(), "Mean": f.mean().item(), "Norm": f.norm().item()}


class Recorder(TorchFunctionMode):
    """Writes one upstream-style record per public API call (Functional / Tensor / Torch)."""

    def __init__(self, folder: Path, limit: int) -> None:
        super().__init__()
        self.folder, self.limit = folder, limit
        self.data: dict[str, Any] = {}
        self.counts: dict[str, int] = {}
        self.apis = 0

    def _prefix(self, func: Any) -> str | None:
        name = getattr(func, "__name__", "")
        if not name or name.startswith("__get") or name in ("__set__", "size", "dim", "numel", "chunk"):
            return None
        if getattr(F, name, None) is func:
            return f"Functional.{name}"
        if getattr(torch.Tensor, name, None) is func or getattr(torch._C.TensorBase, name, None) is func:
            return f"Tensor.{name}"
        if getattr(torch, name, None) is func:
            return f"Torch.{name}"
        return None

    def _arg(self, value: Any, key: str) -> Any:
        if isinstance(value, torch.Tensor):
            name = f"{key}.pt"
            torch.save(value.detach().clone(), self.folder / "dump_tensor_data" / name)
            return {
                "type": "torch.Tensor",
                "dtype": str(value.dtype),
                "shape": list(value.shape),
                **_stats(value),
                "requires_grad": value.requires_grad,
                "data_name": name,
            }
        if isinstance(value, (list, tuple)):
            return [self._arg(v, f"{key}.{i}") for i, v in enumerate(value)]
        if isinstance(value, (bool, int, float, str)) or value is None:
            return None if value is None else {"type": type(value).__name__, "value": value}
        if isinstance(value, torch.dtype):
            return {"type": "torch.dtype", "value": str(value)}
        return None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        prefix = self._prefix(func)
        if prefix is None or self.apis >= self.limit or not isinstance(out, torch.Tensor):
            return out
        n = self.counts.get(prefix, 0)
        self.counts[prefix] = n + 1
        full = f"{prefix}.{n}"
        self.apis += 1
        self.data[f"{full}.forward"] = {
            "input_args": [self._arg(a, f"{full}.forward.input.{i}") for i, a in enumerate(args)],
            "input_kwargs": {k: self._arg(v, f"{full}.forward.input.{k}") for k, v in kwargs.items()},
            "output": [self._arg(out, f"{full}.forward.output.0")],
        }
        if out.requires_grad:
            out.register_hook(lambda g, full=full: self._backward(full, g))
        return out

    def _backward(self, full: str, grad: torch.Tensor) -> None:
        self.data[f"{full}.backward"] = {"input": [self._arg(grad, f"{full}.backward.input.0")], "output": []}


def make_dump(folder: Path, apis: int) -> Path:
    """A tensor-mode L1 dump.json of one training step of ``Model`` (first ``apis`` API calls)."""
    rank = folder / "step0" / "rank0"
    (rank / "dump_tensor_data").mkdir(parents=True)
    torch.manual_seed(1234)
    model = Model()
    ids = torch.randint(0, 100, (2, 16))
    target = torch.randint(0, 100, (2, 16))
    recorder = Recorder(rank, apis)
    with recorder:
        loss = F.cross_entropy(model(ids).reshape(-1, 100), target.reshape(-1))
    loss.backward()
    doc = {
        "task": "tensor",
        "level": "L1",
        "framework": "pytorch",
        "dump_data_dir": str(rank / "dump_tensor_data"),
        "data": recorder.data,
    }
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
    ns = parser.parse_args()
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
