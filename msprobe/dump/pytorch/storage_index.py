"""What the dump remembers of tensors, by key and by the storage they lie on.

The summary cache and the tensor files both remember tensors by the tensor object (``id``) and by
element layout, and both must drop everything on a storage at once when it is written without a
version bump (a ``.data`` alias, a collective): this index serves both.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

V = TypeVar("V")


class StorageIndex(dict[Hashable, V]):
    """Values by key (a dict: lookups cost what a dict's do), each listed under the storage address
    it describes; emptied whole once ``limit`` keys were put (a step of a huge model must not grow
    it without bound). Keys go in through :meth:`put` only."""

    __slots__ = ("_keys", "_on_storage", "limit")

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._on_storage: dict[int, list[Hashable]] = {}
        self._keys = 0  # keys put since the last clear (at least len(self))
        self.limit = limit

    def put(self, storage: int, key: Hashable, value: V) -> None:
        if self._keys >= self.limit:
            self.clear()
        self[key] = value
        keys = self._on_storage.get(storage)
        if keys is None:
            keys = self._on_storage[storage] = []
        keys.append(key)
        self._keys += 1

    def drop(self, key: Hashable) -> None:
        self.pop(key, None)

    def drop_storage(self, storage: int) -> None:
        """Drop every key put under ``storage``."""
        for key in self._on_storage.pop(storage, ()):
            self.pop(key, None)

    def clear(self) -> None:
        super().clear()
        self._on_storage.clear()
        self._keys = 0
