"""A forked child of the dumping process (a DataLoader worker running the user's collate, a Hogwild or
Pool worker) that reaches the debugger's switch itself (``start()``, ``save()``, ``next()`` under
``enable_dataloader``) dumps nothing: its records would go to its parent's folder, beside its parent's
and its siblings', and lock their journal (the training then hung)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

SAVE_IN_WORKER = textwrap.dedent(
    """
    import sys, torch
    from msprobe.pytorch import PrecisionDebugger

    def collate(items):
        x = torch.stack(items) * 7.0
        PrecisionDebugger.save(x, "collated")  # the user's probe in the data pipeline
        return x

    if __name__ == "__main__":
        dbg = PrecisionDebugger(dump_path=sys.argv[1], task="tensor", level="debug")
        loader = torch.utils.data.DataLoader(
            list(torch.ones(4, 3)), batch_size=2, collate_fn=collate, num_workers=1,
            multiprocessing_context="fork",
        )
        for x in loader:
            PrecisionDebugger.save(x + 1, "batch")
            dbg.step()
        print("done", flush=True)
    """
)

HOGWILD = textwrap.dedent(
    """
    import sys, torch, multiprocessing as mp
    from msprobe.pytorch import PrecisionDebugger

    def train(dbg, model):  # a Hogwild worker whose loop carries the debugger's calls
        for _ in range(2):
            dbg.start(model=model)
            model(torch.full((3, 4), 7.0)).sum().backward()
            dbg.stop()
            dbg.step()

    if __name__ == "__main__":
        torch.manual_seed(0)
        dbg = PrecisionDebugger(dump_path=sys.argv[1], task="tensor", level="mix")
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
        dbg.start(model=model)
        model(torch.ones(2, 4)).sum().backward()
        ps = [mp.get_context("fork").Process(target=train, args=(dbg, model)) for _ in range(2)]
        for p in ps:
            p.start()
        for p in ps:
            p.join()
        model(torch.ones(2, 4)).sum().backward()
        dbg.stop()
        dbg.step()
        print("done", [p.exitcode for p in ps], flush=True)
    """
)

SIBLINGS_BEFORE_THE_PARENT_DUMPS = textwrap.dedent(
    """
    import sys, torch, multiprocessing as mp
    from msprobe.pytorch import PrecisionDebugger

    dbg = PrecisionDebugger(dump_path=sys.argv[1], task="statistics", level="L1")  # at import

    def train():  # mnist_hogwild's layout: the parent forks its workers before it dumps anything
        model = torch.nn.Linear(4, 1)
        for _ in range(2):
            dbg.start()
            model(torch.ones(3, 4)).sum().backward()
            dbg.stop()
            dbg.step()

    if __name__ == "__main__":
        ps = [mp.get_context("fork").Process(target=train) for _ in range(2)]
        for p in ps:
            p.start()
        for p in ps:
            p.join()
        print("done", [p.exitcode for p in ps], flush=True)
    """
)


def _run(script: str, out: Path, timeout: float = 90) -> str:
    """Run ``script`` in its own session; a hang kills the whole group (workers, encoder helpers)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        start_new_session=True,
    )
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the training hung (killed after {timeout} s)")
    assert proc.returncode == 0, text
    return text


def _no_child_value(rank: Path) -> None:
    """No tensor file holds a child's values (its inputs are all 7.0)."""
    import torch

    for name in os.listdir(rank / "dump_tensor_data"):
        t = torch.load(rank / "dump_tensor_data" / name, weights_only=True)
        assert not (t == 7.0).any(), name


def test_save_in_a_dataloader_worker_neither_hangs_nor_writes(tmp_path: Path) -> None:
    out = _run(SAVE_IN_WORKER, tmp_path / "dump")
    assert "done" in out
    assert "forked child of the dumping process" in out  # said, once per worker
    steps = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert steps == ["step0", "step1"]
    for step in steps:
        rank = tmp_path / "dump" / step / "rank"
        assert sorted(p.name for p in rank.iterdir()) == ["debug.json", "dump_tensor_data"]  # no journal left
        assert list(json.loads((rank / "debug.json").read_text())["data"]) == ["batch.0.debug"]
        _no_child_value(rank)


def test_a_hogwild_worker_calling_start_dumps_nothing(tmp_path: Path) -> None:
    out = _run(HOGWILD, tmp_path / "dump")
    assert "done [0, 0]" in out
    assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == ["step0"]  # the children's steps: none
    rank = tmp_path / "dump" / "step0" / "rank"
    data = json.loads((rank / "dump.json").read_text())["data"]
    assert not any("[3, 4]" in json.dumps(v) for v in data.values())
    _no_child_value(rank)
    assert sorted(p.name for p in rank.iterdir()) == [
        "construct.json",
        "dump.json",
        "dump_tensor_data",
        "stack.json",
    ]


def test_siblings_forked_before_the_parent_dumps_dump_nothing(tmp_path: Path) -> None:
    """Workers forked before their parent dumped would share one folder: one's dump.json overwrote
    the other's (and their journal lock hung Pool workers calling save()). Each says so instead."""
    out = _run(SIBLINGS_BEFORE_THE_PARENT_DUMPS, tmp_path / "dump")
    assert "done [0, 0]" in out
    assert out.count("forked child of the dumping process") == 2
    assert not (tmp_path / "dump").exists() or not any((tmp_path / "dump").iterdir())
