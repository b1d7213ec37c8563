"""One-line errors for user mistakes, whatever the framework: an uncaught ``MsprobeError`` prints
``msprobe: error: <message>`` on stderr instead of a traceback (DEVELOPERS.md: bad input gets a clear
one-line error). Any other exception keeps the normal traceback."""

from __future__ import annotations

import sys
from types import TracebackType

from msprobe.errors import MsprobeError, one_line


def install_excepthook() -> None:
    """Install the hook once per process (idempotent; chains to the previous hook)."""
    previous = sys.excepthook
    if getattr(previous, "_msprobe", False):
        return

    def hook(tp: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if isinstance(value, MsprobeError):
            print(one_line(value), file=sys.stderr)
            return
        previous(tp, value, tb)

    hook._msprobe = True  # type: ignore[attr-defined]
    sys.excepthook = hook
