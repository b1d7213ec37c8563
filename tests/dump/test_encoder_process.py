"""The encoder process: the same files as encoding in process, errors reported, nothing lost when it
dies, every handed-over batch journaled when the training process is killed."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msprobe.dump import encoder_process
from msprobe.dump.encoder_process import EncoderProcess
from msprobe.dump.journal import JOURNAL_NAME, read_journal
from msprobe.dump.writer import HANDOFF_RECORDS, RankStore, rebuild
from msprobe.formats.jsonfmt import Summary

REPO = Path(__file__).resolve().parents[2]
HEADER = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None}


@pytest.fixture(autouse=True)
def _own_helper_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper given up on here must not turn the other tests of this process inline."""
    monkeypatch.setattr(encoder_process, "_failed_pid", None)
    monkeypatch.setattr(encoder_process, "_shared", None)


@pytest.fixture
def helper() -> Iterator[EncoderProcess]:
    proc = EncoderProcess()
    yield proc
    proc.stop()


def _summary(mx: float, mn: float) -> Summary:
    return Summary(
        {
            "type": "torch.Tensor",
            "dtype": "torch.float32",
            "shape": [2, 3],
            "Max": mx,
            "Min": mn,
            "Mean": (mx + mn) / 2 if math.isfinite(mx + mn) else mn,
            "Norm": abs(mx),
            "requires_grad": True,
        }
    )


def _records(n: int, first: int = 0) -> list[tuple[str, dict[str, Any]]]:
    specials = [float("nan"), float("inf"), -float("inf"), 1e-310, -0.0, 1 / 3]
    out = []
    for i in range(first, first + n):
        value = {
            "input_args": [_summary(specials[i % 6], -i * 0.25), {"type": "int", "value": i}],
            "input_kwargs": {"dim": {"type": "int", "value": -1}, "name": {"type": "str", "value": 'é\n"'}},
            "output": [_summary(float(i), 0.5), None, [True, False]],
        }
        out.append((f"Torch.op{i % 3}.{i // 3}.forward", value))
    return out


def _fill(store: RankStore, records: list[tuple[str, dict[str, Any]]]) -> None:
    for i, (name, value) in enumerate(records):
        store.put_stack(name, (f'File "m.py", line {i % 4}, in f, \n x()',))
        store.put_construct(name, None if i % 2 else "Module.layer.Linear.forward.0")
        store.put(name, value)


def _files(rank: Path) -> dict[str, bytes]:
    return {name: (rank / name).read_bytes() for name in ("dump.json", "stack.json", "construct.json")}


def test_the_files_are_the_bytes_encoding_in_process_writes(tmp_path: Path, helper: EncoderProcess) -> None:
    records = _records(3 * HANDOFF_RECORDS + 5)
    inline, handed = (
        RankStore(str(tmp_path / "a"), dict(HEADER)),
        RankStore(str(tmp_path / "b"), dict(HEADER), encoder=helper),
    )
    for store in (inline, handed):
        store.open(with_tensor_dir=False)
        _fill(store, records)
        store.put(records[4][0], {"output": ["replaced, in its first place"]})
        store.flush()
    assert handed.encoder is helper  # it was used throughout
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert handed.value(records[7][0]) == inline.value(records[7][0])
    journals = []
    for store in (inline, handed):
        journal = Path(store.rank_dir) / JOURNAL_NAME
        kept = journal.with_suffix(".kept")
        kept.write_bytes(journal.read_bytes())  # the live one is locked by its writer until closed
        journals.append(read_journal(str(kept)))
    assert journals[0] == journals[1]
    handed.close()
    assert not (tmp_path / "b" / JOURNAL_NAME).exists()


def test_records_are_handed_over_in_small_batches_while_nothing_waits_for_a_device(
    tmp_path: Path, helper: EncoderProcess
) -> None:
    store = RankStore(str(tmp_path), dict(HEADER), encoder=helper)
    store.open(with_tensor_dir=False)
    _fill(store, _records(HANDOFF_RECORDS - 1))
    assert len(store._handed) == 0
    store.put("Torch.last.0.forward", {})
    assert len(store._handed) == 1  # handed over without waiting for the 256-record batch

    class OnDevice:
        full = False
        on_device = True

        def resolve(self) -> None:
            pass

    store.pending_values = OnDevice()
    _fill(store, _records(HANDOFF_RECORDS, first=HANDOFF_RECORDS))
    assert len(store._handed) == 1  # a value still on a device: the batch waits (one fetch a batch)
    store.flush()
    assert len(json.loads((tmp_path / "dump.json").read_text())["data"]) == 2 * HANDOFF_RECORDS


