"""The in-memory store of one rank folder's json files (layout: :mod:`msprobe.formats.dump_json`).

:class:`RankStore` keeps dump.json, stack.json and construct.json in memory (insertion order =
collection order), mirrors them to the :mod:`journal`, and rewrites the files at flush time.

Records are stored in batches. A record's tensor statistics may still be on their device when it is
stored (see ``msprobe.dump.pytorch.stat_batch``); a batch fetches them all at once, encodes its
records and appends them to the journal in one write. A batch is written when
:data:`BATCH_RECORDS` records are pending, when the oldest pending record is
:data:`BATCH_SECONDS` old (checked as each record is stored), and at every flush (stop, step, exit).
So a SIGKILL loses at most the records stored since the last batch write: fewer than
``BATCH_RECORDS``, all stored within ``BATCH_SECONDS`` before the last one. ``batch_records=1`` writes
every record before the call that made it returns.

Given an :class:`~msprobe.dump.encoder_process.EncoderProcess`, the store hands each batch over to
it as a pickle instead (the helper encodes, journals and writes the files; a batch handed over
counts as written). It also hands over every :data:`HANDOFF_RECORDS` records while no value is
pending on a device (fetching one would wait for the device), so that little is left to encode when
``stop()`` waits for the files. The pickled batches of the step are kept: if the helper fails, the
store encodes them itself.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from msprobe.dump import encoder_process
from msprobe.dump.encoder_process import Encoded, EncoderError, EncoderProcess, encode_records
from msprobe.dump.exceptions import FileCheckException
from msprobe.dump.journal import (
    JOURNAL_NAME,
    Journal,
    construct_line,
    header_line,
    holds_records,
    opened_line,
    read_journal,
    stack_line,
)
from msprobe.errors import MsprobeError
from msprobe.formats.dump_json import (
    DUMP_JSON,
    TENSOR_DIR,
    NotARegularFile,
    encode_record,
    stack_json,
    write_rank_files,
)
from msprobe.paths import crashed, journal_data_file

DIR_MODE = 0o750
BATCH_RECORDS = 256
BATCH_SECONDS = 0.1
HANDOFF_RECORDS = 32  # with an encoder process: records handed over at once when nothing is pending

log = logging.getLogger("msprobe")


class PendingValues(Protocol):
    """Values the pending records are still waiting for (tensor statistics on their device)."""

    @property
    def full(self) -> bool: ...

    @property
    def on_device(self) -> bool: ...

    def resolve(self) -> None: ...


def make_dirs(path: str) -> None:
    """``path`` and the folders above it that are missing, each with :data:`DIR_MODE` (``os.makedirs``
    gives its mode to the last one only)."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:  # made meanwhile (another rank), or a file: the next step says which
            if not os.path.isdir(folder):
                raise


def _batch_name(pending: list[tuple[str, Any]]) -> str:
    """The records of a batch, for an error no single record can be blamed for."""
    if not pending:
        return "the record being made"
    if len(pending) == 1:
        return pending[0][0]
    return f"one of the {len(pending)} records {pending[0][0]} to {pending[-1][0]}"


