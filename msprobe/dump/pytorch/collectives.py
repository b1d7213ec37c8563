"""What a record of a ``torch.distributed`` call shows, and when it is taken.

Collectives write their tensors in place, so a record's output is the call's arguments after the op
(8.1.1's rule). A call that returns a handle and whose arguments the op writes (``async_op=True`` by
keyword or by position, ``irecv``, ``batch_isend_irecv``) is not waited for by the dump: the caller
gets :class:`PendingWork` handles, and the record's output is taken when the caller's own ``wait()``
returns (on every handle of a batch). Waiting inside the call, as 8.1.1 does, deadlocks the exchange in
which both ranks receive first and then send. ``isend`` only reads its tensor: its record is complete at
the call.

Inside ``torch.distributed._coalescing_manager`` (Megatron's distributed optimizer, FSDP) torch only
queues a collective and runs the queue when the manager exits, so such a record waits for that exit:
its output is taken at the next recorded call or ``stop()`` after a plain manager has exited, or when
the caller waits on the handle of a manager with ``async_ops=True`` (its ``cm.wait()``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from msprobe.dump.api_families import READ_ONLY_COLLECTIVES, WRITTEN_LATER
from msprobe.dump.pytorch import torch_compat

WRITTEN_LATER_APIS = frozenset(WRITTEN_LATER)  # the table's facts, with their reasons
READ_ONLY_APIS = frozenset(READ_ONLY_COLLECTIVES)

_Work: Any = torch.distributed.Work if torch.distributed.is_available() else object


class NotWaitedError(RuntimeError):
    """Why a record has no output: the caller had not waited for its handles by ``stop()``."""

    def __init__(self) -> None:
        super().__init__("its handle was not waited for before stop(): the output is not recorded")


class PendingCall:
    """The handles of one call whose record waits for them: ``finish(arrived)`` runs once, with
    ``True`` when the caller has waited on every handle, or with ``False`` from :meth:`abandon`."""

    def __init__(self, finish: Callable[[bool], None], handles: int, wait_for_future: bool = False) -> None:
        self._finish: Callable[[bool], None] | None = finish
        self._left = handles
        self.wait_for_future = wait_for_future  # a handle's get_future() waits for it first
        self._futures: list[Any] = []  # futures of handles the caller completes through them

    def watch(self, future: Any) -> None:
        """A handle's future was handed out (DDP comm hooks wait on it in C++, never on the handle):
        its completion counts as that handle's wait, seen by :meth:`settle`."""
        self._futures.append(future)

    def settle(self) -> None:
        """Count the handed-out futures that have completed as waited handles (on the recording
        thread: a future's own callbacks may run on the backend's thread)."""
        if not self._futures or self.done:
            return
        pending = []
        for future in self._futures:  # each asked once: one that completes meanwhile counts next time
            if future.done():
                self.waited()
            else:
                pending.append(future)
        self._futures = pending

    @property
    def done(self) -> bool:
        return self._finish is None

    def waited(self) -> None:
        self._left -= 1
        if self._left <= 0:
            self._run(True)

    def abandon(self) -> None:
        self._run(False)

    def _run(self, arrived: bool) -> None:
        finish, self._finish = self._finish, None
        if finish is not None:
            finish(arrived)


class PendingWork(_Work):  # type: ignore[misc, valid-type]
    """The caller's handle of a call whose record waits for it: the handle's own in every respect,
    and its first ``wait()`` that returns also tells the record that its tensors have arrived."""

    def __init__(self, work: Any, call: PendingCall) -> None:
        super().__init__()
        self._work = work
        self._call: PendingCall | None = call

    def wait(self, timeout: Any = None) -> Any:
        ok = self._work.wait() if timeout is None else self._work.wait(timeout)
        call, self._call = self._call, None
        if call is not None:
            call.waited()
        return ok

    # ``Work`` defines these, so ``__getattr__`` would not reach the wrapped handle's
    def is_completed(self) -> bool:
        return bool(self._work.is_completed())

    def synchronize(self) -> None:
        self._work.synchronize()

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
        """The handle's future; its completion counts as the caller's wait. Inside a backward (a DDP
        communication hook, whose future DDP waits for before backward ends anyway) a collective is
        waited for here first, as 8.1.1 waits inside the call: the callbacks chained on the completed
        future run inline in the caller's thread, so the collectives they call (PowerSGD's) are
        recorded every time. Elsewhere the caller may let the collective's peers join only after this
        call (a send the other rank receives first), where waiting would deadlock; and a point-to-point
        receive is never waited for (both ranks may receive first)."""
        call = self._call
        if call is not None and call.wait_for_future and not call.done and _in_backward():
            self.wait()
        future = self._work.get_future()
        call, self._call = self._call, None
        if call is not None:
            call.watch(future)
        return future

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _in_backward() -> bool:
    """Whether autograd is running a backward in this thread (a DDP communication hook is); True on
    a torch that cannot tell."""
    return torch_compat.running_backward() is not False


