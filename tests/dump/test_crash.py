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
from typing import Any

import pytest
import torch

from msprobe import paths
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


@pytest.mark.parametrize("kind", ["link", "fifo", "device"])
def test_rebuild_reads_only_a_journal_that_is_a_regular_file_in_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A journal that is a link (to a file outside the dump: read; to /dev/zero: a line without end,
    MemoryError), a named pipe (waited on forever) or a device is refused in one line, and the folder's
    dump.json is left as it is."""
    outside = tmp_path / "outside.jsonl"
    outside.write_text('{"h":{"task":"statistics"}}\n{"d":"Torch.add.0.forward","v":{}}\n')
    rank = tmp_path / "rank"
    rank.mkdir()
    (rank / "dump.json").write_text('{"data": {"kept": 1}}')
    journal = rank / JOURNAL_NAME
    if kind == "link":
        journal.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(journal)
    else:
        journal.symlink_to("/dev/zero")
    assert msprobe_main(["rebuild", str(rank)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"msprobe: error: {journal}: ") and "refusing to read it" in err and "\n" not in err
    assert (rank / "dump.json").read_text() == '{"data": {"kept": 1}}'


def test_the_crash_check_reads_no_journal_that_is_a_pipe_or_a_link(tmp_path: Path) -> None:
    """The replay's crash check reads every journal under the dump: a named pipe there was waited on
    forever, a link to /dev/zero read without end."""
    pipe = tmp_path / "step0" / "rank0" / JOURNAL_NAME
    link = tmp_path / "step0" / "rank1" / JOURNAL_NAME
    for journal in (pipe, link):
        journal.parent.mkdir(parents=True)
    os.mkfifo(pipe)
    link.symlink_to("/dev/zero")
    for journal in (pipe, link):  # written after them: the dumps ended
        (journal.parent / "dump.json").write_text('{"data": {}}')
    for journal in (pipe, link):
        assert paths.journal_data_file(journal).name == "dump.json"  # no header read
    assert paths.unfinished(tmp_path) == []


def test_the_dump_writes_through_no_link_planted_in_its_folder(tmp_path: Path, debugger: Any) -> None:
    """Links planted at the names of the journal and of a tensor file, leading out of the dump folder:
    the file they lead to was truncated and written (the journal: at every run)."""
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    rank = tmp_path / "dump" / "step0" / "rank"
    (rank / "dump_tensor_data").mkdir(parents=True)
    (rank / JOURNAL_NAME).symlink_to(outside)
    (rank / "dump_tensor_data" / "Torch.relu.0.forward.input.0.pt").symlink_to(outside)
    dbg = debugger(task="tensor")
    dbg.start()
    torch.relu(torch.ones(3))
    dbg.stop()
    assert outside.read_text() == "precious\n"
    assert "Torch.relu.0.forward" in json.loads((rank / "dump.json").read_text())["data"]


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


def test_rebuild_skips_damaged_journal_lines_and_keeps_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A journal is what a crash left: lines that are not our entries (bad bytes, a wrong type, a
    bare string, a stack entry without a number) are counted and skipped, every sound line kept."""
    good = [
        json.dumps({"d": "Torch.exp.0.forward", "v": {"output": []}}),
        json.dumps({"c": "Torch.exp.0.forward", "p": None}),
    ]
    bad = [
        '{"n": "x", "s": "abc"}',
        '{"n": ["unhashable"], "s": 7}',
        '{"h": 5}',
        '"dog"',
        "[1, 2]",
        '{"d": ["unhashable"], "v": 1}',
        '{"x": 1}',  # JSON, but none of our entries
        '{"d": 5, "v": 1}',
        '{"c": ["unhashable"], "p": null}',
        '{"n": "y", "s": Infinity}',
        '{"n": "z", "s": 3, "f": [null]}',  # frames stack.json's reader would refuse
        '{"c": "Torch.exp.1.forward", "p": 5}',  # a parent that is no record name
    ]
    # a damaged byte inside a name: read leniently it was a record named "Torch.ex\ufffdp.1.forward"
    flipped = json.dumps({"d": "Torch.exXp.1.forward", "v": {}}).encode().replace(b"X", b"\xe9")
    raw = "\n".join([good[0], *bad, good[1]]).encode() + b"\n\xff\xfe garbage\n" + flipped + b"\n"
    (tmp_path / JOURNAL_NAME).write_bytes(raw)
    with caplog.at_level("WARNING", logger="msprobe"):
        _header, data, stack, construct = read_journal(str(tmp_path / JOURNAL_NAME))
    assert data == {"Torch.exp.0.forward": {"output": []}}
    assert stack == {}  # nothing half-added by a damaged stack entry
    assert construct == {"Torch.exp.0.forward": None}
    assert "14 damaged line(s) skipped" in caplog.text


