"""Crash safety: a dump killed with SIGKILL keeps every record it made (journal + ``msprobe rebuild``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from msprobe.cli import main as msprobe_main
from msprobe.dump.journal import JOURNAL_NAME, read_journal
from msprobe.dump.writer import RankStore, rebuild

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys, time, torch
    from msprobe.pytorch import PrecisionDebugger
    dbg = PrecisionDebugger(dump_path=sys.argv[1], task="tensor", level="L1")
    n = int(sys.argv[2])
    x = torch.arange(6.0).reshape(2, 3)
    dbg.start()
    for i in range(n):
        x = torch.tanh(x) + i
    print("done", flush=True)
    time.sleep(600)
    """
)


def kill_when_ready(child: str, out: Path, n: int, **env: str) -> None:
    """Run ``child`` (a dumping script taking OUT and N), SIGKILL it once it prints ``done``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", child, str(out), str(n)],
        stdout=subprocess.PIPE,
        env=dict(os.environ, **env),
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "done"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_sigkill_keeps_every_record(tmp_path: Path) -> None:
    n = 25
    out = tmp_path / "dump"
    kill_when_ready(CHILD, out, n, PYTHONPATH=str(REPO))
    rank = out / "step0" / "rank"
    assert (rank / JOURNAL_NAME).exists()
    assert json.loads((rank / "dump.json").read_text())["data"] == {}  # nothing flushed before the kill
    assert msprobe_main(["rebuild", str(out)]) == 0
    dump = json.loads((rank / "dump.json").read_text())
    names = list(dump["data"])
    expect = []
    for i in range(n):
        expect += [f"Torch.tanh.{i}.forward", f"Tensor.__add__.{i}.forward"]
    assert names == expect
    assert dump["task"] == "tensor" and dump["dump_data_dir"] == str(rank / "dump_tensor_data")
    last = dump["data"][f"Tensor.__add__.{n - 1}.forward"]
    t = torch.load(rank / "dump_tensor_data" / last["output"][0]["data_name"], weights_only=True)
    assert float(t.max()) == last["output"][0]["Max"]
    stack = json.loads((rank / "stack.json").read_text())
    assert sum(len(v[0]) for v in stack.values()) == 2 * n


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    store = RankStore(
        str(tmp_path), {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None}
    )
    store.open(with_tensor_dir=False)
    store.put("Torch.relu.0.forward", {"input_args": [], "input_kwargs": {}, "output": [None]})
    store.put_stack("Torch.relu.0.forward", ("File a, line 1, in f, \n x()",))
    store.put_construct("Torch.relu.0.forward", None)
    store.put("Torch.relu.0.forward", {"input_args": [1], "input_kwargs": {}, "output": [None]})  # replaces
    assert store.journal is not None
    store.journal.append_raw('{"d":"Torch.relu.1.forward","v":{"input_ar')  # the kill hit mid-line
    with open(tmp_path / JOURNAL_NAME, "a") as fh:
        fh.write('{"d":"X.y.0.forward","v":{}')  # torn: no newline
    header, data, stack, construct = read_journal(str(tmp_path / JOURNAL_NAME))
    assert header["task"] == "statistics"
    assert list(data) == ["Torch.relu.0.forward"] and data["Torch.relu.0.forward"]["input_args"] == [1]
    assert stack == {"0": [["Torch.relu.0.forward"], ["File a, line 1, in f, \n x()"]]}
    assert construct == {"Torch.relu.0.forward": None}
    assert rebuild(str(tmp_path)) == 1


def test_clean_end_removes_journal(tmp_path: Path) -> None:
    store = RankStore(str(tmp_path), {"task": "statistics"})
    store.open(with_tensor_dir=False)
    store.put("a.b.0.forward", {"output": []})
    store.close()
    assert not (tmp_path / JOURNAL_NAME).exists()
    assert json.loads((tmp_path / "dump.json").read_text()) == {
        "task": "statistics",
        "data": {"a.b.0.forward": {"output": []}},
    }


def test_rebuild_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert msprobe_main(["rebuild", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("msprobe: error: ") and "no journal" in err and "\n" not in err
    assert msprobe_main(["rebuild", str(tmp_path / "missing")]) == 2