def _asks_async(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if "async_op" in kwargs:
        return bool(kwargs["async_op"])
    try:
        return bool(inspect.signature(func).bind(*args, **kwargs).arguments.get("async_op", False))
    except (TypeError, ValueError):
        return False


def written_later(api: str, func: Any, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the call returned handles and its arguments are written by the op after it returned."""
    if out is None or api in READ_ONLY_APIS:
        return False
    return api in WRITTEN_LATER_APIS or _asks_async(func, args, kwargs)


def pending_handles(
    out: Any, finish: Callable[[bool], None], wait_for_future: bool = False
) -> tuple[Any, PendingCall]:
    """``out`` (a handle, or a list of them) with every handle wrapped for ``finish``'s call."""
    works = out if isinstance(out, list) else [out]
    waitable = [getattr(w, "wait", None) is not None for w in works]
    call = PendingCall(finish, sum(waitable), wait_for_future)
    wrapped = [PendingWork(w, call) if ok else w for w, ok in zip(works, waitable, strict=True)]
    if not any(waitable):
        call.waited()
    return (wrapped if isinstance(out, list) else wrapped[0]), call


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


class Coalesced:
    """Records of collectives queued inside ``_coalescing_manager``, each with the process groups that
    were coalescing at its call: once they have all left, their managers have exited."""

    def __init__(self) -> None:
        self._calls: list[tuple[tuple[Any, ...], PendingCall]] = []

    def __bool__(self) -> bool:
        return bool(self._calls)

    def add(self, groups: tuple[Any, ...], call: PendingCall) -> None:
        self._calls.append((groups, call))

    def _exited(self) -> list[PendingCall]:
        """Take the calls whose managers have exited."""
        live = set(torch_compat.coalescing_groups())
        done = [c for groups, c in self._calls if live.isdisjoint(groups)]
        if done:
            self._calls = [(g, c) for g, c in self._calls if not live.isdisjoint(g)]
        return done

    def settle(self) -> None:
        """A plain manager has run its collectives to the end as it exited: their records are complete."""
        for call in self._exited():
            call.waited()

    def adopt(self, work: Any) -> tuple[Any, PendingCall | None]:
        """The handle an ``async_ops=True`` manager keeps for ``cm.wait()`` as it exits, wrapped so that
        its wait completes the records of the calls it ran."""
        calls = self._exited() if work is not None else []
        if not calls:
            return work, None

        def finish(arrived: bool) -> None:
            for c in calls:
                c.waited() if arrived else c.abandon()

        joint = PendingCall(finish, 1)
        return PendingWork(work, joint), joint

    def abandon(self) -> None:
        """``stop()``: complete what has run; a manager still open leaves its records without output."""
        self.settle()
        calls, self._calls = self._calls, []
        for _, call in calls:
            call.abandon()


_manager_append: Any = None  # the manager's own ``append`` while ours is installed


def watch_managers(adopt: Callable[[Any], Any]) -> None:
    """Route the handle each ``async_ops=True`` manager keeps through ``adopt`` (installed while a dump
    window is open)."""
    global _manager_append
    cls = torch_compat.coalescing_manager_class()
    if cls is None or _manager_append is not None:
        return
    original = _manager_append = cls.append

    def append(cm: Any, work: Any = None) -> None:
        original(cm, adopt(work))

    cls.append = append


def unwatch_managers() -> None:
    global _manager_append
    cls = torch_compat.coalescing_manager_class()
    if cls is not None and _manager_append is not None:
        cls.append = _manager_append
    _manager_append = None
