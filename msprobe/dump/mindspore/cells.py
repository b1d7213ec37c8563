"""Cell records (L0/mix): ``Cell.{[i.]path}.{Class}.{forward|backward}.{n}`` and ``…parameters_grad``.

Hooks are MindSpore's own: a forward pre-hook (counter, construct stack), a forward hook with kwargs
(the forward record with direct parameters), ``register_backward_hook`` (grads of inputs and
outputs) and ``Parameter.register_hook`` for the parameter gradients. The model passed to
``start()`` is not recorded, only its descendants.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import mindspore as ms

from msprobe.dump.filters import ParamGradFilter
from msprobe.dump.mindspore.backward import make_cell_backward_hooks_copyable
from msprobe.dump.mindspore.ms_compat import child_cells, is_jit_cell, own_parameters
from msprobe.dump.naming import CallCounter
from msprobe.formats.record_names import BACKWARD, CELL, FORWARD, module_backward_name

if TYPE_CHECKING:
    from msprobe.dump.mindspore.service import MsDumpService


def _descend(cell: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Sub-Cells with their dotted paths; a jit Cell is yielded but not entered (its children run
    inside a compiled graph, where Python hooks cannot run)."""
    for name, child in child_cells(cell).items():
        if child is None:
            continue
        sub = f"{path}.{name}" if path else name
        yield sub, child
        if not is_jit_cell(child):
            yield from _descend(child, sub)


def _nothing() -> None:
    pass


def _has_bprop(cell: Any) -> bool:
    """A Cell with a custom ``bprop`` (also MindSpore's ``_RecomputeCell``): MindSpore silently ignores
    ``register_forward_hook`` on it, so only its pre-hook and backward hooks run."""
    return bool(getattr(cell, "has_bprop", False))


def walk(model: Any) -> list[tuple[str, Any]]:
    """``(prefix, cell)`` for every hooked Cell; a list/tuple model gets ``{i}.`` path prefixes."""
    roots = list(model) if isinstance(model, list | tuple) else [model]
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()
    for i, root in enumerate(roots):
        lead = f"{i}." if isinstance(model, list | tuple) else ""
        if is_jit_cell(root):  # compiled whole: its children run where no hook can
            continue
        for path, cell in _descend(root, ""):
            if id(cell) in seen:
                continue
            seen.add(id(cell))
            out.append((f"{CELL}.{lead}{path}.{type(cell).__name__}", cell))
    return out


