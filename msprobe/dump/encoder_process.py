"""Record encoding in a helper process, so that the training thread never formats JSON.

Encoding a record as dump.json text (a few dozen floats printed in their shortest form) costs several
times more host time than handing the record over as a pickle, and the training thread has better
things to do. A :class:`~msprobe.dump.writer.RankStore` given an :class:`EncoderProcess` pickles each
batch of records (their statistics already fetched) and writes it to this helper's standard input.
The helper encodes the records, appends them to the rank folder's journal and keeps their texts; at
every flush it writes dump.json, stack.json and construct.json and answers, so the files are complete
when ``stop()``/``step()`` return.

Guarantees:

* **Crash**: a batch handed over is journaled even if the training process is killed right after (the
  helper reads its input to the end; it ignores SIGINT and leaves with the last byte). The helper
  holds an exclusive ``flock`` on the journal while it may still write to it, and ``msprobe rebuild``
  waits for that lock, so a rebuild never reads a journal that is still growing.
* **Nothing is lost**: the store keeps the pickled batches of its step. If the helper cannot be
  started, dies, or stops answering, the store encodes those batches itself and carries on in the
  training process (one warning line), as it does when ``MSPROBE_DUMP_ENCODER=inline`` is set.
* **Same bytes**: the helper runs the same encoder, so the files equal the in-process ones.

The helper imports neither torch nor numpy: records are plain dicts, lists, strings and numbers.
One helper serves every store of a process, one store at a time; a forked child of the training
process (a DataLoader worker) closes its copy of the pipe and never talks to it.

Run as ``python -m msprobe.dump.encoder_process`` by :class:`EncoderProcess`, never by hand.
"""

from __future__ import annotations

import atexit
import builtins
import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from msprobe.dump.journal import Journal, data_line
from msprobe.formats.dump_json import encode_record, write_rank_files

log = logging.getLogger("msprobe")

ENV_VAR = "MSPROBE_DUMP_ENCODER"  # "inline": encode in the training process
REPLY_TIMEOUT_S = 300.0  # a flush of a very large step writes big files; a helper this late is stuck
_FRAME = struct.Struct(">IB")  # payload length, message kind
OPEN, BATCH, FLUSH, CLOSE, VALUE = b"OBFCV"
ErrorInfo = tuple[str, str, str, str]  # (what, record, exception type, message)
NO_STORE = "\0no rank folder open"  # the answer when OPEN failed: the training process takes over