def test_errors_are_reported_and_the_other_records_written(tmp_path: Path, helper: EncoderProcess) -> None:
    errors: list[tuple[str, str, str]] = []
    store = RankStore(str(tmp_path), dict(HEADER), encoder=helper)
    store.on_error = lambda what, name, exc: errors.append((what, name, type(exc).__name__))
    store.open(with_tensor_dir=False)
    store.put("a.b.0.forward", {"output": [1]})
    store.put("a.b.1.forward", {"output": [{1, 2}]})  # pickled, but no json: the helper's error
    store.put("a.b.2.forward", {"output": [object()]})  # not even pickled: encoded (and refused) here

    class Local(dict):  # type: ignore[type-arg]
        """A local class cannot be pickled: the record is encoded here and handed over as text."""

    store.put("a.b.3.forward", {"output": [2, Local(a=1)]})
    store.flush()
    assert sorted(errors) == [
        ("encode", "a.b.1.forward", "TypeError"),
        ("encode", "a.b.2.forward", "TypeError"),
    ]
    data = json.loads((tmp_path / "dump.json").read_text())["data"]
    assert data == {"a.b.0.forward": {"output": [1]}, "a.b.3.forward": {"output": [2, {"a": 1}]}}


def test_a_dead_helper_loses_nothing(
    tmp_path: Path, helper: EncoderProcess, caplog: pytest.LogCaptureFixture
) -> None:
    records = _records(2 * HANDOFF_RECORDS + 3)
    store = RankStore(str(tmp_path), dict(HEADER), encoder=helper)
    store.open(with_tensor_dir=False)
    _fill(store, records[: HANDOFF_RECORDS + 1])
    helper.proc.kill()
    helper.proc.wait()
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        _fill(store, records[HANDOFF_RECORDS + 1 :])
        store.flush()
    assert store.encoder is None
    assert any("encoding records in the training process" in r.getMessage() for r in caplog.records)
    assert list(json.loads((tmp_path / "dump.json").read_text())["data"]) == [n for n, _ in records]
    assert list(read_journal(str(tmp_path / JOURNAL_NAME))[1]) == [n for n, _ in records]
    stack = json.loads((tmp_path / "stack.json").read_text())
    assert sorted(n for v in stack.values() for n in v[0]) == sorted(n for n, _ in records)
    store.close()
    assert not (tmp_path / JOURNAL_NAME).exists()


