"""A flag with one value per thread, as a class attribute: ``inside = ThreadFlag()``."""

from __future__ import annotations

import threading
from typing import Any


class ThreadFlag:
    """A bool attribute whose value is the calling thread's own (False until that thread sets it):
    our own capture code running in one thread must not silence another thread's records."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def _values(self, obj: Any) -> threading.local:
        values = obj.__dict__.get(self._name)
        if values is None:
            values = obj.__dict__.setdefault(self._name, threading.local())
        return values  # type: ignore[no-any-return]

    def __get__(self, obj: Any, objtype: type | None = None) -> bool:
        if obj is None:
            return self  # type: ignore[return-value]
        return getattr(self._values(obj), "value", False)

    def __set__(self, obj: Any, value: bool) -> None:
        self._values(obj).value = value
