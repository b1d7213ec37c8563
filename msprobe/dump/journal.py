"""Crash-safe journal of one rank folder, and ``rebuild`` of the json files from it.

Records are appended as JSON lines, a batch of them in one ``write(2)`` (see
:class:`~msprobe.dump.writer.RankStore` for when), so a process killed with SIGKILL keeps every
record of the batches written so far. The json files are written from memory at stop/step/exit;
after a crash ``msprobe rebuild`` (or :func:`rebuild`) writes them from the journal instead. The
journal is removed once the step's json files are final.

Line kinds: ``{"h": header}``, ``{"d": name, "v": value}`` (a data record; a later line with the
same name replaces the value but keeps the first position), ``{"n": name, "s": id[, "f": frames]}``
(stack; frames given the first time an id appears), ``{"c": name, "p": parent}`` (construct).
"""

from __future__ import annotations

import json
import os
from typing import Any

JOURNAL_NAME = ".msprobe_journal.jsonl"


class Journal:
    """Append-only, unbuffered: every append is one ``write(2)``, in the kernel when it returns."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)

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
            os.close(self._fd)
            self._fd = None
        if remove:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass


def read_journal(path: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Return ``(header, data, stack, construct)`` rebuilt from a journal file.

    A torn last line (the process died mid-write) is ignored; every complete line is used.
    """
    header: dict[str, Any] = {}
    data: dict[str, Any] = {}
    stacks: dict[int, tuple[list[str], list[str]]] = {}
    construct: dict[str, Any] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "d" in entry:
                data[entry["d"]] = entry.get("v")
            elif "n" in entry:
                sid = int(entry["s"])
                if sid not in stacks:
                    stacks[sid] = ([], list(entry.get("f", [])))
                stacks[sid][0].append(entry["n"])
            elif "c" in entry:
                construct[entry["c"]] = entry.get("p")
            elif "h" in entry:
                header = dict(entry["h"])
    stack = {str(i): [names, frames] for i, (names, frames) in sorted(stacks.items())}
    return header, data, stack, construct
