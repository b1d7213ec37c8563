"""Forked children and the MindSpore dump (each case in its own interpreter: a forked child of a process
that ran MindSpore ops cannot run ops itself, so the cases fork a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PRELUDE = """
import glob, json, os, signal, sys
import multiprocessing as mp
import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops
from msprobe.mindspore import PrecisionDebugger

ms.set_context(mode=ms.PYNATIVE_MODE)
out, level, task = sys.argv[1:4]
cfg = {"task": task, "dump_path": out, "rank": [], "step": [], "level": level, task: {}}
json.dump(cfg, open(out + "_cfg.json", "w"))
net = nn.Dense(4, 3)
x = Tensor(np.arange(8, dtype=np.float32).reshape(2, 4))
dbg = PrecisionDebugger(config_path=out + "_cfg.json")
files = lambda: sorted(p[len(out):] for p in glob.glob(out + "/**", recursive=True))

def fork_child(body):
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)  # a hung child ends (SIGALRM) instead of outliving the test
        try:
            body()
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]
"""

CASES = {
    # a Hogwild-style child calls the debugger in the middle of the parent's window (queued statistics)
    "window": """
dbg.start(net)
net(x).sum()
before = files()
def body():
    dbg.stop(); dbg.step(); dbg.start(net); dbg.stop(); dbg.step()
status = fork_child(body)
dbg.stop()
print(json.dumps({"status": status, "added": sorted(set(files()) - set(before)),
                  "records": len(json.load(open(out + "/step0/rank/dump.json"))["data"])}))
""",
    # a worker's save() at level debug, task tensor
    "save": """
dbg.save(x, "x")
before = files()
def body():
    dbg.save(x, "x"); dbg.save(x, "only_child")
status = fork_child(body)
dbg.save(x, "x")
dbg.step()
print(json.dumps({"status": status, "added": sorted(set(files()) - set(before)),
                  "records": len(json.load(open(out + "/step0/rank/debug.json"))["data"])}))
""",
    # the debugger made in the parent, a worker forked before the parent dumped anything
    "trainer": """
def train():
    signal.alarm(60)
    for _ in range(2):
        dbg.start(net)
        net(x).sum()
        dbg.stop()
        dbg.step()
p = mp.get_context("fork").Process(target=train)
p.start(); p.join()
recs = [len(json.load(open(f))["data"]) for f in sorted(glob.glob(out + "/step*/rank/dump.json"))]
print(json.dumps({"status": p.exitcode, "added": [], "records": recs}))
""",
}


def _run(tmp_path: Path, case: str, level: str, task: str) -> tuple[dict, str]:
    script = tmp_path / "case.py"
    script.write_text(PRELUDE + textwrap.dedent(CASES[case]))
    out = str(tmp_path / "dump")
    env = dict(os.environ, GLOG_v="3")
    proc = subprocess.run(
        [sys.executable, str(script), out, level, task], env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_a_forked_child_calling_stop_and_step_in_the_window_neither_hangs_nor_writes(tmp_path, level):
    """The child's stop() read its parent's queued tensors (hung: MindSpore's runtime does not survive
    a fork) and its step()/start() made the parent's next step folder; now it dumps nothing, said once."""
    got, err = _run(tmp_path, "window", level, "statistics")
    assert got["status"] == 0  # not killed by the child's alarm
    assert got["added"] == []
    assert got["records"] > 0
    assert err.count("is a forked child of the dumping process") == 1


def test_a_forked_child_save_writes_no_tensor_file_into_the_parents_folder(tmp_path):
    """save() in a forked worker at level debug, task tensor, wrote its .npy files beside its parent's
    (an orphan file, and one with the name of the parent's next save, overwritten by whichever wrote last)."""
    got, err = _run(tmp_path, "save", "debug", "tensor")
    assert got["status"] == 0
    assert got["added"] == ["/step0/rank/dump_tensor_data/x.1.debug.npy"]  # the parent's own next save
    assert "is a forked child of the dumping process" in err


def test_workers_forked_before_the_parent_dumps_dump_nothing(tmp_path):
    """The debugger made at import, workers forked before the parent dumped anything: siblings would
    share one folder (one's dump.json replacing the other's), so each dumps nothing and says so."""
    got, err = _run(tmp_path, "trainer", "L1", "statistics")
    assert got["status"] == 0
    assert got["records"] == []
    assert err.count("is a forked child of the dumping process") == 1
