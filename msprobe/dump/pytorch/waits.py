"""How the training thread waits for the background worker before a call writes into a tensor whose
summary is still queued (what may write is :mod:`.deferral`'s; the waiting is here).

A wait is for the jobs reading the written storages when the call says which tensors it writes, for
the jobs up to the last one reading a tensor that does not require grad before a backward pass (it
writes only ``.grad``), and for the whole queue otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msprobe.dump.pytorch.deferral import (
    BACKWARD_PASSES,
    TORCH_PREFIXES,
    func_key,
    mutates_by_args,
    written_tensors,
)

if TYPE_CHECKING:
    from msprobe.dump.background import Worker
    from msprobe.dump.pytorch.encode import Encoder


def before_unrecorded(
    w: Worker, enc: Encoder | None, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """An unrecorded call of ``func`` (seen by a function mode) is about to run, jobs are queued."""
    key = func_key(func)
    if key is None:
        w.drain()
    elif key[2] or mutates_by_args(key[1], args, kwargs):
        before_write(w, enc, key[0], key[1], args, kwargs)


def before_write(
    w: Worker, enc: Encoder | None, prefix: str, api: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """The call ``prefix.api(*args, **kwargs)``, which may write, is about to run."""
    if api in BACKWARD_PASSES and prefix in TORCH_PREFIXES and enc is not None:
        w.drain(enc.no_grad_reads_upto)  # it writes only .grad tensors
        return
    wait_for_written(w, enc, written_tensors(prefix, api, args, kwargs))


def wait_for_written(w: Worker, enc: Encoder | None, written: list[Any] | None) -> None:
    """Wait for the jobs reading the storages a call writes (views included), or for the whole
    queue when what it writes is not certain (``written`` None)."""
    if written is None or enc is None:
        w.drain()
        return
    for t in written:
        enc.wait_for_storage(t)
