"""The per-step call counters that number records (the name grammar: :mod:`msprobe.formats.record_names`)."""

from __future__ import annotations


class CallCounter:
    """Per-step counters: one per ``{Prefix}.{api}`` (or module prefix), starting at 0."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def next(self, key: str) -> int:
        n = self._counts.get(key, 0)
        self._counts[key] = n + 1
        return n

    def reset(self) -> None:
        self._counts.clear()
