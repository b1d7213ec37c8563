"""``dump_error_info.log``: one block per failed collection; training goes on."""

from __future__ import annotations

import datetime as _dt
import os
import traceback

ERROR_LOG = "dump_error_info.log"
_CST = _dt.timezone(_dt.timedelta(hours=8))


class ErrorLog:
    def __init__(self, rank_dir: str) -> None:
        self.path = os.path.join(rank_dir, ERROR_LOG)
        self._written = False
        self.count = 0

    def record(self, function: str, name: str, exc: BaseException, extra: str = "") -> None:
        stamp = _dt.datetime.now(_CST).strftime("%Y-%m-%d %H:%M:%S +0800")
        head = f"[{stamp}] [ERROR] {function} failed: name={name}, pid={os.getpid()}{extra}\n"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        stack = "".join(traceback.format_stack()[:-1])
        mode = "a" if self._written else "w"
        try:
            with open(self.path, mode, encoding="utf-8") as fh:
                fh.write(head + tb + "Call stack (most recent call last):\n" + stack + "\n")
            os.chmod(self.path, 0o640)
        except OSError:
            return
        self._written = True
        self.count += 1
