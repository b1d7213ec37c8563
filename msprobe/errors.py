"""Error types shared by every stage.

``MsprobeError`` is the one error a command-line tool turns into a single ``msprobe: error: ...``
line and an exit code: it means the *user's input* is wrong (a file, a flag, a record), never our bug.
"""

from __future__ import annotations

import os


class MsprobeError(Exception):
    """A user-facing error: one line that names the file and the entry, plus an exit code."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


#: Upstream 8.1.1's exception texts start with this; the command line's own prefix replaces it.
UPSTREAM_PREFIX = "[msprobe] "


def one_line(exc: MsprobeError) -> str:
    """The line a command prints for a user's mistake: ``msprobe: error: <message>``, one prefix."""
    return f"msprobe: error: {str(exc).removeprefix(UPSTREAM_PREFIX)}"


def cannot_write(path: os.PathLike[str] | str, exc: OSError) -> MsprobeError:
    """The one line for an output that cannot be written (a folder without write access, a full disk)."""
    return MsprobeError(f"{path}: cannot write ({exc.strerror or exc})")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (torch's dispatcher errors run to dozens of lines),
    or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
