"""Crash-safe journal of one rank folder, and ``rebuild`` of the json files from it.

Records are appended as JSON lines, a batch of them in one ``write(2)`` (see
:class:`~msprobe.dump.writer.RankStore` for when), so a process killed with SIGKILL keeps every
record of the batches written so far. The json files are written from memory at stop/step/exit;
after a crash ``msprobe rebuild`` (or :func:`rebuild`) writes them from the journal instead. The
journal is removed once the step's json files are final.

Line kinds: ``{"h": header}``, ``{"d": name, "v": value}`` (a data record; a later line with the
same name replaces the value but keeps the first position), ``{"n": name, "s": id[, "f": frames]}``
(stack; frames given the first time an id appears), ``{"c": name, "p": parent}`` (construct, at a
call's end), ``{"o": name, "p": parent}`` (a module call opened: used only for a call that a crash kept
from ending and that an entry names as its parent, so every parent in a rebuilt construct.json is a key).
This module is the only one that knows the line format: it encodes the lines (:func:`header_line`,
:func:`data_line`, :func:`stack_line`, :func:`construct_line`, :func:`opened_line`) and reads them
(:func:`read_journal`).
"""

from __future__ import annotations

import json
import logging
import os
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from msprobe.formats.dump_json import open_regular

try:
    import fcntl
except ImportError:  # not on POSIX: no writer outlives the training process there
    fcntl = None  # type: ignore[assignment]

JOURNAL_NAME = ".msprobe_journal.jsonl"
log = logging.getLogger("msprobe")


# -- the line kinds (written here, read by :func:`read_journal`) -------------------------------------------
def header_line(header: dict[str, Any]) -> str:
    """``{"h": header}``."""
    return json.dumps({"h": header}, separators=(",", ":"))


def data_line(name: str, text: str) -> str:
    """``{"d": name, "v": value}`` of a data record whose value is encoded as ``text``."""
    return '{"d":' + encode_basestring_ascii(name) + ',"v":' + text.replace("\n", "") + "}"


_FRAMES_TEXTS: dict[tuple[str, ...], str] = {}  # a stack's frames as a journal's JSON list


def _frames_text(frames: tuple[str, ...]) -> str:
    """``json.dumps(list(frames), separators=(",", ":"))``, kept: the same call sites run every step."""
    text = _FRAMES_TEXTS.get(frames)
    if text is None:
        text = json.dumps(list(frames), separators=(",", ":"))
        if len(_FRAMES_TEXTS) >= 4096:
            _FRAMES_TEXTS.clear()
        _FRAMES_TEXTS[frames] = text
    return text


def stack_line(name: str, sid: int, frames: tuple[str, ...] | None) -> str:
    """``{"n": name, "s": sid[, "f": frames]}``: frames only the first time ``sid`` appears (None after),
    written without ``json.dumps``: most records repeat an earlier stack."""
    head = '{"n":' + encode_basestring_ascii(name) + ',"s":' + str(sid)
    return head + "}" if frames is None else head + ',"f":' + _frames_text(frames) + "}"


def construct_line(name: str, parent: str | None) -> str:
    """``{"c": name, "p": parent}``."""
    return _name_parent_line("c", name, parent)


def opened_line(name: str, parent: str | None) -> str:
    """``{"o": name, "p": parent}``."""
    return _name_parent_line("o", name, parent)


def _name_parent_line(kind: str, name: str, parent: str | None) -> str:
    p = "null" if parent is None else encode_basestring_ascii(parent)
    return '{"' + kind + '":' + encode_basestring_ascii(name) + ',"p":' + p + "}"


_DATA_LINE_START = b'{"d":'


def holds_records(path: str | os.PathLike[str]) -> bool:
    """Whether the journal holds a data record (read up to the first one); False when unreadable."""
    try:
        with _open_regular(os.fspath(path)) as fh:
            return any(line.startswith(_DATA_LINE_START) for line in fh)
    except OSError:
        return False


def header_of(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The header of a journal (its first line), or None when it has none or cannot be read."""
    try:
        with _open_regular(os.fspath(path)) as fh:
            first = fh.readline()
        entry = json.loads(first.decode("ascii"))
    except (OSError, ValueError):
        return None
    header = entry.get("h") if isinstance(entry, dict) else None
    return header if isinstance(header, dict) else None


_LOCKED: dict[int, Journal] = {}  # fd -> the journals this process holds locked


class Journal:
    """Append-only, unbuffered: every append is one ``write(2)``, in the kernel when it returns.

    ``lock=True``: an exclusive ``flock`` is held until :meth:`close` (or the writer's exit), so that
    readers (:func:`read_journal`, ``msprobe rebuild`` run while the dump goes on) wait for the writer;
    a forked child closes its copy (it never writes, and must not keep the lock after its parent)."""

    def __init__(self, path: str, lock: bool = False, fresh: bool = False) -> None:
        """``fresh``: the journal of a new dump of the folder; what an earlier run left (a crash not
        rebuilt) is dropped, never merged with this run's records."""
        self.path = path
        # a link, pipe or device planted at the name is refused, never followed or waited on
        self._fd: int | None = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)[0]
        if lock and fcntl is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            except OSError:
                pass  # a file system without locks: a rebuild must wait for the writer by itself
            else:
                _LOCKED[self._fd] = self
        if fresh:
            os.ftruncate(self._fd, 0)  # after the lock: never under a writer still finishing

    def append(self, entry: dict[str, Any]) -> None:
        self.append_raw(json.dumps(entry, separators=(",", ":")))

    def append_raw(self, line: str) -> None:
        """Append an already-encoded one-line JSON object."""
        self.append_lines([line])

    def append_lines(self, lines: list[str]) -> None:
        """Append already-encoded one-line JSON objects, in one write."""
        if self._fd is None or not lines:
            return
        data = ("\n".join(lines) + "\n").encode("utf-8")
        written = os.write(self._fd, data)
        while written < len(data):  # a short write (signals, full pipes): finish the line
            written += os.write(self._fd, data[written:])

    def close(self, remove: bool) -> None:
        if self._fd is not None:
            _LOCKED.pop(self._fd, None)
            os.close(self._fd)
            self._fd = None
        if remove:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass


def _forget_locks_after_fork() -> None:
    """In a forked child: close the copies of the locked journals (the lock stays the parent's)."""
    for journal in list(_LOCKED.values()):
        if journal._fd is not None:
            try:
                os.close(journal._fd)
            except OSError:
                pass
            journal._fd = None
    _LOCKED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks_after_fork)


