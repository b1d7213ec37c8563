"""Backward capture for PyNative MindSpore: the two identity ops MindSpore offers for gradients.

* :func:`cell_backward_hook` - one ``CellBackwardHook`` applied to a call's positional inputs and to
  its outputs (what an ``nn.Cell`` backward hook does internally). Its callback receives the grads of
  *all* tensor inputs at once, in argument order, plus the grads of the outputs; used for API records.
* :func:`hook_backward` - ``ops.HookBackward`` on one tensor: its callback gets that tensor's grad as it
  arrives; used for Primitive records, whose backward ``output`` is in arrival order.

Both only make sense while MindSpore records a graph for autodiff (:func:`grad_recording`).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import mindspore as ms
from mindspore import ops

from msprobe.dump.mindspore.ms_compat import CellBackwardHook, HookType, backward_pre_hooks

BackwardFn = Callable[[tuple[Any, ...], tuple[Any, ...]], object]


def make_cell_backward_hooks_copyable() -> None:
    """``copy.deepcopy`` of a Cell holding a backward (pre-)hook fails in MindSpore 2.10
    (``Primitive.__deepcopy__`` calls ``CellBackwardHook(**init_attrs)`` with a ``name`` it does not
    take), and our hooks are on every Cell of the model, so an EMA or teacher copy would fail for the
    rest of the process. The class gets a ``__deepcopy__`` that makes a fresh hook for the copied Cell
    and its copied hook dict."""
    if CellBackwardHook is None or getattr(CellBackwardHook.__deepcopy__, "_msprobe", False):
        return

    def __deepcopy__(self: Any, memo: dict[int, Any]) -> Any:
        cell = memo.get(id(self.cell), self.cell)
        hooks = self.hook_dict()
        new_hooks = copy.deepcopy(hooks, memo) if hooks is not None else OrderedDict()
        cell_id = f"{type(cell).__name__}({id(cell)})" if cell is not None else self.cell_id
        new = type(self)(cell_id, cell, new_hooks)
        if cell is not None and hooks is backward_pre_hooks(self.cell):
            new.register_backward_pre_hook()  # the same kind of hook as the original
        else:
            new.register_backward_hook()
        memo[id(self)] = new
        return new

    __deepcopy__._msprobe = True  # type: ignore[attr-defined]
    CellBackwardHook.__deepcopy__ = __deepcopy__


def tensor_leaves(value: Any) -> list[Any]:
    """The MindSpore tensors in ``value`` (lists, tuples and dict values walked), in order."""
    if isinstance(value, ms.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [leaf for v in value for leaf in tensor_leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in tensor_leaves(v)]
    return []


def _replace_leaves(value: Any, new: list[Any]) -> Any:
    """Rebuild ``value`` with its tensor leaves taken in order from ``new`` (consumed)."""
    if isinstance(value, ms.Tensor):
        return new.pop(0)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_replace_leaves(v, new) for v in value)
    if isinstance(value, list):
        return [_replace_leaves(v, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace_leaves(v, new) for k, v in value.items()}
    return value


def hook_outputs(apply: Callable[[Any], Any], out: Any) -> Any:
    """Pass the tensor leaves of ``out`` through ``apply`` (an identity that sees their grads)."""
    if isinstance(out, ms.Tensor):
        return apply(out)
    leaves = tensor_leaves(out)
    if not leaves:
        return out
    hooked = apply(tuple(leaves))
    return _replace_leaves(out, list(hooked))


class _Hooks(OrderedDict):  # type: ignore[type-arg]
    """CellBackwardHook keeps a weak reference to its hook dict; a plain dict cannot be weak-referenced."""


def cell_backward_hook(name: str, on_backward: BackwardFn) -> Callable[[Any], Any] | None:
    """An identity ``f(args) -> args`` to apply to the inputs tuple and then to the output.

    ``on_backward(grad_inputs, grad_outputs)`` runs once the grads of the inputs are known.
    The hook function is set directly (not with ``CellBackwardHook.register_backward_hook``, whose
    closure refers to the primitive: a cycle through the C++ side that Python's collector cannot see,
    so one primitive and its closures per recorded call would live for the rest of the process).
    It refers to nothing that refers back to the primitive, which dies with the autodiff graph.
    """
    if CellBackwardHook is None or HookType is None:
        return None
    hooks = _Hooks()  # the constructor wants a weak-referenceable dict; our hook does not use it
    prim = CellBackwardHook(name, None, hooks)
    pending: list[Any] = []  # the grads of the outputs (first call), until the inputs' grads come

    def hook_backward_grad(grad: Any) -> Any:
        if not pending:
            pending.append(grad)
            return name  # as MindSpore's own hook: the first call waits for the second
        grad_output = pending.pop()
        gi = grad if isinstance(grad, tuple) else (grad,)
        go = grad_output if isinstance(grad_output, tuple) else (grad_output,)
        on_backward(gi, go)
        return grad

    prim.set_hook_fn(hook_backward_grad, HookType.BackwardHook)
    return prim  # type: ignore[no-any-return]


def hook_backward(tensor: Any, on_grad: Callable[[Any], None]) -> Any:
    """``tensor`` passed through ``ops.HookBackward``; ``on_grad(grad)`` when its grad arrives."""

    def fn(grad: Any) -> None:
        on_grad(grad[0] if isinstance(grad, tuple) and len(grad) == 1 else grad)

    return ops.HookBackward(fn)(tensor)
