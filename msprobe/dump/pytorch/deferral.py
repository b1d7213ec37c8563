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
  ``.grad`` in C++), for the jobs up to the last one reading a tensor that does not require grad
  (:data:`BACKWARD_PASSES`);
* stop/step/exit (in :class:`~msprobe.dump.writer.RankStore`).

At L1 and mix the API tracer sees every call (recorded or not); at L0 :class:`MutationGuard`, a
function mode doing nothing else, is pushed for the same purpose. Writes torch cannot see (through a
``.numpy()`` view, a C extension, a backward pass accumulating into a ``.grad`` that was set by hand to a
tensor requiring grad) are not detected; ``MSPROBE_STAT_THREAD=0`` summarises everything
in the training thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# Torch families are drained only when the predicate says so; every other prefix always.
from msprobe.formats.record_names import TORCH_PREFIXES

IMPLICIT_MUTATORS = ("batch_norm", "instance_norm", "embedding", "backward", "resize")
IMPLICIT_EXACT = frozenset(("grad", "set_"))  # torch.autograd.grad; Tensor.set_
# Calls that run a backward pass. They write only ``.grad`` tensors (accumulated in place in C++), and
# a ``.grad`` does not require grad (with ``create_graph=True`` it may, but then the accumulation is out
# of place): such a call waits only for the jobs reading tensors that do not require grad, not for the
# forward's activations and parameters.
BACKWARD_PASSES = frozenset(("backward", "grad"))
# True only inside code dynamo traces (it folds the call to a constant); False when Python runs it.
_is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_compiling", lambda: False)
_NOT_INPLACE = frozenset(("__init__", "__index__", "__int__", "__invert__", "__iter__"))
_MAX_NORM_AT = 3  # F.embedding(input, weight, padding_idx, max_norm, ...)


def name_mutates(name: str) -> bool:
    """Whether an API of this name may write into its arguments (or, for backward, into ``.grad``)."""
    if name.startswith("__"):
        return (name.startswith("__i") and name not in _NOT_INPLACE) or name == "__setitem__"
    return name.endswith("_") or name in IMPLICIT_EXACT or any(m in name for m in IMPLICIT_MUTATORS)


def kwargs_mutate(kwargs: dict[str, Any]) -> bool:
    return bool(kwargs) and (kwargs.get("out") is not None or kwargs.get("inplace") is True)


def _embedding_renorms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``embedding`` writes its weight only to renormalise rows (``max_norm`` given)."""
    if kwargs and kwargs.get("max_norm") is not None:
        return True
    return len(args) > _MAX_NORM_AT and args[_MAX_NORM_AT] is not None


# APIs whose name says they may write, but whose arguments say whether this call does
_WRITES_IF = {"embedding": _embedding_renorms}


def mutates_by_name(api: str) -> bool:
    """Whether every call of this torch API may write (the name alone decides)."""
    return api not in _WRITES_IF and name_mutates(api)


def mutates_by_args(api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether this call writes because of its arguments (``out=``, ``inplace=True``, ``max_norm``)."""
    if kwargs_mutate(kwargs):
        return True
    check = _WRITES_IF.get(api)
    return check is not None and check(args, kwargs)


def call_mutates(prefix: str, api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if prefix not in TORCH_PREFIXES:
        return True
    return mutates_by_name(api) or mutates_by_args(api, args, kwargs)


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


_func_keys: dict[Any, tuple[str, str, bool]] = {}


def func_key(func: Any) -> tuple[str, str, bool] | None:
    """``(prefix, name, writes by name)`` of a function seen by a function mode: Tensor methods and
    operators get ``Tensor`` (so an in-place method names the tensor it writes), everything else
    ``Torch``; the flag is :func:`mutates_by_name`. Cached per function object (a few hundred calls a
    step); None if unhashable."""
    try:
        hit = _func_keys.get(func)
    except TypeError:
        return None
    if hit is None:
        qualname = getattr(func, "__qualname__", "") or ""
        prefix = "Tensor" if qualname.startswith(("TensorBase.", "Tensor.")) else "Torch"
        name = getattr(func, "__name__", "") or ""
        hit = (prefix, name, mutates_by_name(name))
        _func_keys[func] = hit
    return hit


def writes_only_with_kwargs(func: Any) -> bool:
    """Whether a call of ``func`` without keyword arguments never writes (neither its name nor a
    positional argument can say so: ``out=`` and ``inplace=True`` are keywords)."""
    key = func_key(func)
    return key is not None and not key[2] and key[1] not in _WRITES_IF


BeforeWrite = Callable[[Any, tuple[Any, ...], dict[str, Any]], None]


class MutationGuard(TorchFunctionMode):
    """L0 without API capture: lets ``before_write`` see every call (it waits for the queued
    summaries a call may write into)."""

    def __init__(self, before_write: BeforeWrite) -> None:
        super().__init__()
        self._before_write = before_write
        # functions seen so far that write only when given keywords: most calls (``p.grad``, views,
        # linear...) skip the check (a few hundred a step, mostly the optimizer's)
        self._reads_only: set[Any] = set()

    def __torch_function__(
        self, func: Any, types_: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if _is_compiling():  # traced by dynamo: nothing of ours in the graph, no guard on our state
            return func(*args, **(kwargs or {}))
        if not kwargs:
            try:
                safe = func in self._reads_only
            except TypeError:  # unhashable: the full check
                safe = False
            else:
                if not safe and writes_only_with_kwargs(func):
                    self._reads_only.add(func)
                    safe = True
            if safe:
                return func(*args)
        kwargs = kwargs or {}
        self._before_write(func, args, kwargs)
        return func(*args, **kwargs)