def _held_here(path: str) -> bool:
    """Whether this very process holds ``path`` locked (it cannot wait for itself)."""
    real = os.path.realpath(path)
    return any(os.path.realpath(j.path) == real for j in _LOCKED.values())


def read_journal(path: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Return ``(header, data, stack, construct)`` rebuilt from a journal file.

    A torn last line (the process died mid-write) is ignored; every complete line is used. A journal
    still locked by its writer (an encoder process finishing the batches it was handed) is read once
    the writer is done. A line repeated (a batch journaled again after its encoder process died) counts
    once.
    """
    header: dict[str, Any] = {}
    data: dict[str, Any] = {}
    stacks: dict[int, tuple[list[str], list[str]]] = {}
    stacked: set[tuple[int, str]] = set()
    construct: dict[str, Any] = {}
    opened: dict[str, Any] = {}
    skipped = 0
    with _open_regular(path) as fh:  # a damaged byte spoils one line only
        if not _held_here(path):
            _wait_for_writer(fh.fileno(), path)
        for line in fh:
            if not line.endswith(b"\n"):
                break
            try:
                # every entry is ASCII (json.dumps escapes the rest): a byte beyond is damage, which
                # decoding it leniently would have turned into a changed record name or value
                entry = json.loads(line.decode("ascii"))
                _apply(entry, header, data, stacks, stacked, construct, opened)
            except (ValueError, TypeError, AttributeError, KeyError, RecursionError, OverflowError):
                skipped += 1  # not one of our entries: a damaged line
    if skipped:
        log.warning("msprobe: %s: %d damaged line(s) skipped", path, skipped)
    stack = {str(i): [names, frames] for i, (names, frames) in sorted(stacks.items())}
    _close_named_open_calls(construct, opened)
    return header, data, stack, construct


def _open_regular(path: str) -> Any:
    """``path`` opened for reading if it is a regular file itself (:func:`open_regular`): a link could
    lead out of the dump folder, a pipe block for ever, a device never end."""
    return os.fdopen(open_regular(path, os.O_RDONLY)[0], "rb")


def _close_named_open_calls(construct: dict[str, Any], opened: dict[str, Any]) -> None:
    """The calls a crash kept open that an entry names as its parent, and their open parents, get their
    entries, after the ended ones (as the window's close stores them)."""
    named = [p for p in construct.values() if isinstance(p, str)]
    while named:
        parent = named.pop()
        if parent in construct or parent not in opened:
            continue
        construct[parent] = opened[parent]
        if isinstance(opened[parent], str):
            named.append(opened[parent])


def _apply(
    entry: Any,
    header: dict[str, Any],
    data: dict[str, Any],
    stacks: dict[int, tuple[list[str], list[str]]],
    stacked: set[tuple[int, str]],
    construct: dict[str, Any],
    opened: dict[str, Any],
) -> None:
    """Add one journal entry; a malformed one raises (ValueError, TypeError, ...) before changing anything."""
    if not isinstance(entry, dict):
        raise TypeError("not an object")
    if "d" in entry:
        if not isinstance(entry["d"], str):
            raise TypeError("a data record's name is not a string")
        data[entry["d"]] = entry.get("v")
    elif "n" in entry:
        sid, name, frames = int(entry["s"]), entry["n"], entry.get("f", [])
        if not isinstance(name, str):
            raise TypeError("a stack entry's record name is not a string")
        if not isinstance(frames, list) or not all(isinstance(f, str) for f in frames):
            raise TypeError("a stack entry's frames are not strings")  # stack.json's reader refuses them
        if sid not in stacks:
            stacks[sid] = ([], frames)
        if (sid, name) not in stacked:
            stacked.add((sid, name))
            stacks[sid][0].append(name)
    elif "c" in entry:
        if not isinstance(entry["c"], str):
            raise TypeError("a construct entry's name is not a string")
        if entry.get("p") is not None and not isinstance(entry["p"], str):
            raise TypeError("a construct entry's parent is not a record name")
        construct[entry["c"]] = entry.get("p")
    elif "o" in entry:
        if not isinstance(entry["o"], str):
            raise TypeError("an opened call's name is not a string")
        opened[entry["o"]] = entry.get("p")
    elif "h" in entry:
        new = dict(entry["h"])
        header.clear()
        header.update(new)
    else:
        raise KeyError("not a journal entry (no 'd', 'n', 'c', 'o' or 'h' key)")


def _wait_for_writer(fd: int, path: str) -> None:
    """Block until no process holds the journal's write lock."""
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        log.warning("msprobe: waiting for the process still writing %s", path)
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        return  # a file system without locks: read what is there
