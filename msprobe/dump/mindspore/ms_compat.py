"""Every private MindSpore API the dump uses, in one place (nothing else in msprobe reads one).

``tests/ms_dump/test_ms_compat.py`` exercises each name below on the MindSpore this project pins, so
an upgrade that removes or changes one fails there instead of somewhere in a dump. Where a MindSpore
without the API can still be served, the shim says how (``None``, or nothing recorded).
"""

from __future__ import annotations

import importlib
from typing import Any

try:  # MindSpore >= 2.9
    from mindspore.graph.api import _pynative_executor
except ImportError:  # pragma: no cover - older MindSpore
    from mindspore.common.api import _pynative_executor

try:  # the identity op an nn.Cell backward hook applies to its inputs and outputs
    from mindspore.ops.operations._inner_ops import CellBackwardHook
except ImportError:  # pragma: no cover - no API backward records then
    CellBackwardHook = None

try:  # which of a CellBackwardHook's functions ``set_hook_fn`` sets
    from mindspore._c_expression import HookType
except ImportError:  # pragma: no cover
    HookType = None

# where the class that runs a ``mindspore.jit`` function lives, and its names, newest first
_EXECUTOR_MODULES = ("mindspore.graph.api", "mindspore.common.api")
_EXECUTOR_CLASSES = ("_JitExecutor", "_MindsporeFunctionExecutor")


def grad_recording() -> bool:
    """Whether the current PyNative call is recorded for a gradient (inside ``value_and_grad``)."""
    try:
        return bool(_pynative_executor.requires_grad())
    except Exception:  # pragma: no cover - defensive
        return False


def child_cells(cell: Any) -> dict[str, Any]:
    """A Cell's direct sub-Cells by attribute name (``None`` where one was set to None)."""
    return cell._cells  # type: ignore[no-any-return]


def own_parameters(cell: Any) -> dict[str, Any]:
    """A Cell's direct Parameters by attribute name (not its sub-Cells')."""
    return cell._params  # type: ignore[no-any-return]


def backward_pre_hooks(cell: Any) -> Any:
    """The dict of a Cell's backward pre-hooks (None before the first is registered)."""
    return getattr(cell, "_backward_pre_hook", None)


def is_jit_cell(cell: Any) -> bool:
    """A Cell whose ``construct`` is decorated with ``mindspore.jit`` (compiled as one graph)."""
    return bool(getattr(type(cell).construct, "__wrapped_by_jit__", False))


def jit_executor_class() -> Any:
    """The class whose ``__call__`` runs a ``mindspore.jit`` function, or None."""
    for mod_name in _EXECUTOR_MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        for cls_name in _EXECUTOR_CLASSES:
            cls = getattr(mod, cls_name, None)
            if cls is not None:
                return cls
    return None


def pijit_context_class() -> Any:
    """The context manager that switches on ``jit(capture_mode="bytecode")`` capture (PIJit), or None."""
    for mod_name in ("mindspore.graph._utils.pijit_context", "mindspore.common.jit_context"):
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        cls = getattr(mod, "PIJitCaptureContext", None)
        if cls is not None:
            return cls
    return None
