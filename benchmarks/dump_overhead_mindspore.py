"""MindSpore dump overhead: train-step time with the dump divided by the step time without msprobe.

Small MLP (64 -> 128 -> 128 -> 10, ReLU, batch 32), PyNative on CPU, ``value_and_grad`` + SGD. All
configurations run in one process, round-robin (baseline, then each dump configuration, again and
again), so drifting machine load hits all of them alike; the debugger is constructed and torn down
for every measurement. Prints the median step times and their ratios to the baseline.

    python benchmarks/dump_overhead_mindspore.py [--rounds 3] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

CONFIGS: dict[str, dict[str, Any] | None] = {
    "off": None,
    "loaded-L1 (dump off)": {"task": "statistics", "level": "L1", "idle": True},
    "statistics-L1": {"task": "statistics", "level": "L1"},
    "statistics-mix": {"task": "statistics", "level": "mix"},
    "statistics-L0": {"task": "statistics", "level": "L0"},
    "md5-L1": {"task": "statistics", "level": "L1", "summary_mode": "md5"},
}


def build() -> tuple[Any, Any, Any]:
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, nn

    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(64, 128), nn.ReLU(), nn.Dense(128, 128), nn.ReLU(), nn.Dense(128, 10))
    loss_fn = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.01)
    rng = np.random.RandomState(0)
    x = Tensor(rng.randn(32, 64).astype(np.float32))
    y = Tensor(rng.randn(32, 10).astype(np.float32))
    grad_fn = ms.value_and_grad(lambda a, b: loss_fn(net(a), b), None, opt.parameters)

    def train_step() -> None:
        _, grads = grad_fn(x, y)
        opt(grads)

    return net, train_step, None


def measure(name: str, spec: dict[str, Any] | None, steps: int, work: str) -> float:
    from msprobe.mindspore import PrecisionDebugger

    net, train_step, _ = build()
    for _ in range(2):  # warm-up (kernel caches)
        train_step()
    debugger = None
    if spec is not None:
        cfg = {
            "task": spec["task"],
            "dump_path": os.path.join(work, name.split()[0]),
            "level": spec["level"],
            spec["task"]: {"summary_mode": spec.get("summary_mode", "statistics")},
        }
        path = os.path.join(work, "cfg.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(cfg, fh)
        debugger = PrecisionDebugger(config_path=path)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        if debugger is not None and not spec.get("idle"):  # type: ignore[union-attr]
            debugger.start(net)
            train_step()
            debugger.stop()
            debugger.step()
        else:
            train_step()
        times.append(time.perf_counter() - t0)
    if debugger is not None:
        PrecisionDebugger._shutdown()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="msprobe_ms_bench_")
    results: dict[str, list[float]] = {name: [] for name in CONFIGS}
    try:
        for _ in range(args.rounds):
            for name, spec in CONFIGS.items():
                results[name].append(measure(name, spec, args.steps, work))
                shutil.rmtree(os.path.join(work, name.split()[0]), ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(results["off"])
    print(f"MindSpore MLP train step, PyNative CPU, {args.rounds} rounds x {args.steps} steps (medians)")
    print(f"{'configuration':<24}{'ms/step':>10}{'ratio':>8}")
    for name, vals in results.items():
        med = statistics.median(vals)
        print(f"{name:<24}{med * 1e3:>10.2f}{med / base:>8.2f}")


if __name__ == "__main__":
    main()
