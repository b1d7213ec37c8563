"""When deferred statistics must be drained: calls that may write into a tensor already queued.

The background worker (:mod:`msprobe.dump.background`) summarises tensors after their record was
captured, so a queued tensor must not change before its job ran. The training thread drains the
worker before:

* any call whose name says it writes in place (``add_``, ``__iadd__``, ``__setitem__``,
  ``_foreach_mul_``...), or that gets ``out=`` / ``inplace=True``;
* calls that update a buffer in place without saying so (the :data:`IMPLICIT_MUTATORS` table:
  ``batch_norm``'s running statistics, ``embedding``'s ``max_norm`` renormalisation...);
* every call of a family outside torch's own namespaces (``Distributed.*``, ``NPU.*``, custom APIs);
* backward passes (``Tensor.backward``, ``torch.autograd.backward/grad``: gradients accumulate into
  ``.grad`` in C++);
* stop/step/exit (in :class:`~msprobe.dump.writer.RankStore`).

At L1 and mix the API tracer sees every call (recorded or not); at L0 :class:`MutationGuard`, a
function mode doing nothing else, is pushed for the same purpose. Writes torch cannot see (through a
``.numpy()`` view, a C extension) are not detected; ``MSPROBE_STAT_THREAD=0`` summarises everything
in the training thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# Torch families whose calls are drained only when the predicate says so; every other prefix always.
TORCH_PREFIXES = frozenset(("Torch", "Tensor", "Functional", "VF", "Aten"))
IMPLICIT_MUTATORS = ("batch_norm", "instance_norm", "embedding", "backward", "resize")
IMPLICIT_EXACT = frozenset(("grad", "set_"))  # torch.autograd.grad; Tensor.set_
_NOT_INPLACE = frozenset(("__init__", "__index__", "__int__", "__invert__", "__iter__"))


def name_mutates(name: str) -> bool:
    """Whether an API of this name may write into its arguments (or, for backward, into ``.grad``)."""
    if name.startswith("__"):
        return (name.startswith("__i") and name not in _NOT_INPLACE) or name == "__setitem__"
    return name.endswith("_") or name in IMPLICIT_EXACT or any(m in name for m in IMPLICIT_MUTATORS)


def kwargs_mutate(kwargs: dict[str, Any]) -> bool:
    return bool(kwargs) and (kwargs.get("out") is not None or kwargs.get("inplace") is True)


def call_mutates(prefix: str, api: str, kwargs: dict[str, Any]) -> bool:
    return prefix not in TORCH_PREFIXES or name_mutates(api) or kwargs_mutate(kwargs)


def written_tensors(prefix: str, api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any] | None:
    """The tensors a mutating call writes when that is certain (``self`` of an in-place Tensor method,
    ``out=`` of a torch function); None when it is not (then the whole queue is drained)."""
    if prefix not in TORCH_PREFIXES or api in IMPLICIT_EXACT or any(m in api for m in IMPLICIT_MUTATORS):
        return None
    out = kwargs.get("out") if kwargs else None
    if out is not None:
        if kwargs.get("inplace") is True or (prefix == "Tensor" and name_mutates(api)):
            return None
        outs = list(out) if isinstance(out, list | tuple) else [out]
        return outs if all(isinstance(t, torch.Tensor) for t in outs) else None
    if prefix == "Tensor" and name_mutates(api) and args and isinstance(args[0], torch.Tensor):
        return [args[0]]
    return None


_name_cache: dict[Any, bool] = {}


def func_mutates(func: Any, kwargs: dict[str, Any] | None) -> bool:
    """For unrecorded calls seen by a function mode (cached per function object)."""
    try:
        hit = _name_cache.get(func)
    except TypeError:
        hit = None
    if hit is None:
        hit = name_mutates(getattr(func, "__name__", "") or "")
        try:
            _name_cache[func] = hit
        except TypeError:
            pass
    return hit or (kwargs is not None and kwargs_mutate(kwargs))


class MutationGuard(TorchFunctionMode):
    """L0 without API capture: drain the worker before any call that may write in place."""

    def __init__(self, drain: Callable[[], None], busy: Callable[[], bool]) -> None:
        super().__init__()
        self._drain = drain
        self._busy = busy

    def __torch_function__(
        self, func: Any, types_: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if self._busy() and func_mutates(func, kwargs):
            self._drain()
        return func(*args, **kwargs)