class RankStore:
    """In-memory content + journal of ``{dump_path}/step{N}/rank{R}/``."""

    def __init__(
        self,
        rank_dir: str,
        header: dict[str, Any],
        data_file: str = DUMP_JSON,
        keep_data: bool = True,
        batch_records: int = BATCH_RECORDS,
        batch_seconds: float = BATCH_SECONDS,
        encoder: EncoderProcess | None = None,
    ) -> None:
        self.rank_dir = rank_dir
        self.keep_data = keep_data  # task "structure": data stays {}, stack/construct are filled
        self.header = header
        self.data_file = data_file
        self.records: dict[str, str] = {}  # name -> value encoded at indent level 2
        self._dirty = True
        self.construct: dict[str, Any] = {}
        self._stack_ids: dict[tuple[str, ...], int] = {}
        self._stack_names: list[list[str]] = []
        self._stack_frames: list[tuple[str, ...]] = []
        self.journal: Journal | None = None
        self.pending_values: PendingValues | None = None
        self.batch_records = max(1, batch_records)
        self.batch_seconds = batch_seconds
        self.clock: Callable[[], float] = time.monotonic
        self._pending: list[tuple[str, Any]] = []  # records not encoded yet
        self._lines: list[str] = []  # journal lines not written yet
        self._oldest = 0.0  # when the first pending record was stored
        self.before_flush: list[Callable[[], None]] = []
        # (what, record or "", error): a batch that cannot fetch a value or encode a record reports
        # it and writes the rest (the user's call that stored it has long returned)
        self.on_error: Callable[[str, str, BaseException], None] | None = None
        self.encoder = encoder  # None: records are encoded here
        self._handed: list[bytes] = []  # the pickled batches handed to the encoder process
        self._pid = os.getpid()  # a forked copy of this store never writes (the parent's files)
        self._written = True  # the json files hold what the journal holds (else the journal is kept)

    def open(self, with_tensor_dir: bool) -> None:
        """Create the rank folder and its journal; a folder the OS refuses is one user-facing line
        (the config check cannot foresee every refusal: read-only mounts, /proc, quotas)."""
        try:
            make_dirs(self.rank_dir)
            if with_tensor_dir:
                make_dirs(os.path.join(self.rank_dir, TENSOR_DIR))
            path = os.path.abspath(os.path.join(self.rank_dir, JOURNAL_NAME))  # the helper's cwd may differ
            if holds_records(path):
                # the replay's own test, on the data file the earlier run (of its own level) writes and
                # a rebuild rewrites: this run writes over it when it writes that file too
                data_file = journal_data_file(Path(path))
                rebuilt = not crashed(data_file, Path(path))
                if not rebuilt:
                    fate = ""
                elif data_file.name == self.data_file:
                    fate = f", and so is the {data_file.name} rebuilt from it"
                else:  # a run of another level writes the other file: the rebuilt one is left as it is
                    fate = f"; the {data_file.name} rebuilt from it stays"
                log.warning(
                    "msprobe: %s: the journal of an earlier run that did not end (%s) is replaced by this "
                    "run's%s",
                    path,
                    "rebuilt" if rebuilt else "never rebuilt",
                    fate,
                )
            if self.encoder is None:  # locked as the helper locks it: a rebuild waits for this process
                self.journal = Journal(path, lock=True, fresh=True)
        except OSError as exc:
            raise FileCheckException(
                f"cannot write the dump folder {self.rank_dir}: {exc.strerror or exc}"
            ) from None
        head = header_line(self.header)
        if self.encoder is not None:
            try:  # answered with the flush below
                self.encoder.send(encoder_process.OPEN, pickle.dumps((path, head)))
            except EncoderError as exc:
                self._encode_here(str(exc))
        else:
            assert self.journal is not None
            try:  # a full disk: said, as for every later journal write, and the training goes on
                self.journal.append_raw(head)
            except OSError as exc:
                self._report("journal", self.rank_dir, exc)
        self.flush()

    def put(self, name: str, value: Any) -> None:
        """Store a record (a later put of the same name replaces its value, keeping its place)."""
        if not self.keep_data or os.getpid() != self._pid:
            return
        pending = self._pending
        now = self.clock()
        if not pending:
            self._oldest = now
        pending.append((name, value))
        self._dirty = True
        if (
            len(pending) >= self.batch_records
            or now - self._oldest >= self.batch_seconds
            or (self.pending_values is not None and self.pending_values.full)
            or (
                self.encoder is not None
                and len(pending) >= HANDOFF_RECORDS
                and (self.pending_values is None or not self.pending_values.on_device)
            )
        ):
            self.write_batch()

    def write_batch(self) -> None:
        """Fetch the pending values, encode the pending records, append them all to the journal."""
        pending, self._pending = self._pending, []
        if self.pending_values is not None:
            try:
                self.pending_values.resolve()
            except Exception as exc:  # the statistics that could not be read stay null
                self._report("statistics", _batch_name(pending), exc)
        lines, self._lines = self._lines, []
        if self.encoder is not None:
            if pending or lines:
                self._hand_over(lines, pending)
            return
        self._encode(lines, pending)

    def _encode(self, lines: list[str], pending: list[tuple[str, Any]]) -> None:
        encode_records(pending, self.records, lines, lambda name, exc: self._report("encode", name, exc))
        if lines and self.journal is not None:
            try:  # never into the user's call that stored the record (a full disk)
                self.journal.append_lines(lines)
            except OSError as exc:
                self._report("journal", self.rank_dir, exc)

    def _hand_over(self, lines: list[str], pending: list[tuple[str, Any]]) -> None:
        """One batch to the encoder process, pickled (a value that cannot be is encoded here)."""
        try:
            payload = pickle.dumps((lines, pending), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            picklable = [r for r in map(self._picklable, pending) if r is not None]
            payload = pickle.dumps((lines, picklable), protocol=pickle.HIGHEST_PROTOCOL)
        self._handed.append(payload)
        assert self.encoder is not None
        try:
            self.encoder.send(encoder_process.BATCH, payload)
        except EncoderError as exc:
            self._encode_here(str(exc))

    def _picklable(self, record: tuple[str, Any]) -> tuple[str, Any] | None:
        """The record itself, or with its value encoded here; None if it cannot be encoded at all."""
        try:
            pickle.dumps(record[1], protocol=pickle.HIGHEST_PROTOCOL)
            return record
        except Exception:
            pass
        try:
            return record[0], Encoded(encode_record(record[1]))
        except Exception as exc:
            self._report("encode", record[0], exc)
            return None

    def _answered(self, answer: tuple[Any, list[encoder_process.ErrorInfo]]) -> Any:
        """The reply of the encoder process; the errors it reports go to ``on_error``."""
        reply, errors = answer
        for info in errors:
            self._report(info[0], info[1], encoder_process.as_exception(info))
        if reply == encoder_process.NO_STORE:
            raise EncoderError("the encoder process could not open the journal")
        return reply

    def _encode_here(self, why: str) -> None:
        """The encoder process failed: encode every batch handed to it here, and from now on."""
        assert self.encoder is not None
        encoder_process.given_up(self.encoder, why)
        self.encoder = None
        try:
            self.journal = Journal(os.path.join(self.rank_dir, JOURNAL_NAME), lock=True)
        except OSError as exc:
            self._report("journal", self.rank_dir, exc)
        if self.journal is not None:
            try:
                self.journal.append_raw(header_line(self.header))
            except OSError as exc:
                self._report("journal", self.rank_dir, exc)
        handed, self._handed = self._handed, []
        for payload in handed:  # lines journaled twice read as once (journal.read_journal)
            self._encode(*pickle.loads(payload))

    def _report(self, what: str, name: str, exc: BaseException) -> None:
        if self.on_error is None:
            raise exc
        self.on_error(what, name, exc)

    def value(self, name: str) -> Any:
        """The stored value of a record (decoded; for tests and updates)."""
        self.write_batch()
        if self.encoder is not None:
            try:
                text = self._answered(self.encoder.request(encoder_process.VALUE, name))
            except EncoderError as exc:
                self._encode_here(str(exc))
            else:
                if text is None:
                    raise KeyError(name)
                return json.loads(text)
        return json.loads(self.records[name])

    def put_stack(self, name: str, frames: tuple[str, ...]) -> None:
        sid = self._stack_ids.get(frames)
        new = sid is None
        if sid is None:
            sid = len(self._stack_frames)
            self._stack_ids[frames] = sid
            self._stack_frames.append(frames)
            self._stack_names.append([])
        self._stack_names[sid].append(name)
        self._dirty = True
        self._lines.append(stack_line(name, sid, frames if new else None))

    def put_construct(self, name: str, parent: str | None) -> None:
        self.construct[name] = parent
        self._dirty = True
        self._lines.append(construct_line(name, parent))

    def put_opened(self, name: str, parent: str | None) -> None:
        """A module call begins: journaled only, for a rebuild after a crash that ends no call."""
        self._lines.append(opened_line(name, parent))

    def stack_json(self) -> dict[str, Any]:
        return stack_json(zip(self._stack_names, self._stack_frames))

    def flush(self) -> None:
        if os.getpid() != self._pid:
            return
        for callback in list(self.before_flush):  # records their owners still hold back
            callback()
        self.write_batch()
        if not self._dirty:
            return
        self._dirty = False
        stack, construct = self.stack_json(), self.construct
        if self.encoder is not None:
            msg = (os.path.abspath(self.rank_dir), self.header, stack, construct, self.data_file)
            try:
                self._written = self._answered(self.encoder.request(encoder_process.FLUSH, msg)) is not False
                return
            except EncoderError as exc:
                self._encode_here(str(exc))
        try:
            records = self.records.items()
            write_rank_files(self.rank_dir, self.header, records, stack, construct, self.data_file)
            self._written = True
        except OSError as exc:  # reported, as the encoder process reports it; the journal is kept
            self._written = False
            self._dirty = True
            self._report("write", self.rank_dir, exc)

    def close(self) -> None:
        """Final flush; the journal is removed only after the json files are safely written."""
        if os.getpid() != self._pid:
            return
        self.flush()
        if self.encoder is not None:
            try:
                self._answered(self.encoder.request(encoder_process.CLOSE, self._written))
            except EncoderError as exc:  # the files are written: only the journal is left
                self._encode_here(str(exc))
            self._handed = []
        if self.journal is not None:
            self.journal.close(remove=self._written)  # kept for `msprobe rebuild` if the files are not
            self.journal = None


def rebuild(rank_dir: str) -> int | None:
    """Rewrite dump.json/stack.json/construct.json of ``rank_dir`` from its journal (debug.json alone for
    a dump of level debug, as that dump writes it; for a journal whose header is lost, debug.json where
    it is alone).

    Returns the number of data records. The journal is kept (rebuilding twice is harmless). None when
    there is no journal (any more): the dump it belonged to ended cleanly (possibly while the rebuild
    waited for its writer), so its files are final and are left as they are.
    """
    path = os.path.join(rank_dir, JOURNAL_NAME)
    try:
        header, data, stack, construct = read_journal(path)
    except FileNotFoundError:
        return None
    except NotARegularFile as exc:
        raise MsprobeError(str(exc)) from None
    if not os.path.exists(path):  # removed while we waited for its writer: the files are final
        return None
    if not header:
        header = {"task": None, "level": None, "framework": "pytorch", "dump_data_dir": None}
    records = []
    for k, v in data.items():
        try:
            records.append((k, encode_record(v)))
        except (RecursionError, ValueError, TypeError):  # read back by json.loads, too deep to re-encode
            log.warning("msprobe: %s: record %r cannot be encoded again (damaged?); skipped", path, k)
    data_file = journal_data_file(Path(path)).name  # the file the crash check reads
    write_rank_files(rank_dir, header, records, stack, construct, data_file)
    return len(records)


def find_journals(root: str) -> list[str]:
    """Rank folders under ``root`` (itself included) that hold a journal."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        if JOURNAL_NAME in files:
            found.append(dirpath)
    return sorted(found)
