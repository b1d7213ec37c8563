"""The in-memory store of one rank folder's json files (layout: :mod:`msprobe.formats.dump_json`).

:class:`RankStore` keeps dump.json, stack.json and construct.json in memory (insertion order =
collection order), mirrors each record to the :mod:`journal`, and rewrites the files at flush time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from msprobe.dump.background import Worker
from msprobe.dump.exceptions import FileCheckException
from msprobe.dump.journal import JOURNAL_NAME, Journal, read_journal
from msprobe.formats import jsonfmt
from msprobe.formats.dump_json import (
    DUMP_JSON,
    RECORD_INDENT,
    TENSOR_DIR,
    encode_record,
    stack_json,
    write_rank_files,
)

DIR_MODE = 0o750


def make_dirs(path: str) -> None:
    os.makedirs(path, mode=DIR_MODE, exist_ok=True)


class RankStore:
    """In-memory content + journal of ``{dump_path}/step{N}/rank{R}/``."""

    def __init__(
        self, rank_dir: str, header: dict[str, Any], data_file: str = DUMP_JSON, keep_data: bool = True
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
        # Set while statistics are deferred: puts then run on the worker, after the jobs queued before
        # them (the statistics their record holds), in submission order.
        self.worker: Worker | None = None
        self.before_flush: list[Callable[[], None]] = []

    def open(self, with_tensor_dir: bool) -> None:
        """Create the rank folder and its journal; a folder the OS refuses is one user-facing line
        (the config check cannot foresee every refusal: read-only mounts, /proc, quotas)."""
        try:
            make_dirs(self.rank_dir)
            if with_tensor_dir:
                make_dirs(os.path.join(self.rank_dir, TENSOR_DIR))
            self.journal = Journal(os.path.join(self.rank_dir, JOURNAL_NAME))
        except OSError as exc:
            raise FileCheckException(
                f"cannot write the dump folder {self.rank_dir}: {exc.strerror}"
            ) from None
        self.journal.append({"h": self.header})
        self.flush()

    def put(self, name: str, value: Any, kick: bool = True) -> None:
        """Store a record. With a worker, ``kick=False`` leaves it queued for the caller's next
        :meth:`kick` (one wake-up of the worker per captured call, not one per file entry)."""
        if self.keep_data:
            self._in_order(kick, self._put, name, value)

    def _in_order(self, kick: bool, fn: Callable[..., None], *args: Any) -> None:
        """``fn(*args)`` now, or, while statistics are deferred, on the worker behind what it queued."""
        w = self.worker
        if w is not None and not w.in_worker():
            w.submit(fn, *args)
            if kick:
                w.kick()
        else:
            fn(*args)

    def kick(self) -> None:
        """Hand what was queued with ``kick=False`` to the worker."""
        if self.worker is not None:
            self.worker.kick()

    def _put(self, name: str, value: Any) -> None:
        text = jsonfmt.dumps(value, RECORD_INDENT)
        self.records[name] = text
        self._dirty = True
        if self.journal is not None:
            self.journal.append_raw(
                '{"d":' + encode_basestring_ascii(name) + ',"v":' + text.replace("\n", "") + "}"
            )

    def value(self, name: str) -> Any:
        """The stored value of a record (decoded; for tests and updates)."""
        self.drain()
        return json.loads(self.records[name])

    def drain(self) -> None:
        if self.worker is not None:
            self.worker.drain()

    def put_stack(self, name: str, frames: tuple[str, ...], kick: bool = True) -> None:
        self._in_order(kick, self._put_stack, name, frames)

    def _put_stack(self, name: str, frames: tuple[str, ...]) -> None:
        sid = self._stack_ids.get(frames)
        entry: dict[str, Any] = {"n": name}
        if sid is None:
            sid = len(self._stack_frames)
            self._stack_ids[frames] = sid
            self._stack_frames.append(frames)
            self._stack_names.append([])
            entry["f"] = list(frames)
        self._stack_names[sid].append(name)
        entry["s"] = sid
        self._dirty = True
        if self.journal is not None:
            self.journal.append(entry)

    def put_construct(self, name: str, parent: str | None, kick: bool = True) -> None:
        self._in_order(kick, self._put_construct, name, parent)

    def _put_construct(self, name: str, parent: str | None) -> None:
        self.construct[name] = parent
        self._dirty = True
        if self.journal is not None:
            self.journal.append({"c": name, "p": parent})

    def stack_json(self) -> dict[str, Any]:
        return stack_json(zip(self._stack_names, self._stack_frames))

    def flush(self) -> None:
        self.drain()
        for callback in list(self.before_flush):  # records their owners still hold back (worker idle)
            callback()
        self.drain()
        if not self._dirty:
            return
        self._dirty = False
        full = self.data_file == DUMP_JSON
        write_rank_files(
            self.rank_dir,
            self.header,
            self.records.items(),
            self.stack_json() if full else None,
            self.construct if full else None,
            self.data_file,
        )

    def close(self) -> None:
        """Final flush; the journal is removed only after the json files are safely written."""
        self.flush()
        self.worker = None
        if self.journal is not None:
            self.journal.close(remove=True)
            self.journal = None


def rebuild(rank_dir: str) -> int:
    """Rewrite dump.json/stack.json/construct.json of ``rank_dir`` from its journal.

    Returns the number of data records. The journal is kept (rebuilding twice is harmless).
    """
    path = os.path.join(rank_dir, JOURNAL_NAME)
    header, data, stack, construct = read_journal(path)
    if not header:
        header = {"task": None, "level": None, "framework": "pytorch", "dump_data_dir": None}
    write_rank_files(rank_dir, header, ((k, encode_record(v)) for k, v in data.items()), stack, construct)
    return len(data)


def find_journals(root: str) -> list[str]:
    """Rank folders under ``root`` (itself included) that hold a journal."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        if JOURNAL_NAME in files:
            found.append(dirpath)
    return sorted(found)
