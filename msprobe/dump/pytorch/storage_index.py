"""What the dump remembers of tensors, by key and by the storage they lie on.

The summary cache and the tensor files both remember tensors by the tensor object (``id``) and by
element layout, and both must drop everything on a storage at once when it is written without a
version bump (a ``.data`` alias, a collective): this index serves both.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class StorageIndex(Generic[V]):
    """Values by key, listed under the storage address they describe; emptied whole once ``limit``
    keys were put (a step of a huge model must not grow it without bound)."""

    __slots__ = ("_by_key", "_keys", "_on_storage", "limit")

    def __init__(self, limit: int) -> None:
        self._by_key: dict[Hashable, V] = {}
        self._on_storage: dict[int, list[Hashable]] = {}
        self._keys = 0  # keys put since the last clear (at least len(_by_key))
        self.limit = limit

    def get(self, key: Hashable) -> V | None:
        return self._by_key.get(key)

    def put(self, storage: int, key: Hashable, value: V) -> None:
        if self._keys >= self.limit:
            self.clear()
        self._by_key[key] = value
        keys = self._on_storage.get(storage)
        if keys is None:
            keys = self._on_storage[storage] = []
        keys.append(key)
        self._keys += 1

    def drop(self, key: Hashable) -> None:
        self._by_key.pop(key, None)

    def drop_storage(self, storage: int) -> None:
        """Drop every key put under ``storage``."""
        for key in self._on_storage.pop(storage, ()):
            self._by_key.pop(key, None)

    def clear(self) -> None:
        self._by_key.clear()
        self._on_storage.clear()
        self._keys = 0