_KILLED = """
import os, signal, sys
from msprobe.dump.encoder_process import EncoderProcess
from msprobe.dump.writer import RankStore
store = RankStore(sys.argv[1], {"task": "statistics"}, encoder=EncoderProcess())
store.open(with_tensor_dir=False)
for i in range(int(sys.argv[2])):
    store.put_stack(f"Torch.tanh.{i}.forward", ("frame",))
    store.put(f"Torch.tanh.{i}.forward", {"output": [{"Max": i * 0.1, "big": "x" * 4000}]})
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_every_batch_handed_over_is_journaled_when_the_training_process_is_killed(tmp_path: Path) -> None:
    n = 10 * HANDOFF_RECORDS + 7  # the last 7 were never handed over
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop(encoder_process.ENV_VAR, None)
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(tmp_path), str(n)], env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    # the helper may still be journaling (each record is 4 kB): rebuild waits for its lock
    assert rebuild(str(tmp_path)) == n - 7
    data = json.loads((tmp_path / "dump.json").read_text())["data"]
    assert list(data) == [f"Torch.tanh.{i}.forward" for i in range(n - 7)]
    assert data[f"Torch.tanh.{n - 8}.forward"]["output"][0]["Max"] == (n - 8) * 0.1


def test_inline_setting_and_forked_children_use_no_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(encoder_process.ENV_VAR, "inline")
    assert encoder_process.shared() is None
    monkeypatch.delenv(encoder_process.ENV_VAR)
    helper = encoder_process.shared()
    assert helper is not None and encoder_process.shared() is helper
    pid = os.fork()
    if pid == 0:  # the forked child must not write into its parent's pipe
        os._exit(0 if encoder_process._shared is None and not helper.alive else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert helper.alive and helper.request(encoder_process.VALUE, "none") == (encoder_process.NO_STORE, [])
    helper.stop()


def test_a_helper_that_cannot_open_the_journal_hands_the_store_back(
    tmp_path: Path, helper: EncoderProcess
) -> None:
    (tmp_path / JOURNAL_NAME).mkdir()  # neither process can write a journal here
    errors: list[tuple[str, str]] = []
    store = RankStore(str(tmp_path), dict(HEADER), encoder=helper)
    store.on_error = lambda what, name, exc: errors.append((what, type(exc).__name__))
    store.open(with_tensor_dir=False)
    assert store.encoder is None and not helper.alive
    assert ("write", "IsADirectoryError") in errors and ("journal", "IsADirectoryError") in errors
    records = _records(3)
    _fill(store, records)
    store.flush()
    assert list(json.loads((tmp_path / "dump.json").read_text())["data"]) == [n for n, _ in records]


_LOCKED_WRITER = """
import sys
from msprobe.dump.journal import Journal
journal = Journal(sys.argv[1], lock=True)
journal.append_raw('{"d":"Torch.a.0.forward","v":{}}')
print("locked", flush=True)
sys.stdin.readline()  # the test says when to write the last line and leave
journal.append_raw('{"d":"Torch.b.0.forward","v":{}}')
"""


def test_reading_a_journal_waits_for_its_writer(tmp_path: Path) -> None:
    import threading

    path = tmp_path / JOURNAL_NAME
    env = dict(os.environ, PYTHONPATH=str(REPO))
    writer = subprocess.Popen(
        [sys.executable, "-c", _LOCKED_WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert writer.stdout is not None and writer.stdin is not None
    try:
        assert writer.stdout.readline().strip() == "locked"
        read: list[list[str]] = []
        reader = threading.Thread(target=lambda: read.append(list(read_journal(str(path))[1])))
        reader.start()
        reader.join(timeout=0.5)  # a reader that ignored the lock would be done by now
        assert reader.is_alive(), "read the journal while its writer held the lock"
        writer.stdin.write("go\n")
        writer.stdin.close()
        assert writer.wait(timeout=60) == 0
        reader.join(timeout=60)
        assert read == [["Torch.a.0.forward", "Torch.b.0.forward"]]
    finally:
        writer.kill()
        writer.wait()


def test_a_batch_the_helper_fails_to_journal_gets_no_answer_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is never answered: when journaling it fails (a full disk), its error goes with the next
    answer. An answer of its own would be read as the next request's, and every request after it would
    read the answer before its own, until the pipe filled and both processes waited forever."""
    import pickle
    import threading

    def full_disk(self: Any, lines: list[str], records: list[Any], errors: list[Any]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(encoder_process._RankFiles, "batch", full_disk)
    to_helper, from_training = os.pipe()
    to_training, from_helper = os.pipe()
    server = threading.Thread(target=encoder_process.serve, args=(to_helper, from_helper))
    server.start()

    def send(kind: int, msg: Any) -> None:
        body = pickle.dumps(msg)
        os.write(from_training, encoder_process._FRAME.pack(len(body), kind) + body)

    send(encoder_process.OPEN, (str(tmp_path / JOURNAL_NAME), json.dumps(HEADER)))
    send(encoder_process.BATCH, (["{}"], []))
    send(encoder_process.VALUE, "Torch.a.0.forward")
    os.close(from_training)  # the helper leaves once it has read everything
    server.join(timeout=60)
    os.close(from_helper)
    replies = []
    while head := encoder_process._read_exactly(to_training, encoder_process._FRAME.size):
        size, kind = encoder_process._FRAME.unpack(head)
        replies.append((kind, pickle.loads(encoder_process._read_exactly(to_training, size) or b"")))
    assert [kind for kind, _ in replies] == [encoder_process.VALUE]
    assert [e[2] for e in replies[0][1][1]] == ["OSError"]  # the batch's error, with the answer
    # named as a store journaling in process names it: a journal failure of the rank folder, not a
    # nameless "write" that the final json files' failure would then be counted under, unsaid
    assert [e[:2] for e in replies[0][1][1]] == [("journal", str(tmp_path))]


@pytest.mark.parametrize("where", ["helper", "in process"])
def test_files_that_cannot_be_written_keep_the_journal(tmp_path: Path, where: str) -> None:
    """A final write that fails (a full disk; here dump.json is a folder) is reported, raises nothing
    into the training, and leaves the journal for ``msprobe rebuild``."""
    helper = EncoderProcess() if where == "helper" else None
    try:
        (tmp_path / "dump.json").mkdir()
        errors: list[tuple[str, str]] = []
        store = RankStore(str(tmp_path), dict(HEADER), encoder=helper)
        store.on_error = lambda what, name, exc: errors.append((what, name))
        store.open(with_tensor_dir=False)
        records = _records(3)
        _fill(store, records)
        store.close()
    finally:
        if helper is not None:
            helper.stop()
    assert ("write", str(tmp_path)) in errors or ("write", os.path.abspath(tmp_path)) in errors, errors
    assert (tmp_path / JOURNAL_NAME).exists()
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]
    (tmp_path / "dump.json").rmdir()
    rebuild(str(tmp_path))
    assert list(json.loads((tmp_path / "dump.json").read_text())["data"]) == [n for n, _ in records]
