"""Primitive records (L1/mix with ``start(model)``): ``Primitive.{attr}.{Class}.{n}.{forward|backward}``.

Every Primitive instance found as an attribute of a Cell of the model (the root included) gets its
class swapped for a subclass whose ``__call__`` reports to the service.
The counter runs on every call, dumping on or off, per ``attr.Class`` across instances. Backward:
each tensor output passes through ``HookBackward`` (its grad -> record ``input``) and each tensor
input too (grads -> record ``output`` in arrival order, inputs without a grad omitted), as upstream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mindspore as ms
from mindspore.ops.primitive import Primitive

from msprobe.dump.mindspore.backward import hook_backward
from msprobe.dump.mindspore.ms_compat import CellBackwardHook, grad_recording
from msprobe.dump.naming import CallCounter
from msprobe.formats.record_names import BACKWARD, FORWARD, module_backward_name

if TYPE_CHECKING:
    from msprobe.dump.mindspore.service import MsDumpService

_subclasses: dict[type, type] = {}
_active: dict[int, PrimitiveHooks] = {}  # id(hooked primitive) -> its hooks (kept alive in ``_keep``)


class PrimitiveHooks:
    def __init__(self, service: MsDumpService) -> None:
        self.service = service
        self.names: dict[int, str] = {}  # id(primitive) -> "Primitive.{attr}.{Class}"
        self._keep: list[Any] = []
        self.counter = CallCounter()
        service.step_reset.append(self.counter.reset)

    def register(self, cells: list[Any]) -> int:
        """Hook the Primitive attributes of ``cells``; returns how many were newly hooked."""
        count = 0
        for cell in cells:
            for attr, value in list(vars(cell).items()):
                if not isinstance(value, Primitive) or id(value) in self.names:
                    continue
                if CellBackwardHook is not None and isinstance(value, CellBackwardHook):
                    continue  # MindSpore's own backward-hook machinery (a user's Cell hook), not a model op
                cls = type(value)
                base = cls.__bases__[0] if cls in _subclasses.values() else cls
                self.names[id(value)] = f"Primitive.{attr}.{base.__name__}"
                self._keep.append(value)
                _active[id(value)] = self
                try:
                    value.__class__ = _hooked_class(base, self)
                except TypeError:
                    continue
                count += 1
        return count

    def restore(self) -> None:
        for prim in self._keep:
            _active.pop(id(prim), None)
            cls = type(prim)
            if cls in _subclasses.values():
                prim.__class__ = cls.__bases__[0]
        self._keep.clear()
        self.names.clear()

    def suspend(self, model_code: bool = True) -> Any:
        """Give the hooked Primitives their own class back (while jit compiles); returns the undo."""
        swapped = [(p, type(p)) for p in self._keep if type(p) in _subclasses.values()]
        for prim, cls in swapped:
            prim.__class__ = cls.__bases__[0]

        def resume() -> None:
            for prim, cls in swapped:
                prim.__class__ = cls

        return resume

    # -- one call ---------------------------------------------------------------------------------
    def call(self, prim: Any, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        base = self.names.get(id(prim))
        svc = self.service
        if base is None or svc.foreign_thread():  # another thread's call: not counted either
            return original(prim, *args, **kwargs)
        index = self.counter.next(base)
        if svc.inside or not svc.running:
            return original(prim, *args, **kwargs)
        s = svc.session
        mode = svc.config.data_mode
        name = f"{base}.{index}.{FORWARD}"
        bname = f"{base}.{index}.{BACKWARD}"
        fwd = mode.direction(FORWARD)
        record = None
        if fwd and not svc.structure_only and svc.check(name) and mode.side("input"):
            record = svc.encode_inputs(name, args, kwargs)
        parent = svc.parent()
        backward = mode.direction(BACKWARD) and grad_recording()
        grads_in: list[Any] = []
        grads_out: list[Any] = []
        if backward:
            try:
                args = tuple(
                    hook_backward(a, lambda g: self._on_input_grad(bname, parent, grads_in, grads_out, g))
                    if isinstance(a, ms.Tensor)
                    else a
                    for a in args
                )
            except Exception as exc:
                s.record_error("backward_hook_register", name, exc)
                backward = False
        svc.inside = True
        try:
            out = original(prim, *args, **kwargs)
        finally:
            svc.inside = False
        if backward:
            out = self._hook_outputs(out, bname, parent, grads_in, grads_out)
        svc.put_construct(name, parent)  # before the record, whose write takes it along
        svc.finish_forward(
            name, record, out, fwd and not svc.structure_only and svc.check(name) and mode.side("output")
        )
        return out

    def _hook_outputs(
        self, out: Any, bname: str, parent: str | None, grads_in: list[Any], grads_out: list[Any]
    ) -> Any:
        def on_out(g: Any) -> None:
            grads_out.append(g)
            self._write(bname, parent, grads_in, grads_out)

        if isinstance(out, ms.Tensor):
            return hook_backward(out, on_out)
        if isinstance(out, tuple) and any(isinstance(o, ms.Tensor) for o in out):
            return tuple(hook_backward(o, on_out) if isinstance(o, ms.Tensor) else o for o in out)
        return out

    def _on_input_grad(
        self, bname: str, parent: str | None, grads_in: list[Any], grads_out: list[Any], g: Any
    ) -> None:
        grads_in.append(g)
        self._write(bname, parent, grads_in, grads_out)

    def _write(self, bname: str, parent: str | None, grads_in: list[Any], grads_out: list[Any]) -> None:
        svc = self.service
        svc.put_construct(bname, module_backward_name(parent))  # before the record (see finish_forward)
        svc.put_backward(bname, grads_in, grads_out)


def _hooked_class(cls: type, hooks: PrimitiveHooks) -> type:
    sub = _subclasses.get(cls)
    if sub is None:
        original = cls.__call__

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            owner = _active.get(id(self))
            if owner is None:
                return original(self, *args, **kwargs)
            return owner.call(self, original, args, kwargs)

        sub = type(cls.__name__, (cls,), {"__call__": __call__, "__module__": cls.__module__})
        _subclasses[cls] = sub
    return sub
