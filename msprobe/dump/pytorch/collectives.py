"""What a record of a ``torch.distributed`` call shows, and when the dump waits for it.

Collectives write their tensors in place, so a record's output is the call's arguments after the op
(8.1.1's rule). An op that returns a handle is waited for first when its arguments are written by it:
``async_op=True`` (by keyword or by position), ``irecv`` and ``batch_isend_irecv``. ``isend`` only reads
its tensor, so it is never waited for: waiting inside the call would deadlock the common exchange in
which both ranks send first, then receive.

A handle the dump waited for is handed back as :class:`WaitedWork`, whose own ``wait()`` returns at once:
waiting twice on gloo's send/recv work blocks forever.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

WAITED_APIS = frozenset(("irecv", "batch_isend_irecv"))  # they return handles and write their tensors
NEVER_WAITED_APIS = frozenset(("isend",))  # it returns a handle but only reads its tensor

_Work: Any = torch.distributed.Work if torch.distributed.is_available() else object


class WaitedWork(_Work):  # type: ignore[misc, valid-type]
    """A handle the dump has already waited for: ``wait()`` again returns at once; the rest is the
    handle's own (``source_rank`` of an ``irecv`` from any source, ``exception``, ``get_future``)."""

    def __init__(self, work: Any) -> None:
        super().__init__()
        self._work = work

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def is_success(self) -> bool:
        return bool(self._work.is_success())

    def exception(self) -> Any:
        return self._work.exception()

    def source_rank(self) -> int:
        return int(self._work.source_rank())

    def _source_rank(self) -> int:
        return int(self._work._source_rank())

    def result(self) -> Any:
        return self._work.result()

    def get_future(self) -> Any:
        return self._work.get_future()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _asks_async(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if "async_op" in kwargs:
        return bool(kwargs["async_op"])
    try:
        return bool(inspect.signature(func).bind(*args, **kwargs).arguments.get("async_op", False))
    except (TypeError, ValueError):
        return False


def _wait(out: Any) -> Any:
    works = out if isinstance(out, list) else [out]
    waited = []
    for work in works:
        if getattr(work, "wait", None) is not None and not isinstance(work, WaitedWork):
            work.wait()
            work = WaitedWork(work)
        waited.append(work)
    return waited if isinstance(out, list) else waited[0]


def p2p_tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of the ``P2POp``s in a call's arguments (``batch_isend_irecv``'s list): written by
    the op, yet not found by walking the arguments for tensors."""
    found: list[torch.Tensor] = []
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, list | tuple):
            todo.extend(v)
        elif type(v).__name__ == "P2POp" and isinstance(getattr(v, "tensor", None), torch.Tensor):
            found.append(v.tensor)
    return found


def settle(api: str, func: Any, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(what the caller gets back, what the record shows)`` for a collective call that returned
    ``out``; waits for it first where its arguments are written by it."""
    if (
        out is not None
        and api not in NEVER_WAITED_APIS
        and (api in WAITED_APIS or _asks_async(func, args, kwargs))
    ):
        out = _wait(out)
    return out, [*args, *kwargs.values()]
