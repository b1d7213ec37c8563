"""Which records are collected: ``scope``, ``list`` and ``data_mode``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from msprobe.formats.record_names import BACKWARD, FORWARD

DATA_MODES = ("all", "input", "output", "forward", "backward")


@dataclass(frozen=True)
class DataMode:
    """``data_mode``: a direction (forward/backward) and a side (input/output) must both be allowed."""

    modes: tuple[str, ...] = ("all",)

    def _allows(self, a: str, b: str, value: str) -> bool:
        if "all" in self.modes or (a not in self.modes and b not in self.modes):
            return True
        return value in self.modes

    def direction(self, direction: str) -> bool:
        return self._allows(FORWARD, BACKWARD, direction)

    def side(self, side: str) -> bool:
        return self._allows("input", "output", side)

    def allows(self, direction: str, side: str) -> bool:
        return self.direction(direction) and self.side(side)


class RecordFilter:
    """Stateful scope window + substring list, checked once per collection point.

    The scope window turns on when the start name is checked and off right after the end name is
    checked, so (as upstream) the end API contributes its inputs but not its output.
    """

    def __init__(
        self, scope: Sequence[str] = (), names: Sequence[str] = (), whole_modules: bool = False
    ) -> None:
        self.scope = tuple(scope)
        self.names = tuple(names)
        self._on = False
        # mix (8.1.1 MixRangeScope): a ``list`` entry naming a module dumps everything inside it
        self.whole_modules = whole_modules
        self._open: set[str] = set()  # listed modules running now (whole-module mode)

    def _listed(self, name: str) -> bool:
        return bool(self._open) or any(s in name for s in self.names)

    def _open_if_listed(self, name: str) -> None:
        if self.whole_modules and any(s in name for s in self.names):
            self._open.add(name)

    @property
    def active(self) -> bool:
        return bool(self.scope or self.names)

    def check(self, name: str) -> bool:
        if not self.scope and not self.names:
            return True
        ok = True
        if self.scope:
            if name == self.scope[0]:
                self._on = True
            ok = self._on
            if name == self.scope[1]:
                self._on = False
        if ok and self.names:
            ok = self._listed(name)
        return ok

    def begin(self, name: str, whole_module: bool = True) -> bool:
        """Module begin (forward pre-hook, or a module's backward begin with ``whole_module=False``): may
        open the scope window (the end module is fully included) and, for a forward at mix, a listed
        module's whole-module mode; whether the module passes now."""
        if self.scope and name == self.scope[0]:
            self._on = True
        if whole_module:
            self._open_if_listed(name)
        return self.passes(name)

    def passes(self, name: str) -> bool:
        """Whether a module passes now, without moving the window. PyTorch asks when the call ends,
        before :meth:`end` (8.1.1 collects a module record in its forward hook): a module that began
        before the window and ends inside it is recorded, one that outlives the window is not."""
        if not self.scope and not self.names:
            return True
        ok = self._on if self.scope else True
        return ok and (not self.names or self._listed(name))

    def end(self, name: str) -> None:
        """Module end (forward hook): closes the window after the end module."""
        if self.scope and name == self.scope[1]:
            self._on = False
        self._open.discard(name)

    def reset(self) -> None:
        self._on = False
        self._open.clear()