def test_rebuild_keeps_the_records_around_one_too_deep_to_write_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value nested about as deep as Python recurses can be read back and not encoded again: the
    RecursionError ended the rebuild, with no dump.json, the sound records lost with it. (Which depth
    does that depends on the stack the call runs on, so the encoder is made to refuse one record.)"""
    import msprobe.dump.writer as writer

    encode = writer.encode_record

    def refusing(value: Any) -> Any:
        if value == {"deep": True}:
            raise RecursionError("maximum recursion depth exceeded")
        return encode(value)

    monkeypatch.setattr(writer, "encode_record", refusing)
    lines = [
        json.dumps({"d": "Torch.exp.0.forward", "v": {"output": []}}),
        json.dumps({"d": "Torch.deep.0.forward", "v": {"deep": True}}),
        json.dumps({"d": "Torch.exp.1.forward", "v": {"output": []}}),
    ]
    (tmp_path / JOURNAL_NAME).write_text("\n".join(lines) + "\n")
    assert msprobe_main(["rebuild", str(tmp_path)]) == 0
    assert list(json.loads((tmp_path / "dump.json").read_text())["data"]) == [
        "Torch.exp.0.forward",
        "Torch.exp.1.forward",
    ]


FORKING_CHILD = textwrap.dedent(
    """
    import os, sys, torch
    from msprobe.pytorch import PrecisionDebugger
    torch.manual_seed(0)
    dbg = PrecisionDebugger(dump_path=sys.argv[1], task="tensor", level="mix")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    dbg.start(model=model)
    model(torch.ones(2, 4)).sum().backward()
    if sys.argv[2] == "fork":
        pid = os.fork()
        if pid == 0:  # a Hogwild-style worker: trains on its own batch, then exits normally
            model(torch.full((3, 4), 7.0)).sum().backward()
            sys.exit(0)
        os.waitpid(pid, 0)
    model(torch.ones(2, 4)).sum().backward()
    dbg.stop()  # every record journaled
    os.kill(os.getpid(), 9)  # a crash before step() writes the json files: rebuilt from the journal
    """
)


def _crashed_forking_run(out: Path, mode: str) -> dict[str, object]:
    """The records of a FORKING_CHILD run rebuilt after its crash; every tensor file checked to hold
    the parent's values only."""
    proc = subprocess.run(
        [sys.executable, "-c", FORKING_CHILD, str(out), mode], env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    assert proc.returncode == -signal.SIGKILL
    rank = out / "step0" / "rank"
    assert (rank / JOURNAL_NAME).exists()  # the child's exit left it
    assert msprobe_main(["rebuild", str(rank)]) == 0
    data: dict[str, object] = json.loads((rank / "dump.json").read_text())["data"]
    assert not any("[3, 4]" in json.dumps(v) for v in data.values())
    for name in os.listdir(rank / "dump_tensor_data"):
        t = torch.load(rank / "dump_tensor_data" / name, weights_only=True)
        assert not (t == 7.0).any() and 3 not in t.shape, name
    return data


def test_a_forked_child_never_writes_into_the_parents_dump(tmp_path: Path) -> None:
    """A forked child inherits the dump's hooks and its exit handler; its records, its tensor files
    and its normal exit (which wrote its own dump.json and removed the parent's journal) are not the
    parent's: after the parent's crash, the rebuilt dump is the one made without the child."""
    forked = _crashed_forking_run(tmp_path / "fork", "fork")
    assert list(forked) == list(_crashed_forking_run(tmp_path / "control", "control"))


def test_a_rebuild_gives_the_open_calls_named_as_parents_their_entries(tmp_path: Path) -> None:
    """A crash inside nested modules ends none of them: the ones named as parents get the entries their
    opening journaled, those not named get none, and an ended call keeps its ending's entry."""
    store = _store(tmp_path, batch_records=1)
    store.put_opened("Module.0.Outer.forward.0", None)
    store.put_opened("Module.0.a.Inner.forward.0", "Module.0.Outer.forward.0")
    store.put_opened("Module.0.b.Leaf.forward.0", "Module.0.Outer.forward.0")
    store.put_construct("Module.0.b.Leaf.forward.0", "Module.0.Outer.forward.0")
    store.put_opened("Module.0.c.Unnamed.forward.0", "Module.0.Outer.forward.0")
    store.put_construct("Torch.tanh.0.forward", "Module.0.a.Inner.forward.0")
    store.put("Torch.tanh.0.forward", {})
    construct = read_journal(str(tmp_path / JOURNAL_NAME))[3]
    assert construct == {
        "Module.0.b.Leaf.forward.0": "Module.0.Outer.forward.0",
        "Torch.tanh.0.forward": "Module.0.a.Inner.forward.0",
        "Module.0.a.Inner.forward.0": "Module.0.Outer.forward.0",
        "Module.0.Outer.forward.0": None,
    }


NESTED_CRASH = textwrap.dedent(
    """
    import os, sys, torch, torch.nn as nn
    from msprobe.pytorch import PrecisionDebugger

    class Inner(nn.Module):
        def forward(self, x):
            for _ in range(int(sys.argv[2])):  # more than a batch: these records reach the journal
                x = torch.tanh(x)
            os._exit(1)  # as the OOM killer would: no module call ends

    net = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), Inner()))
    dbg = PrecisionDebugger(dump_path=sys.argv[1], task="statistics", level="mix")
    dbg.start(model=net)
    net(torch.randn(2, 4))
    """
)


@pytest.mark.slow
def test_a_rebuild_after_a_crash_inside_modules_names_only_parents_it_holds(tmp_path: Path) -> None:
    out = tmp_path / "dump"
    proc = subprocess.run(
        [sys.executable, "-c", NESTED_CRASH, str(out), str(BATCH_RECORDS + 10)],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert msprobe_main(["rebuild", str(out)]) == 0
    construct = json.loads((out / "step0" / "rank" / "construct.json").read_text())
    assert construct["Torch.tanh.0.forward"] == "Module.1.1.Inner.forward.0"
    assert construct["Module.1.1.Inner.forward.0"] == "Module.1.Sequential.forward.0"
    assert construct["Module.1.Sequential.forward.0"] is None
    assert all(parent is None or parent in construct for parent in construct.values())


@pytest.mark.parametrize("where", ["helper", "in process"])
def test_a_new_run_does_not_merge_the_journal_an_earlier_crash_left(tmp_path: Path, where: str) -> None:
    """A crashed run's journal, never rebuilt; the rerun into the same dump_path crashes too. Its
    rebuild must hold the rerun's records only: the rerun appended to the old journal, so the records
    it had not reached came back from the earlier run, with that run's values."""
    from msprobe.dump.encoder_process import EncoderProcess

    (tmp_path / JOURNAL_NAME).write_text(
        '{"h":{"task":"tensor"}}\n{"d":"Torch.new.0.forward","v":{"old":1}}\n{"d":"Torch.old.0.forward","v":{}}\n'
    )
    helper = EncoderProcess() if where == "helper" else None
    try:
        store = RankStore(str(tmp_path), {"task": "statistics"}, encoder=helper)
        store.open(with_tensor_dir=False)
        store.put("Torch.new.0.forward", {"output": []})
        store.flush()
    finally:
        if helper is not None:
            helper.stop()  # as the crash would: the helper journals what it was given and leaves
    header, data, _stack, _construct = read_journal(str(tmp_path / JOURNAL_NAME))
    assert header == {"task": "statistics"}
    assert data == {"Torch.new.0.forward": {"output": []}}


def test_a_rebuild_waits_for_a_dump_journaling_in_process(tmp_path: Path) -> None:
    """With MSPROBE_DUMP_ENCODER=inline (or once the helper died) the training process journals itself.
    A rebuild run meanwhile waits for the step's end, as it waits for the helper: it wrote the files
    from a journal without the pending records, over the final ones if the step ended first."""
    store = RankStore(str(tmp_path), {"task": "statistics"})
    store.open(with_tensor_dir=False)
    store.put("a.b.0.forward", {"output": []})
    store.write_batch()
    store.put("a.b.1.forward", {"output": []})  # pending: not journaled yet
    proc = subprocess.Popen(
        [sys.executable, "-m", "msprobe", "rebuild", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        assert proc.stderr is not None
        assert "waiting for the process still writing" in proc.stderr.readline()
        store.close()
        proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert json.loads((tmp_path / "dump.json").read_text())["data"] == {
        "a.b.0.forward": {"output": []},
        "a.b.1.forward": {"output": []},
    }


def test_a_forked_child_does_not_keep_the_journal_lock(tmp_path: Path) -> None:
    """A forked child (a DataLoader worker) closes its copy of the locked journal: once the training
    process closes it (or dies), a rebuild does not wait for the child."""
    import fcntl

    store = RankStore(str(tmp_path), {"task": "statistics"})
    store.open(with_tensor_dir=False)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            import time

            os.write(ready_w, b"x")  # the fork handlers have run
            time.sleep(5)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"x"
        assert store.journal is not None
        store.journal.close(remove=False)  # as the training process's death would
        with open(tmp_path / JOURNAL_NAME) as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)  # raises while the child holds it
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_rebuild_leaves_a_dump_that_ended_while_it_waited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`msprobe rebuild ROOT` lists the journals, then waits for the writer of one of them; another dump
    (another rank) that ends cleanly meanwhile removes its journal. Its final files stay as they are
    and the rebuild goes on (it ended in a FileNotFoundError traceback)."""
    import msprobe.dump.cli as dump_cli

    crashed, ended = tmp_path / "a", tmp_path / "b"
    crashed.mkdir()
    ended.mkdir()
    (crashed / JOURNAL_NAME).write_text(json.dumps({"d": "Torch.exp.0.forward", "v": {"output": []}}) + "\n")
    (ended / "dump.json").write_text("final")
    monkeypatch.setattr(dump_cli, "find_journals", lambda root: [str(crashed), str(ended)])
    assert msprobe_main(["rebuild", str(tmp_path)]) == 0
    assert (ended / "dump.json").read_text() == "final"
    assert "ended cleanly" in capsys.readouterr().out
    assert list(json.loads((crashed / "dump.json").read_text())["data"]) == ["Torch.exp.0.forward"]


def test_a_rerun_says_whether_the_journal_it_replaces_was_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crashed run's journal stays after ``msprobe rebuild``: a rerun into that step folder must not
    call it 'never rebuilt' (it was), and says the rebuilt dump.json is written over too."""
    journal = tmp_path / JOURNAL_NAME
    journal.write_text('{"h":{"task":"statistics"}}\n{"d":"Torch.old.0.forward","v":{}}\n')
    old = journal.stat().st_mtime_ns - 10**9
    os.utime(journal, ns=(old, old))
    assert rebuild(str(tmp_path)) == 1  # dump.json now newer than the journal: rebuilt

    def rerun() -> str:
        caplog.clear()
        store = RankStore(str(tmp_path), {"task": "statistics"})
        with caplog.at_level("WARNING"):
            store.open(with_tensor_dir=False)
        store.put("Torch.new.0.forward", {"output": []})
        os.utime(tmp_path / "dump.json", ns=(old - 10**9, old - 10**9))  # as a crash would leave it
        store.write_batch()
        assert store.journal is not None
        store.journal.close(remove=False)  # the process 'crashes': the journal stays
        return caplog.text

    said = rerun()
    assert "never rebuilt" not in said
    assert "(rebuilt)" in said and "dump.json rebuilt from it" in said
    # the same folder crashed again, not rebuilt this time: the warning says so
    said = rerun()
    assert "never rebuilt" in said


DEBUG_CHILD = textwrap.dedent(
    """
    import sys, time, torch
    from msprobe.pytorch import PrecisionDebugger
    dbg = PrecisionDebugger(dump_path=sys.argv[1], task="statistics", level="debug")
    dbg.start()
    for i in range(int(sys.argv[2])):
        dbg.save(torch.arange(6.0) + i, f"x{i}")
    print("done", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.slow
def test_a_crashed_debug_level_dump_is_rebuilt_into_its_debug_json(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Level debug writes debug.json alone: its rebuild must fill that file (it wrote the records into
    a dump.json beside the empty debug.json), and a rerun's warning must see it was rebuilt."""
    out = tmp_path / "dump"
    n = 300
    kill_when_ready(DEBUG_CHILD, out, n, PYTHONPATH=str(REPO))
    rank = out / "step0" / "rank"
    assert msprobe_main(["rebuild", str(out)]) == 0
    assert sorted(p.name for p in rank.iterdir()) == [JOURNAL_NAME, "debug.json"]
    doc = json.loads((rank / "debug.json").read_text())
    names = list(doc["data"])
    assert names == [f"x{i}.0.debug" for i in range(len(names))] and len(names) > n - BATCH_RECORDS
    assert doc["data"]["x3.0.debug"]["Max"] == 8.0
    assert paths.unfinished(out) == []  # rebuilt: replay and others do not send the user to rebuild again
    store = RankStore(str(rank), {"task": "statistics", "level": "debug"}, "debug.json")
    with caplog.at_level("WARNING"):
        store.open(with_tensor_dir=False)
    assert "(rebuilt)" in caplog.text and "debug.json rebuilt from it" in caplog.text
    store.close()


def test_a_rebuilt_debug_journal_beside_an_earlier_dump_json_is_not_a_crash(tmp_path: Path) -> None:
    """A folder holding the complete dump.json of an earlier L1 run and the journal of a level-debug
    run that crashed: once rebuilt into debug.json, the folder is finished (the crash test looked at
    dump.json, older than the journal, so the replay of that dump.json kept sending the user to
    ``msprobe rebuild`` however often it ran)."""
    rank = tmp_path / "step0" / "rank"
    rank.mkdir(parents=True)
    l1 = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None}
    (rank / "dump.json").write_text(json.dumps({**l1, "data": {"Torch.matmul.0.forward": {}}}))
    os.utime(rank / "dump.json", ns=(1, 1))  # written before the debug run
    header = {"task": "statistics", "level": "debug", "framework": "pytorch", "dump_data_dir": None}
    journal = rank / JOURNAL_NAME
    journal.write_text(json.dumps({"h": header}) + "\n" + '{"d":"x0.0.debug","v":{"type":"torch.Tensor"}}\n')
    (rank / "debug.json").write_text(json.dumps({**header, "data": {}}))
    os.utime(rank / "debug.json", ns=(2, 2))  # the empty one the debug run wrote as it opened
    assert paths.unfinished(tmp_path) == [str(rank)]  # crashed: its debug.json holds nothing
    assert rebuild(str(rank)) == 1
    assert json.loads((rank / "dump.json").read_text())["data"] == {"Torch.matmul.0.forward": {}}
    assert paths.unfinished(tmp_path) == []
    assert paths.unfinished(rank / "dump.json") == []


def test_a_headerless_journal_is_rebuilt_into_the_file_the_crash_check_reads(tmp_path: Path) -> None:
    """A journal without its header line, beside the empty debug.json of the run that crashed: the crash
    check reads debug.json, so the rebuild must fill that file (it wrote a dump.json, and the folder
    stayed unfinished however often it was rebuilt)."""
    rank = tmp_path / "step0" / "rank"
    rank.mkdir(parents=True)
    (rank / "debug.json").write_text(json.dumps({"task": "statistics", "level": "debug", "data": {}}))
    os.utime(rank / "debug.json", ns=(1, 1))
    (rank / JOURNAL_NAME).write_text('{"d":"x0.0.debug","v":{"type":"torch.Tensor","Max":1.0}}\n')
    assert paths.unfinished(tmp_path) == [str(rank)]
    assert rebuild(str(rank)) == 1
    assert sorted(p.name for p in rank.iterdir()) == [JOURNAL_NAME, "debug.json"]
    assert json.loads((rank / "debug.json").read_text())["data"]["x0.0.debug"]["Max"] == 1.0
    assert paths.unfinished(tmp_path) == []


@pytest.mark.parametrize(
    ("old_level", "old_file", "new_level", "new_file"),
    [("L1", "dump.json", "debug", "debug.json"), ("debug", "debug.json", "L1", "dump.json")],
)
def test_a_rerun_of_another_level_says_the_rebuilt_file_stays(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    old_level: str,
    old_file: str,
    new_level: str,
    new_file: str,
) -> None:
    """A crashed run's journal, rebuilt into its level's file; a rerun of the other level writes the
    other file: the warning must not say the rebuilt one is written over (it stays, unchanged)."""
    journal = tmp_path / JOURNAL_NAME
    journal.write_text(
        json.dumps({"h": {"task": "statistics", "level": old_level}})
        + '\n{"d":"Torch.old.0.forward","v":{}}\n'
    )
    old = journal.stat().st_mtime_ns - 10**9
    os.utime(journal, ns=(old, old))
    assert rebuild(str(tmp_path)) == 1
    rebuilt = (tmp_path / old_file).read_text()
    store = RankStore(str(tmp_path), {"task": "statistics", "level": new_level}, new_file)
    with caplog.at_level("WARNING"):
        store.open(with_tensor_dir=False)
    store.put("x.0.debug", {"type": "int", "value": 1})
    store.close()
    assert "(rebuilt)" in caplog.text
    assert (
        f"and so is the {old_file}" not in caplog.text
        and f"the {old_file} rebuilt from it stays" in caplog.text
    )
    assert (tmp_path / old_file).read_text() == rebuilt


PIPE_WORKER = textwrap.dedent(
    """
    import json, os, sys, torch
    from msprobe.pytorch import PrecisionDebugger
    dbg = PrecisionDebugger(config_path=sys.argv[1])
    dbg.start()
    torch.relu(torch.ones(3))
    dbg.stop()
    """
)


def test_the_dump_waits_on_no_pipe_planted_at_a_tensor_file_name(tmp_path: Path) -> None:
    """A named pipe planted at a tensor file's name (as a link is): opening it to write waited for a
    reader for ever, so stop() never returned. It is refused, an error of its record."""
    rank = tmp_path / "dump" / "step0" / "rank"
    (rank / "dump_tensor_data").mkdir(parents=True)
    os.mkfifo(rank / "dump_tensor_data" / "Torch.relu.0.forward.input.0.pt")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "tensor", "dump_path": str(tmp_path / "dump"), "level": "L1"}))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    try:
        done = subprocess.run(
            [sys.executable, "-c", PIPE_WORKER, str(cfg)], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the dump waited on the pipe planted at a tensor file's name")
    assert done.returncode == 0, done.stderr
    assert "Torch.relu.0.forward" in json.loads((rank / "dump.json").read_text())["data"]
    assert "Torch.relu.0.forward" in (rank / "dump_error_info.log").read_text()
