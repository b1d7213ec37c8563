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


class ParamGradFilter:
    """Which ``{prefix}.parameters_grad`` records a step keeps (8.1.1): decided when a gradient
    arrives, kept if the record passes the filter then or if its module's backward does. With no
    filter on nothing can drop a record, so its placeholder is stored right after the module's first
    forward (8.1.1's place); otherwise a record is stored once kept, or at the flush (``[null]``, a
    recorded module whose gradient never came). Keyed by module prefix, shared by both frameworks."""

    def __init__(self, record_filter: RecordFilter) -> None:
        self.filter = record_filter
        self._forward_passed: set[str] = set()
        self._kept: set[str] = set()
        self._dropped: set[str] = set()
        self._backward_passing: set[str] = set()

    def forward_ended(self, prefix: str, passed: bool) -> bool:
        """A module with trainable parameters ended its forward: whether to store its placeholder now."""
        if not passed:
            return False
        self._forward_passed.add(prefix)
        if self.filter.active or prefix in self._kept:
            return False
        self._kept.add(prefix)
        return True

    def backward_began(self, prefix: str, passed: bool) -> None:
        """The module's backward began (before its parameters' gradients arrive), passing or not."""
        if passed:
            self._backward_passing.add(prefix)

    def keeps(self, prefix: str) -> bool:
        """A gradient of the module's parameters arrived: whether its record keeps it."""
        if self.filter.check(f"{prefix}.parameters_grad") or prefix in self._backward_passing:
            self._kept.add(prefix)
            return True
        self._dropped.add(prefix)
        return False

    def unclaimed(self, prefix: str) -> bool:
        """At the flush: whether a recorded module's placeholder, never kept or dropped, is stored now."""
        if prefix not in self._forward_passed or prefix in self._kept or prefix in self._dropped:
            return False
        self._kept.add(prefix)
        return True

    def reset(self) -> None:
        for state in (self._forward_passed, self._kept, self._dropped, self._backward_passing):
            state.clear()