class CellHooks:
    def __init__(self, service: MsDumpService) -> None:
        self.service = service
        self.counter = CallCounter()
        self.pending: dict[str, list[int]] = {}  # prefix -> forward indices awaiting their backward
        self.param_grads: dict[str, dict[str, Any]] = {}  # prefix -> {param: [summary]}
        self.grads_kept = ParamGradFilter(service.session.filter)  # which parameters_grad records stay
        self.parent_of: dict[str, str | None] = {}  # forward record -> enclosing Cell forward record
        self.float_input: dict[str, bool] = {}  # forward record -> had a floating-point tensor argument
        self.handles: list[Any] = []  # the cells' hooks
        self.param_handles: list[Any] = []  # the parameters' gradient hooks
        # the hooked Cells, held weakly: a net the user dropped is freed with its parameters
        self._cells: list[tuple[str, weakref.ref[Any]]] = []
        # (Cell prefix, id(parameter)): a Parameter shared by two Cells (tied weights) gets a hook per Cell,
        # so both Cells' parameters_grad records get its gradient (as 8.1.1 and the PyTorch dump)
        self._param_hooked: set[tuple[str, int]] = set()
        service.step_reset.append(self._reset)
        service.window_opened.append(self._resume)
        service.window_closed.append(self._pause)

    def _reset(self) -> None:
        self.counter.reset()
        self.pending.clear()
        self.param_grads.clear()
        self.grads_kept.reset()
        self.parent_of.clear()
        self.float_input.clear()

    def register(self, model: Any) -> int:
        make_cell_backward_hooks_copyable()
        self._cells = [(prefix, weakref.ref(cell)) for prefix, cell in walk(model)]
        self._hook_cells()
        return len(self._cells)

    def _hook_cells(self) -> None:
        for prefix, ref in self._cells:
            cell = ref()
            if cell is None:  # the user dropped the net
                continue
            self.handles.append(cell.register_forward_pre_hook(self._pre(prefix)))
            # always_call: the hook also runs when the forward raises, so the Cell leaves the stack
            self.handles.append(
                cell.register_forward_hook(self._post(prefix), with_kwargs=True, always_call=True)
            )
            self.handles.append(cell.register_backward_pre_hook(self._backward_begin(prefix)))
            self.handles.append(cell.register_backward_hook(self._backward(prefix)))

    def _unhook_cells(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pause(self) -> None:
        """The window closed: the cells' hooks come off until the next one. While a Cell has a
        backward hook, MindSpore wraps its inputs on every call, whether we record it or not, and an
        in-place write into such an input fails ("Not support view input for inplace op")."""
        self._unhook_cells()

    def _resume(self) -> None:
        if self._cells and not self.handles:
            self._hook_cells()

    def suspend(self, model_code: bool = True) -> Any:
        """Take the cells' hooks off while a jit call of model code runs (its compiler would compile
        the hooks of the Cells it calls into the graph, and fails on them); returns the undo. An
        optimizer's update calls no Cell of the model: its hooks stay."""
        svc = self.service
        # the window's switch, whichever thread calls (another thread's jit compiles Cells too)
        if not model_code or not self.handles or not (svc.session.running and svc.encoder is not None):
            return _nothing
        self._unhook_cells()
        return self._rehook_if_open

    def _rehook_if_open(self) -> None:
        """After a jit call: the hooks back unless the window closed meanwhile (a stop() from another
        thread), which keeps them off."""
        if self.service.session.running:
            self._resume()

    def remove(self) -> None:
        """Every hook of ours off the cells and parameters (a later ``register`` starts afresh)."""
        self._unhook_cells()
        for h in self.param_handles:
            h.remove()
        self.param_handles.clear()
        self._param_hooked.clear()
        self._cells = []

    # -- forward ----------------------------------------------------------------------------------
    def _pre(self, prefix: str) -> Any:
        def hook(cell: Any, args: Any) -> None:
            svc = self.service
            if svc.foreign_thread():  # another thread's call: not counted, not on our stack
                return
            index = self.counter.next(prefix)
            if not svc.running:
                return
            name = f"{prefix}.{FORWARD}.{index}"
            # may open the scope window, or at mix a listed Cell's whole-Cell mode; judged at the end
            svc.session.filter.begin(name)
            self.float_input[name] = any(
                isinstance(a, ms.Tensor) and a.dtype in ms.dtype.float_type for a in args
            )
            self.parent_of[name] = svc.parent()
            svc.put_construct(name, self.parent_of[name])
            self.pending.setdefault(prefix, []).append(index)
            if _has_bprop(cell):
                # no forward hook will end it: what runs inside belongs to the enclosing Cell
                svc.session.filter.end(name)
                self._placeholder(prefix, cell, passed=svc.session.filter.passes(name))
                return
            svc.cell_stack.append(name)

        return hook

    def _post(self, prefix: str) -> Any:
        def hook(cell: Any, args: Any, kwargs: Any, output: Any) -> None:
            svc = self.service
            stack = svc.cell_stack
            own = prefix + f".{FORWARD}."
            if not svc.running or not any(n.startswith(own) for n in stack):
                return
            while not stack[-1].startswith(own):  # Cells that never ended (defensive)
                stack.pop()
            name = stack.pop()
            if output is None and sys.exc_info()[0] is not None:
                # the forward raised (the user may catch it and go on): no record, no backward to wait for
                s = svc.session
                s.filter.end(name)
                pending = self.pending.get(prefix)
                if pending and f"{prefix}.{FORWARD}.{pending[-1]}" == name:
                    pending.pop()
                return
            s = svc.session
            mode = svc.config.data_mode
            # judged when the call ends, as 8.1.1 (its forward data hook runs before end_module) and
            # the PyTorch dump: a Cell that began before the window and ends inside it is recorded,
            # one that outlives the window is not
            passed = s.filter.passes(name)
            s.filter.end(name)  # the end Cell of a scope is included whole
            if svc.structure_only and passed:
                svc.finish_forward(name, None, output, False)  # stack.json only
                return
            if not mode.direction(FORWARD) or not passed:
                self._placeholder(prefix, cell, passed=passed)
                return
            record: dict[str, Any] | None = None
            if mode.side("input"):
                record = svc.encode_inputs(name, tuple(args), dict(kwargs or {}))

            def extra(rec: dict[str, Any]) -> None:
                assert svc.encoder is not None
                rec["parameters"] = svc.encoder.named(dict(own_parameters(cell)), name, "parameters")

            svc.finish_forward(name, record, output, mode.side("output"), extra)
            self._placeholder(prefix, cell, passed=True)

        return hook

    def _placeholder(self, prefix: str, cell: Any, passed: bool) -> None:
        """After a Cell's forward: its ``parameters_grad`` record, ``[null]`` per parameter until its
        gradient arrives (with no filter on, stored at once: right after the first forward record),
        and a hook on each parameter."""
        svc = self.service
        if svc.structure_only:
            return
        params = {k: p for k, p in own_parameters(cell).items() if getattr(p, "requires_grad", False)}
        if not params or not svc.config.data_mode.direction(BACKWARD):
            return
        store = svc.session.store
        if store is None:
            return
        grads = self.param_grads.setdefault(prefix, {k: [None] for k in params})
        if self.grads_kept.forward_ended(prefix, passed):
            svc.put(f"{prefix}.parameters_grad", grads)
        if self._flush_placeholders not in store.before_flush:  # a new store each step
            store.before_flush.append(self._flush_placeholders)
        for pname, param in params.items():
            if (prefix, id(param)) not in self._param_hooked:
                self._param_hooked.add((prefix, id(param)))
                self.param_handles.append(param.register_hook(self._param_hook(prefix, pname)))

    def _param_hook(self, prefix: str, pname: str) -> Any:
        def hook(grad: Any) -> None:
            svc = self.service
            store = svc.session.store
            if store is None or svc.encoder is None or prefix not in self.param_grads or not svc.running:
                return
            name = f"{prefix}.parameters_grad"
            if not self.grads_kept.keeps(prefix):
                return
            svc.inside = True
            try:
                self.param_grads[prefix].update(svc.encoder.named({pname: grad}, prefix, "parameters_grad"))
                self.param_grads[prefix][pname] = [self.param_grads[prefix][pname]]
                svc.put(name, dict(self.param_grads[prefix]))
            except Exception as exc:
                svc.session.record_error("param_grad_data_collect", name, exc, f", param_name={pname}")
            finally:
                svc.inside = False

        return hook

    def _flush_placeholders(self) -> None:
        """Before the json files are written: the placeholders of recorded Cells whose gradient never
        came stay (as in 8.1.1); the others were stored or dropped when it came."""
        for prefix, grads in self.param_grads.items():
            if self.grads_kept.unclaimed(prefix):
                self.service.put(f"{prefix}.parameters_grad", grads)

    # -- backward ---------------------------------------------------------------------------------
    def _backward_begin(self, prefix: str) -> Any:
        """A scope that starts at this Cell's backward opens here: what ran inside the Cell is in it."""

        def hook(cell: Any, grad_output: Any) -> None:
            svc = self.service
            if svc.foreign_thread():
                return
            pending = self.pending.get(prefix)
            if pending and svc.running:
                # a scope starting here opens; the Cell's parameters' gradients arrive after this
                passed = svc.session.filter.begin(f"{prefix}.{BACKWARD}.{pending[-1]}", whole_module=False)
                self.grads_kept.backward_began(prefix, passed)

        return hook

    def _backward(self, prefix: str) -> Any:
        def hook(cell: Any, grad_input: Any, grad_output: Any) -> None:
            svc = self.service
            if svc.foreign_thread():  # the backward of another thread's forward (not on ``pending``)
                return
            pending = self.pending.get(prefix)
            if not pending:
                return
            index = pending.pop()
            name = f"{prefix}.{BACKWARD}.{index}"
            if not svc.running:  # Cell hooks need the switch on (8.1.1), unlike API backward
                return
            if not svc.config.data_mode.direction(BACKWARD):
                return
            gi = grad_input if isinstance(grad_input, tuple) else (grad_input,)
            if not self.float_input.get(f"{prefix}.{FORWARD}.{index}", True):
                gi = ()  # no differentiable input: upstream records ``output: []``
            go = grad_output if isinstance(grad_output, tuple) else (grad_output,)
            # the construct entry first: the record's write takes it along (see Service.finish_forward)
            svc.put_construct(name, module_backward_name(self.parent_of.get(f"{prefix}.{FORWARD}.{index}")))
            svc.put_backward(name, gi, go)

        return hook
