"""Crash safety: a dump killed with SIGKILL keeps every batch of records it wrote (journal +
``msprobe rebuild``): all but fewer than ``BATCH_RECORDS`` last records, none older than
``BATCH_SECONDS`` before the last one stored."""

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
from msprobe.dump.writer import BATCH_RECORDS, RankStore, rebuild

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
def test_sigkill_keeps_every_batch_written(tmp_path: Path) -> None:
    n = 400  # 800 records: three full batches, and the kill lands after the last record
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
    assert names == expect[: len(names)]  # the records of the batches written, in order
    assert len(names) > len(expect) - BATCH_RECORDS
    assert dump["task"] == "tensor" and dump["dump_data_dir"] == str(rank / "dump_tensor_data")
    last = dump["data"][names[-1]]
    t = torch.load(rank / "dump_tensor_data" / last["output"][0]["data_name"], weights_only=True)
    assert float(t.max()) == last["output"][0]["Max"]
    stack = json.loads((rank / "stack.json").read_text())
    assert set(names) <= {n for v in stack.values() for n in v[0]}  # a record's stack comes with it


def _store(tmp_path: Path, **batching: float) -> RankStore:
    store = RankStore(str(tmp_path), {"task": "statistics"}, **batching)  # type: ignore[arg-type]
    store.open(with_tensor_dir=False)
    return store


def _journaled(tmp_path: Path) -> list[str]:
    return list(read_journal(str(tmp_path / JOURNAL_NAME))[1])


def test_a_batch_is_written_when_full_or_old_enough(tmp_path: Path) -> None:
    now = [100.0]
    store = _store(tmp_path, batch_records=3, batch_seconds=0.5)
    store.clock = lambda: now[0]
    store.put("a.b.0.forward", {})
    store.put("a.b.1.forward", {})
    assert _journaled(tmp_path) == []
    store.put("a.b.2.forward", {})  # the third record fills the batch
    assert _journaled(tmp_path) == ["a.b.0.forward", "a.b.1.forward", "a.b.2.forward"]
    store.put("a.b.3.forward", {})
    now[0] += 0.4
    store.put("a.b.4.forward", {})
    assert len(_journaled(tmp_path)) == 3
    now[0] += 0.1  # the oldest pending record is 0.5 s old when the next one is stored
    store.put("a.b.5.forward", {})
    assert len(_journaled(tmp_path)) == 6
    store.put("a.b.6.forward", {})
    store.flush()  # stop/step: everything
    assert len(_journaled(tmp_path)) == 7


def test_a_batch_of_one_writes_every_record_at_once(tmp_path: Path) -> None:
    store = _store(tmp_path, batch_records=1)
    store.put_stack("a.b.0.forward", ("File a, line 1, in f, \n x()",))
    store.put("a.b.0.forward", {"output": []})
    assert _journaled(tmp_path) == ["a.b.0.forward"]
    assert read_journal(str(tmp_path / JOURNAL_NAME))[2]  # the stack line went with it


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    store = RankStore(
        str(tmp_path), {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None}
    )
    store.open(with_tensor_dir=False)
    store.put("Torch.relu.0.forward", {"input_args": [], "input_kwargs": {}, "output": [None]})
    store.put_stack("Torch.relu.0.forward", ("File a, line 1, in f, \n x()",))
    store.put_construct("Torch.relu.0.forward", None)
    store.put("Torch.relu.0.forward", {"input_args": [1], "input_kwargs": {}, "output": [None]})  # replaces
    store.write_batch()
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


def test_a_record_that_cannot_be_encoded_is_reported_and_the_batch_written(tmp_path: Path) -> None:
    errors: list[tuple[str, str, str]] = []
    store = _store(tmp_path)
    store.on_error = lambda what, name, exc: errors.append((what, name, type(exc).__name__))
    store.put("a.b.0.forward", {"output": [1]})
    store.put("a.b.1.forward", {"output": [object()]})  # nothing json can write
    store.put("a.b.2.forward", {"output": [2]})
    store.flush()
    assert errors == [("encode", "a.b.1.forward", "TypeError")]
    assert list(json.loads((tmp_path / "dump.json").read_text())["data"]) == [
        "a.b.0.forward",
        "a.b.2.forward",
    ]
    assert _journaled(tmp_path) == ["a.b.0.forward", "a.b.2.forward"]


def test_a_failed_fetch_of_statistics_is_reported_and_the_records_written(tmp_path: Path) -> None:
    class Broken:
        full = False

        def resolve(self) -> None:
            raise RuntimeError("device lost")

    errors: list[tuple[str, str]] = []
    store = _store(tmp_path)
    store.on_error = lambda what, name, exc: errors.append((what, str(exc)))
    store.pending_values = Broken()
    store.put("a.b.0.forward", {"output": [{"Max": None}]})
    store.flush()
    assert errors == [("statistics", "device lost")]
    assert list(json.loads((tmp_path / "dump.json").read_text())["data"]) == ["a.b.0.forward"]
