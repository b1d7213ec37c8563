"""The one rule for walking call arguments and results: which values are containers, and their parts.

A container is a namedtuple (its fields), a list or tuple (its positions), a dataclass instance (its
fields: a ``ModelOutput``, a dict too, with the fields that are None, as upstream writes them), or a
dict (its keys, as str). Everything else is a leaf. :func:`branches` is that rule; :func:`tensors`
walks it for the tensors inside. The encoder (dump.json values), the summaries a deferred record
reads, the module backward capture's output tensors and the cache entries a collective invalidates
all use it, so they agree on what is inside.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch

SEQUENCE, MAPPING = 0, 1
Branches = tuple[int, list[tuple[Any, Any]]]  # keys: int (SEQUENCE) or str (MAPPING)
_BUDGET = 100_000  # containers walked at most (a self-containing list ends)


def branches(v: Any) -> Branches | None:
    """``(SEQUENCE, [(index, part)])`` or ``(MAPPING, [(name, part)])`` of a container, None for a leaf
    (``torch.Size`` and other tuple subclasses that are values are the caller's to test first)."""
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return MAPPING, list(zip(v._fields, v, strict=False))
    if isinstance(v, list | tuple):
        return SEQUENCE, list(enumerate(v))
    if dataclasses.is_dataclass(v) and not isinstance(v, type):  # ModelOutput: its None fields too
        return MAPPING, [(f.name, getattr(v, f.name)) for f in dataclasses.fields(v)]
    if isinstance(v, dict):
        return MAPPING, [(str(k), x) for k, x in v.items()]
    return None


def tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in ``value``, depth first in order (a loop, not recursion: it runs per record)."""
    todo = [value]
    budget = _BUDGET
    while todo and budget:
        v = todo.pop()
        if isinstance(v, torch.Tensor):
            yield v
            continue
        cls = type(v)
        if cls is tuple or cls is list:  # the common containers, as branches() reads them, inline
            budget -= 1
            todo.extend(reversed(v))
            continue
        node = branches(v)
        if node is not None:
            budget -= 1
            todo.extend(part for _, part in reversed(node[1]))


def first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):  # most outputs: no generator
        return value
    return next(tensors(value), None)
