"""``start(model, token_range=[start, end])`` (upstream 8.1.1): count the root model's forward calls
and dump only calls ``start..end`` (inclusive); ``start()`` itself does not turn dumping on.

The counting hook is on the root model from ``start()`` to ``stop()`` only.
"""

from __future__ import annotations

import logging
from typing import Any

from msprobe.dump.pytorch.nocompile import no_compile
from msprobe.dump.session import DumpSession

log = logging.getLogger("msprobe")


class TokenRange:
    def __init__(self, session: DumpSession) -> None:
        self.session = session
        self._range: tuple[int, int] | None = None
        self._count = 0
        self._handle: Any = None
        self._pre = no_compile(self._on_forward)

    def arm(self, model: Any, token_range: tuple[int, int]) -> None:
        root = model[0] if isinstance(model, list | tuple) else model
        if isinstance(model, list | tuple) and len(model) > 1:
            log.warning("msprobe: token_range counts the forward calls of the first model of the list")
        self.disarm()
        self._count = 0
        self.session.running = False  # start() itself does not turn dumping on
        self._range = token_range
        self._handle = root.register_forward_pre_hook(self._pre)

    def disarm(self) -> None:
        self._range = None
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _on_forward(self, module: Any, args: Any) -> None:
        s = self.session
        if self._range is None or s.finished or s.store is None:
            return
        n = self._count
        self._count += 1
        start, end = self._range
        if n == start:
            s.running = True
        elif n == end + 1:
            s.running = False
