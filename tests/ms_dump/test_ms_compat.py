"""Every private MindSpore API of the dump, on the pinned MindSpore: an upgrade that changes one fails."""

from __future__ import annotations

import ast
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import nn

import msprobe
from msprobe.dump.mindspore import ms_compat

COMPAT = Path(ms_compat.__file__).resolve()


class _Inner(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.ones(2, np.float32)), name="w")

    def construct(self, x):  # type: ignore[no-untyped-def]
        return x * self.w


class _Outer(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Inner()
        self.b = ms.Parameter(ms.Tensor(np.zeros(2, np.float32)), name="b")

    def construct(self, x):  # type: ignore[no-untyped-def]
        return self.inner(x) + self.b


class _Compiled(nn.Cell):
    @ms.jit
    def construct(self, x):  # type: ignore[no-untyped-def]
        return x + 1


def test_cells_and_parameters_are_the_direct_ones() -> None:
    outer = _Outer()
    assert list(ms_compat.child_cells(outer)) == ["inner"]
    assert ms_compat.child_cells(outer)["inner"] is outer.inner
    assert list(ms_compat.own_parameters(outer)) == ["b"]  # not the sub-Cell's w
    assert list(ms_compat.own_parameters(outer.inner)) == ["w"]


def test_a_jit_cell_is_recognised() -> None:
    assert ms_compat.is_jit_cell(_Compiled())
    assert not ms_compat.is_jit_cell(_Outer())


def test_backward_pre_hooks_are_the_cells_hook_dict() -> None:
    cell = _Outer()
    handle = cell.register_backward_pre_hook(lambda c, grad: None)
    hooks = ms_compat.backward_pre_hooks(cell)
    assert hooks is not None and len(hooks) == 1
    handle.remove()


def test_grad_recording_is_true_only_inside_a_gradient() -> None:
    seen: list[bool] = []

    def f(x):  # type: ignore[no-untyped-def]
        seen.append(ms_compat.grad_recording())
        return (x * x).sum()

    x = ms.Tensor(np.ones(3, np.float32))
    f(x)
    ms.value_and_grad(f)(x)
    assert seen == [False, True]


def test_the_hook_classes_and_the_jit_executor_exist() -> None:
    assert ms_compat.CellBackwardHook is not None and ms_compat.HookType is not None
    assert hasattr(ms_compat.HookType, "BackwardHook")
    assert hasattr(ms_compat.CellBackwardHook, "set_hook_fn")
    executor = ms_compat.jit_executor_class()
    assert executor is not None and callable(executor.__call__)
    pijit = ms_compat.pijit_context_class()  # jit(capture_mode="bytecode"): switched off in a window
    assert pijit is not None and callable(pijit.__enter__) and callable(pijit.__exit__)


def _private_mindspore_uses(path: Path) -> list[str]:
    """``from mindspore._x import``/``from mindspore.y import _z`` and ``mindspore._x``/``ms._x`` chains."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mindspore":
            private_module = any(p.startswith("_") for p in node.module.split("."))
            if private_module or any(a.name.startswith("_") for a in node.names):
                found.append(f"{path.name}:{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in ("mindspore", "ms", "ops", "nn"):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_private_uses(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("from mindspore._c_expression import x\nfrom mindspore.common.api import _e\nms._c.f()\n")
    assert len(_private_mindspore_uses(p)) == 3


def test_no_private_mindspore_api_outside_the_compat_module() -> None:
    root = Path(msprobe.__file__).resolve().parent
    found = [u for p in sorted(root.rglob("*.py")) if p != COMPAT for u in _private_mindspore_uses(p)]
    assert found == []
