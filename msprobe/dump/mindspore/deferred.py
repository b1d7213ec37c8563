"""Batched statistics: tensor summaries are computed a batch of records at a time, not per tensor.

Reading a PyNative tensor on the host (``asnumpy``) waits for MindSpore's asynchronous op queue; one
wait per recorded tensor costs more than the op itself on small nets. So statistics-only records keep
a reference to their tensors (:class:`Pending`) and are summarised, in collection order, when the batch
is full or at a point after which a tensor could change: ``stop()``/``step()``/exit, before an
in-place API, before a ``jit`` call (optimizers update parameters in place there). Parameters are
never deferred (optimizers and ``set_data`` mutate them outside any op we see), and records that save
tensor files are summarised at once. Up to :data:`BATCH` records are therefore held in memory; they
reach the journal when their batch is written. A tensor whose values cannot be read keeps its record,
with null statistics. ``MSPROBE_MS_STAT_BATCH=1`` writes every record as it
completes (crash-safe like the PyTorch dump, slower).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from msprobe.formats.jsonfmt import Summary
from msprobe.formats.record_names import in_place_name


def _batch_size() -> int:
    raw = os.environ.get("MSPROBE_MS_STAT_BATCH", "64")
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        logging.getLogger("msprobe").warning(
            "msprobe: MSPROBE_MS_STAT_BATCH=%r is not a positive integer, using 64", raw
        )
        return 64
    return value


BATCH = _batch_size()


class Pending:
    """A tensor whose summary is computed when its record is written; ``blank`` makes its summary
    without values (null statistics) when its values cannot be read."""

    __slots__ = ("blank", "make", "tensor")

    def __init__(self, tensor: Any, make: Callable[[Any], Summary], blank: Callable[[Any], Summary]) -> None:
        self.tensor = tensor
        self.make = make
        self.blank = blank


def resolve(value: Any, failures: list[tuple[BaseException, bool]]) -> Any:
    """``value`` with every :class:`Pending` replaced by its summary (new containers; input untouched).
    A failed read is tried once more, and ``(error, whether the second read failed too)`` is appended
    to ``failures``: the first failure may be another op's, surfacing at this read; a tensor whose
    second read fails too gets a blank summary."""
    t = type(value)
    if t is Pending:
        try:
            return value.make(value.tensor)
        except Exception as exc:
            first = exc
        try:
            summary = value.make(value.tensor)
        except Exception:
            failures.append((first, True))
            return value.blank(value.tensor)
        failures.append((first, False))
        return summary
    if t is dict:
        return {k: resolve(v, failures) for k, v in value.items()}
    if t is list:
        return [resolve(v, failures) for v in value]
    return value


_NOT_MUTATORS = {"requires_grad_", "parent_tensor_", "index_of_parent_", "delete_"}
# Tensor methods that change a tensor without being recorded APIs; a batch is written before they run.
MUTATORS = ("__setitem__", "assign_value", "set_data", "copy_", "fill_", "zero_", "set_")
# Host views: on CPU the array these return shares the tensor's memory, so the program may change the
# tensor through it (``a = t.asnumpy(); a /= a.sum()``); the batch is written before one is handed out.
HOST_VIEWS = ("asnumpy", "numpy", "__array__")


def mutator_names(cls: type) -> list[str]:
    """In-place methods of ``cls`` (``add_``, ``__iadd__``...) plus :data:`MUTATORS`."""
    names = [n for n in dir(cls) if (is_inplace(n) and not n.startswith("_")) or n in MUTATORS + HOST_VIEWS]
    names += [n for n in dir(cls) if n.startswith("__i") and n.endswith("__") and is_inplace(n)]
    return sorted(set(names) - _NOT_MUTATORS)


# MindSpore's in-place APIs besides the shared naming (``assign_add``, ``inplace_update``, ``scatter_update``)
IN_PLACE_PREFIXES = ("assign", "inplace_", "scatter_")


def is_inplace(api: str) -> bool:
    """APIs that change an argument in place: a batch must be written before they run."""
    return in_place_name(api) or api.startswith(IN_PLACE_PREFIXES)


class Batch:
    """The queue of ``(name, record)`` puts waiting for their statistics."""

    def __init__(
        self, put: Callable[[str, Any], None], on_error: Callable[[str, BaseException], None]
    ) -> None:
        self.put = put
        self.on_error = on_error
        self.queue: list[tuple[str, Any]] = []
        self.pid = os.getpid()  # a forked child's copy holds its parent's tensors: never read there

    def add(self, name: str, record: Any) -> None:
        self.queue.append((name, record))
        if len(self.queue) >= BATCH:
            self.flush()

    def flush(self) -> None:
        """Write every queued record. A tensor that cannot be read gets null statistics and an error
        log line; nothing is dropped. A read failing with MindSpore's ``RuntimeError`` is the program's
        own failure (an op queued earlier that failed: its error surfaces at the next read, ours): it is
        raised again once the batch is written, where without msprobe the program's next read raises it.
        In a forked child the queue is its parent's: reading those tensors there waits forever on the
        parent's op queue (MindSpore's runtime does not survive a fork), and the records are the
        parent's anyway: nothing is done."""
        if os.getpid() != self.pid:
            return
        queue, self.queue = self.queue, []
        program_error: BaseException | None = None
        for name, record in queue:
            failures: list[tuple[BaseException, bool]] = []
            try:
                self.put(name, resolve(record, failures))
            except Exception as exc:
                self.on_error(name, exc)
            lost = [exc for exc, persisted in failures if persisted]
            if lost:  # values the record could not get: said in the error log
                self.on_error(name, lost[0])
            if program_error is None:
                program_error = next((exc for exc, _ in failures if isinstance(exc, RuntimeError)), None)
        if program_error is not None:
            raise program_error