class Encoded:
    """A record value the training process encoded itself (it could not be pickled)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def encode_records(
    records: list[tuple[str, Any]],
    texts: dict[str, str],
    lines: list[str],
    failed: Callable[[str, Exception], None],
) -> None:
    """Encode ``records`` (an :class:`Encoded` value is already text) into ``texts`` and their
    journal lines onto ``lines``; a record that cannot be encoded goes to ``failed`` and is left out.
    The one encoding loop of the helper and of a store encoding in process."""
    for name, value in records:
        try:
            text = value.text if type(value) is Encoded else encode_record(value)
        except Exception as exc:
            failed(name, exc)
            continue
        texts[name] = text
        lines.append(data_line(name, text))


def as_exception(info: ErrorInfo) -> BaseException:
    """An error the helper reported, as an exception of the same builtin type where there is one."""
    _, _, kind, message = info
    cls = getattr(builtins, kind, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:
            pass
    return RuntimeError(f"{kind}: {message}")


# -- the helper ----------------------------------------------------------------------------------------
class _RankFiles:
    """The helper's side of one store: its journal and its records' texts."""

    def __init__(self, journal_path: str, header_line: str) -> None:
        self.journal = Journal(journal_path, lock=True, fresh=True)
        self.journal.append_raw(header_line)
        self.records: dict[str, str] = {}

    def batch(self, lines: list[str], records: list[tuple[str, Any]], errors: list[ErrorInfo]) -> None:
        def failed(name: str, exc: Exception) -> None:
            errors.append(("encode", name, type(exc).__name__, str(exc)))

        encode_records(records, self.records, lines, failed)
        self.journal.append_lines(lines)


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve(inp: int, out: int) -> None:
    """Answer the training process until its end of the pipe closes."""
    current: _RankFiles | None = None
    errors: list[ErrorInfo] = []
    while True:
        head = _read_exactly(inp, _FRAME.size)
        if head is None:
            break
        size, kind = _FRAME.unpack(head)
        body = _read_exactly(inp, size)
        if body is None:
            break  # the training process died mid-message: that message never happened
        msg = pickle.loads(body)
        reply: Any = None
        try:
            if kind == BATCH:
                if current is not None:
                    lines, records = msg
                    current.batch(lines, records, errors)
                continue
            if kind == OPEN:  # answered with the next request (the training process flushes at once)
                if current is not None:
                    current.journal.close(remove=False)
                current = None
                current = _RankFiles(*msg)
                continue
            if current is None:
                reply = NO_STORE
            elif kind == FLUSH:
                rank_dir, header, stack, construct, data_file = msg
                reply = False  # the files could not be written: the journal must stay
                try:
                    write_rank_files(rank_dir, header, current.records.items(), stack, construct, data_file)
                except OSError as exc:
                    errors.append(("write", rank_dir, type(exc).__name__, str(exc)))
                else:
                    reply = True
            elif kind == CLOSE:
                current.journal.close(remove=msg)
                current = None
            elif kind == VALUE:
                reply = current.records.get(msg)
        except Exception as exc:
            if kind == BATCH and current is not None:  # named as a store journaling in process names it
                category, where = "journal", os.path.dirname(current.journal.path)
            else:  # an OPEN: the rank folder whose journal could not be made
                category, where = "write", os.path.dirname(msg[0]) if kind == OPEN else ""
            errors.append((category, where, type(exc).__name__, str(exc)))
            if kind in (OPEN, BATCH):  # never answered: the error goes with the next answer
                continue
        try:
            answer = pickle.dumps((reply, errors), protocol=pickle.HIGHEST_PROTOCOL)
            _write_all(out, _FRAME.pack(len(answer), kind) + answer)
        except OSError:
            pass  # nobody listens any more: keep journaling what is still in the pipe
        errors = []
    if current is not None:
        current.journal.close(remove=False)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the training: drain, then leave
    answers = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not break an answer
    serve(sys.stdin.fileno(), answers)
    return 0


# -- the training process's side -------------------------------------------------------------------------
class EncoderError(RuntimeError):
    """The helper cannot be used (not started, dead, or not answering)."""


class EncoderProcess:
    """The helper process and its two pipes."""

    def __init__(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "msprobe.dump.encoder_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C goes to the training, not here
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        self.pid = os.getpid()
        self.alive = True

    def send(self, kind: int, payload: bytes) -> None:
        if not self.alive:
            raise EncoderError("the encoder process is gone")
        try:
            _write_all(self._in, _FRAME.pack(len(payload), kind) + payload)
        except OSError as exc:
            self.stop()
            raise EncoderError(f"the encoder process is gone ({exc.strerror})") from None

    def request(self, kind: int, msg: Any) -> tuple[Any, list[ErrorInfo]]:
        """Send ``msg`` and wait for the answer: (reply, errors reported since the last answer)."""
        self.send(kind, pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
        ready, _, _ = select.select([self._out], [], [], REPLY_TIMEOUT_S)
        answer = _read_reply(self._out) if ready else None
        if answer is None:
            self.stop(kill=not ready)
            raise EncoderError("the encoder process did not answer")
        return answer

    def stop(self, kill: bool = False) -> None:
        """Close the pipes; the helper finishes what it was given and leaves (or is killed, stuck)."""
        if not self.alive:
            return
        self.alive = False
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if os.getpid() == self.pid:
            if kill:
                self.proc.kill()
            try:
                self.proc.wait(timeout=REPLY_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def forget_after_fork(self) -> None:
        """In a forked child: close our copies of the pipes without a word to the helper."""
        self.alive = False
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass


def _read_reply(fd: int) -> tuple[Any, list[ErrorInfo]] | None:
    head = _read_exactly(fd, _FRAME.size)
    body = _read_exactly(fd, _FRAME.unpack(head)[0]) if head is not None else None
    return None if body is None else pickle.loads(body)  # type: ignore[no-any-return]


_shared: EncoderProcess | None = None
_failed_pid: int | None = None


def shared() -> EncoderProcess | None:
    """This process's helper, started on first use; None where records are encoded in process
    (``MSPROBE_DUMP_ENCODER=inline``, or the helper could not be started or has died)."""
    global _shared, _failed_pid
    if os.environ.get(ENV_VAR, "process") == "inline" or os.name != "posix":
        return None  # (elsewhere pipes cannot be waited on with select)
    helper = _shared
    if helper is not None and helper.alive and helper.pid == os.getpid():
        return helper
    if _failed_pid == os.getpid():
        return None
    try:
        helper = _shared = EncoderProcess()
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        _failed_pid = os.getpid()
        log.warning("msprobe: cannot start the record encoder process (%s); encoding in process", exc)
        return None
    return helper


def given_up(helper: EncoderProcess, why: str) -> None:
    """The helper failed: this process encodes its records itself from now on (said once)."""
    global _failed_pid
    helper.stop()
    if _failed_pid != os.getpid():
        _failed_pid = os.getpid()
        log.warning("msprobe: %s; encoding records in the training process from now on", why)


def _stop_shared() -> None:
    if _shared is not None and _shared.pid == os.getpid():
        _shared.stop()


def _after_fork_in_child() -> None:
    global _shared
    if _shared is not None:
        _shared.forget_after_fork()
        _shared = None


atexit.register(_stop_shared)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


if __name__ == "__main__":
    # serve from the module under its own name, so that unpickled Encoded values are its Encoded
    from msprobe.dump import encoder_process

    raise SystemExit(encoder_process.main())
