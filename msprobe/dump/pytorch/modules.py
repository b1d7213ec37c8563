"""Module-level capture (levels L0 and mix, upstream 8.1.1): forward/backward records of every
descendant of the model passed to ``start()``, direct parameters, parameter gradients, construct.json.

The hooks are put on the model at every effective ``start()`` and taken off at ``stop()``/``step()``
(:meth:`ModuleDumper.install` / :meth:`ModuleDumper.uninstall`), with, at mix, the optimizer/clip_grad
parents (:mod:`.parents`). Between ``stop()`` and the next ``start()`` nothing of ours is on the model
or in torch. Backward data is read off the autograd graph by :mod:`.module_backward` (no node is
inserted, so the gradient sums, and training, stay bitwise as without the dump; torch is not patched);
``Module.X.backward.N`` pairs with ``Module.X.forward.N``.

One module call's forward record, its backward capture and its parameter gradients share their
naming and numbering state, so they stay in one class.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch

from msprobe.dump.filters import ParamGradFilter
from msprobe.dump.frontdoor import FirstModel
from msprobe.dump.pytorch import module_backward
from msprobe.dump.pytorch.encode import quiet
from msprobe.dump.pytorch.nocompile import no_compile
from msprobe.dump.pytorch.parents import ScopeParents
from msprobe.dump.pytorch.recompute import in_recomputation
from msprobe.dump.pytorch.recorder import Recorder
from msprobe.dump.pytorch.torch_compat import (
    DisableTorchFunction,
    direct_parameters,
    eval_frame_hooks,
    jit_tracing_state,
    wrap_engine_backward,
)
from msprobe.dump.stack import capture_stack
from msprobe.formats.record_names import BACKWARD, FORWARD, module_backward_name

Active = Callable[[], bool]
Hook = Callable[..., Any]
_Hooks = tuple[Hook, Hook, Hook]  # forward pre, post, and the unwinding of a call that raised


class _BackwardCall:
    """One module call's backward: its record name and, once begun, (parent, grad_output)."""

    __slots__ = ("begun", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.begun: list[tuple[str | None, list[Any]]] = []


class ModuleDumper:
    def __init__(self, recorder: Recorder) -> None:
        self.rec = recorder
        self._off = recorder.idle
        self.registered = False  # a model was given to start() (its hooks are on while dumping)
        self._first_model = FirstModel()
        self.installed = False  # our hooks are on
        self._started = False  # between install() and uninstall(), hooks or not
        # what install() puts on (model), and the module_dump() hooks: the modules are held weakly, so
        # that a model the user dropped (a notebook cell run again, a sweep's next trial) is freed with
        # its parameters instead of living as long as the process
        self._hooks: list[tuple[weakref.ref[torch.nn.Module], _Hooks]] = []
        self._named: list[tuple[weakref.ref[torch.nn.Module], _Hooks]] = []
        self.forward_stack: list[str] = []
        self.backward_stack: list[str] = []
        self.handles: list[Any] = []
        self._grad_records: dict[str, dict[str, Any]] = {}  # parameters_grad record -> value (this step)
        # parameters whose gradient arrived since the record was last stored: the record is stored once
        # all its parameters have reported (one encoding per module and backward, not per parameter),
        # or at the next flush for parameters that got no gradient
        self._grad_reported: dict[str, set[str]] = {}
        self._grads_kept = ParamGradFilter(recorder.filter)  # which parameters_grad records stay
        self._param_records: dict[int, list[tuple[str, str]]] = {}  # id(parameter) -> (record, name)
        self._captures: list[module_backward.Capture] = []  # this step's, released at its end
        self._parents = ScopeParents(recorder, self.forward_stack)
        self._unguard_backward: Callable[[], None] | None = None  # undoes _guard_backward
        # wrapped once (``no_compile`` wrappers are not free); a call's own state is bound by partial
        self._begin_hook = no_compile(self._backward_begin)
        self._end_hook = no_compile(self._backward_end)
        self._param_grad_hook = no_compile(self._param_grad)

    # -- registration -----------------------------------------------------------------------------
    def register(self, model: Any) -> None:
        """The model whose descendants are hooked from now on, at every :meth:`install` (the first
        model given to ``start()`` stays the one, as upstream)."""
        if not self._first_model.take(model):
            return
        self.registered = True
        models = list(model) if isinstance(model, list | tuple) else [model]
        indexed = isinstance(model, list | tuple)
        for i, root in enumerate(models):
            for name, module in root.named_modules():
                if module is root or not name or type(module).__name__ == "FullyShardedDataParallel":
                    continue
                if isinstance(module, torch.jit.ScriptModule):  # takes no Python hooks
                    continue
                hooks = self._make_hooks(module, f"{i}.{name}" if indexed else name)
                self._hooks.append((weakref.ref(module), hooks))

    def hook_named(self, module: torch.nn.Module, dump_name: str, active: Active) -> None:
        """``module_dump(module, name)``: a non-recursive hook named by the user, live while ``active()``
        (from now if dumping is on, else from the next ``start()``)."""
        hooks = self._make_hooks(module, dump_name, active)
        self._named.append((weakref.ref(module), hooks))
        if self.installed:
            self._attach(module, hooks)
        elif self._started:
            self.install()

    def is_named(self, module: torch.nn.Module) -> bool:
        """Whether ``module_dump()`` hooked this very module (a deep copy of it has inert hooks)."""
        return any(ref() is module for ref, _ in self._named)

    def install(self) -> None:
        """``start()``: every hook on, with what torch needs meanwhile."""
        self._started = True
        if self.installed or not (self._hooks or self._named):
            return
        self.installed = True
        _own_hooks_never_compiled()
        for ref, hooks in (*self._hooks, *self._named):
            module = ref()
            if module is not None:  # else the user dropped it
                self._attach(module, hooks)
        if self._hooks and self.rec.config.level == "mix":
            self._parents.install()
        if self.rec.config.data_mode.direction(BACKWARD):
            self._guard_backward()

    def uninstall(self) -> None:
        """``stop()``/``step()``: every hook off, torch as it was."""
        self._close_open_calls()
        self._started = False
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self._param_records.clear()
        self._release_captures()
        self._parents.remove()
        if self._unguard_backward is not None:
            self._unguard_backward()
            self._unguard_backward = None
        self.installed = False

    def _guard_backward(self) -> None:
        """A backward pass that raises (an out-of-memory error caught and retried, a
        ``detect_anomaly`` NaN error skipped) ends the module backward calls it began: torch runs
        no hook for them, and without this they would stay on the stack as the parents of every later
        backward call of the window."""
        if self._unguard_backward is not None:
            return
        stack = self.backward_stack

        def guard(run_backward: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(run_backward)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                depth = len(stack)
                try:
                    return run_backward(*args, **kwargs)
                except BaseException:
                    with self.rec.lock:
                        self._close_backward_calls(depth)
                    raise

            return guarded

        self._unguard_backward = wrap_engine_backward(guard)

    def _close_backward_calls(self, depth: int) -> None:
        """The backward calls begun above ``depth`` end: off the stack, construct entries stored."""
        store = self.rec.store
        for i in range(depth, len(self.backward_stack)):
            if store is not None:
                store.put_construct(self.backward_stack[i], self.backward_stack[i - 1] if i else None)
        del self.backward_stack[depth:]

    def _close_open_calls(self) -> None:
        """Module calls still open as the window closes: their construct entries are stored, so every
        parent named in construct.json is a key of it. torch runs no forward hook, not even an
        ``always_call`` one, when a ``KeyboardInterrupt`` (or ``SystemExit``) leaves a forward, and an
        interrupted backward never ends."""
        store = self.rec.store
        for stack in (self.forward_stack, self.backward_stack):
            if store is not None:
                for i, name in enumerate(stack):
                    store.put_construct(name, stack[i - 1] if i else None)
            stack.clear()

    def _attach(self, module: torch.nn.Module, hooks: _Hooks) -> None:
        pre, post, unwind = (_OwnHook(h, module, arity) for h, arity in zip(hooks, (2, 3, 3)))
        self.handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        # after the forward hooks already there (8.1.1 puts its own first): the record holds the output
        # the model goes on with when a user hook replaces it
        self.handles.append(module.register_forward_hook(post, with_kwargs=True))
        self.handles.append(module.register_forward_hook(unwind, with_kwargs=True, always_call=True))

    def _make_hooks(self, module: torch.nn.Module, path: str, active: Active | None = None) -> _Hooks:
        """The hooks of one module, made once (``no_compile`` wrappers are not free)."""
        prefix = f"Module.{path}.{type(module).__name__}"
        backward = self.rec.config.data_mode.direction(BACKWARD)
        # per call, innermost last: (name, parent, the inputs' autograd edges at the call), or None
        # for a call not recorded
        pending: list[tuple[str, str | None, module_backward.Inputs | None] | None] = []
        posted = [False]  # post ran for the innermost call that ended: unwind has nothing to do

        def pre(mod: Any, args: Any, kwargs: Any) -> None:
            if self.rec.foreign_thread():  # another thread's call: not ours, and not on our stacks
                return
            if self._off() or (active is not None and not active()) or jit_tracing_state() is not None:
                pending.append(None)
                return
            if not self.forward_stack:
                self.rec.outermost_call_begins()
            name = f"{prefix}.{FORWARD}.{self.rec.counter.next(prefix + '.' + FORWARD)}"
            self._parents.prune()
            self.rec.filter.begin(name)
            inputs = self._inputs(name, args, kwargs) if backward else None
            parent = self.forward_stack[-1] if self.forward_stack else None
            pending.append((name, parent, inputs))
            self.forward_stack.append(name)
            store = self.rec.store
            if store is not None:
                store.put_opened(name, parent)

        def post(mod: Any, args: Any, kwargs: Any, output: Any) -> None:
            if self.rec.foreign_thread() or not pending:  # another thread's call; hooked during the call
                return
            posted[0] = True
            call = pending.pop()
            if call is None:
                return
            name, parent, inputs = call
            ok = self.rec.filter.passes(name)  # judged at the call's end, as 8.1.1
            if not self._end_call(name, parent):
                return
            if ok and not self._off():
                self._guarded(self._record_forward, name, prefix, mod, args, kwargs, output)
            if backward and not self._off():
                self._guarded(self._param_grad_placeholder, f"{prefix}.parameters_grad", mod, ok)
            if backward:
                self._guarded(self._watch_backward, name, output, inputs, args, graph=True)

        def unwind(mod: Any, args: Any, kwargs: Any, output: Any) -> None:
            """After post, or alone when the forward (or a hook before post) raised: then the call
            ends without a record, and its children keep a parent in construct.json."""
            if self.rec.foreign_thread():
                return
            if posted[0]:
                posted[0] = False
                return
            call = pending.pop() if pending else None
            if call is not None:
                self._end_call(call[0], call[1])

        return no_compile(pre), no_compile(post), no_compile(unwind)

    def _end_call(self, name: str, parent: str | None) -> bool:
        """A module call ends: off the stack, its construct entry stored; whether a store is open."""
        if self.forward_stack:
            self.forward_stack.pop()
        self.rec.filter.end(name)
        store = self.rec.store
        if store is None:
            return False
        store.put_construct(name, parent)  # in completion order, as 8.1.1 writes them
        return True

    def _inputs(self, name: str, args: Any, kwargs: Any) -> module_backward.Inputs | None:
        try:
            with DisableTorchFunction():
                return module_backward.inputs_needing_grad(tuple(args), dict(kwargs))
        except Exception as exc:  # never the user's forward: this call gets no backward record
            self.rec.record_error("backward_hook_register", name, exc)
            return None

    def _watch_backward(
        self, forward: str, output: Any, inputs: module_backward.Inputs | None, args: Any
    ) -> None:
        """Record ``forward``'s backward as ``...backward.N`` (the forward's N) when it runs."""
        call = _BackwardCall(module_backward_name(forward))
        with DisableTorchFunction():
            capture = module_backward.watch(
                output,
                inputs,
                functools.partial(self._begin_hook, call),
                functools.partial(self._end_hook, call),
                tuple(args),
            )
        if capture is not None:
            self._captures.append(capture)

    def _backward_begin(self, call: _BackwardCall, grad_output: list[Any]) -> None:
        if self._off():
            return
        with self.rec.lock:  # autograd may run this in its own thread
            parent = self.backward_stack[-1] if self.backward_stack else None
            call.begun.append((parent, grad_output))
            self.backward_stack.append(call.name)
            store = self.rec.store
            if store is not None:
                store.put_opened(call.name, parent)
            # a scope starting at this backward opens at its begin: its children's backward is inside
            passed = self.rec.filter.begin(call.name, whole_module=False)
            self._grads_kept.backward_began(call.name.rsplit(".", 2)[0], passed)

    def _backward_end(self, call: _BackwardCall, grad_input: list[Any]) -> None:
        with self.rec.lock:  # autograd may run this in its own thread
            if not call.begun:
                return
            parent, grad_output = call.begun.pop()
            if self.backward_stack:
                self.backward_stack.pop()
            store = self.rec.store
            if store is None:
                return
            name = call.name
            record = self.rec.filter.check(name)
            store.put_construct(name, parent)
            if record:
                outs = [g for g in grad_output if g is not None]
                self._guarded(self._record_backward, name, grad_input, outs)

    def _release_captures(self) -> None:
        """Calls whose backward did not run (yet): their hooks go, with what they hold."""
        for capture in self._captures:
            capture.release()
        self._captures.clear()
        module_backward.release_leaf_hooks()

    def _guarded(self, fn: Callable[..., None], record: str, *args: Any, graph: bool = False) -> None:
        """``fn(record, *args)``; a record that could not be made goes to dump_error_info.log.
        ``graph``: ``fn`` only reads the autograd graph and puts hooks on it, and runs as the
        forward ran (grad mode and torch.func transforms as they are: a transform's leaf reaches its
        gradient accumulator only while its transform is active); else inside :class:`quiet`."""
        was = self.rec.enter()
        try:
            if graph:
                fn(record, *args)
                return
            with quiet():
                fn(record, *args)
        except Exception as exc:
            self.rec.record_error(fn.__name__.lstrip("_"), record, exc)
        finally:
            self.rec.leave(was)

    # -- records ----------------------------------------------------------------------------------
    def _record_forward(
        self, name: str, prefix: str, mod: torch.nn.Module, args: Any, kwargs: Any, output: Any
    ) -> None:
        svc = self.rec
        store, enc = svc.store, svc.encoder
        if store is None or enc is None:
            return
        mode = svc.config.data_mode
        if not mode.direction(FORWARD):
            return
        params = direct_parameters(mod)
        store.put_stack(name, capture_stack(None, (), None))
        record: dict[str, Any] = {}
        if mode.side("input"):
            record["input_args"] = enc.args(tuple(args), name)
            record["input_kwargs"] = enc.kwargs(dict(kwargs), name)
        if mode.side("output"):
            record["output"] = enc.output(output, name)
        record["parameters"] = {p: enc.value(t, name, "parameters", (p,)) for p, t in params}
        record["is_recompute"] = in_recomputation()
        store.put(name, record)

    def _param_grad_placeholder(self, record: str, mod: torch.nn.Module, forward_passed: bool) -> None:
        """After a module's forward: its ``parameters_grad`` record, ``[null]`` per parameter until
        its gradient arrives, and a hook on each parameter."""
        store = self.rec.store
        if store is None:
            return
        value = self._grad_records.get(record)
        if value is None:
            params = [(p, t) for p, t in direct_parameters(mod) if t.requires_grad]
            if not params:
                return
            value = self._grad_records[record] = {p: [None] for p, _ in params}
            self._grad_reported[record] = set()
            if self._flush_param_grads not in store.before_flush:  # a new store each step
                store.before_flush.append(self._flush_param_grads)
            for p, t in params:
                # one hook per parameter, reporting to every module sharing it (tied weights)
                owners = self._param_records.get(id(t))
                if owners is None:
                    owners = self._param_records[id(t)] = []
                    self.handles.append(t.register_hook(functools.partial(self._param_grad_hook, owners)))
                if (record, p) not in owners:
                    owners.append((record, p))
        if self._grads_kept.forward_ended(_module_of(record), forward_passed):
            store.put(record, value)

    def _param_grad(self, owners: list[tuple[str, str]], grad: torch.Tensor) -> None:
        if self._off():
            return
        # One gradient of a parameter that several modules own (tied weights) is written once: every
        # owner kept for this gradient names that file, and every one of them is rewritten with the
        # next gradient, so none names contents the file no longer holds. Keyed by whether the
        # record's tensors are saved at all (a save filter may differ between the owners).
        delivered: dict[bool, Any] = {}
        for record, pname in owners:
            self._guarded(self._record_param_grad, record, pname, grad, delivered)

    def _record_param_grad(
        self, record: str, pname: str, grad: torch.Tensor, delivered: dict[bool, Any] | None = None
    ) -> None:
        value = self._grad_records.get(record)
        store, enc = self.rec.store, self.rec.encoder
        if value is None or store is None or enc is None:
            return
        if not self._grads_kept.keeps(_module_of(record)):
            return
        saves = enc.writer is not None and (enc.save_filter is None or enc.save_filter(record))
        if delivered is not None and saves in delivered:
            value[pname] = [delivered[saves]]
        else:
            encoded = enc.value(grad, record, pname, ())
            if delivered is not None:
                delivered[saves] = encoded
            value[pname] = [encoded]
        reported = self._grad_reported.setdefault(record, set())
        reported.add(pname)
        if len(reported) >= len(value):
            reported.clear()
            store.put(record, value)

    def _flush_param_grads(self) -> None:
        """Before the json files are written: store the records still waiting for a parameter that
        got no gradient."""
        store = self.rec.store
        if store is None:
            return
        for record, reported in self._grad_reported.items():
            if reported:
                reported.clear()
                store.put(record, self._grad_records[record])
            elif self._grads_kept.unclaimed(_module_of(record)):
                store.put(record, self._grad_records[record])  # recorded module, no gradient came

    def _record_backward(self, name: str, grad_input: Any, grad_output: Any) -> None:
        svc = self.rec
        store, enc = svc.store, svc.encoder
        if store is None or enc is None:
            return
        mode = svc.config.data_mode
        record: dict[str, Any] = {}
        if mode.side("input"):
            record["input"] = enc.grads(tuple(grad_output), name, "input")
        if mode.side("output"):
            record["output"] = enc.grads(tuple(g for g in grad_input if g is not None), name, "output")
        store.put(name, record)

    # -- per step ---------------------------------------------------------------------------------
    def reset_step(self) -> None:
        self._release_captures()
        self.forward_stack.clear()
        self.backward_stack.clear()
        self._grad_records.clear()
        self._grad_reported.clear()
        self._grads_kept.reset()

    def api_parent(self, direction: str) -> str | None:
        if direction == FORWARD:
            self._parents.prune()
        stack = self.forward_stack if direction == FORWARD else self.backward_stack
        return stack[-1] if stack else None

    def remove(self) -> None:
        """Teardown: hooks off, and nothing remembered to hook again."""
        self.uninstall()
        self._hooks.clear()
        self._named.clear()
        self.registered = False
        self._first_model = FirstModel()


def _module_of(param_grad_record: str) -> str:
    return param_grad_record.rsplit(".", 1)[0]  # "{prefix}.parameters_grad"


class _Inert:
    """What a hook of ours becomes in a copy of the model: nothing."""

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None


_INERT = _Inert()


class _OwnHook:
    """A hook of ours on one module. ``copy.deepcopy(model)`` made while the hooks are on copies
    them (an EMA or reference model): on the copy they are inert (stop() does not reach them), and
    ``torch.save(model)``/pickle stores an inert hook instead of failing on a local function."""

    __slots__ = ("_arity", "_fn", "_module")

    def __init__(self, fn: Callable[..., Any], module: torch.nn.Module, arity: int) -> None:
        self._fn = fn
        self._module = weakref.ref(module)
        self._arity = arity  # arguments after the module: (args, kwargs) or (args, kwargs, output)

    def __call__(self, mod: Any, *args: Any) -> Any:
        if mod is not self._module():
            return None
        if len(args) == self._arity - 1:
            # registered with kwargs, called without: torch registers a hook, then marks it as taking
            # kwargs, and a thread running the model between the two calls it the plain way
            args = (args[0], {}, *args[1:])
        return self._fn(mod, *args)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Inert:
        return _INERT

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Inert, ())


@functools.cache
def _own_hooks_never_compiled() -> None:
    """Dynamo never compiles a frame of our hook wrappers on its own: called from a resumed compiled
    frame (the hook after a graph break) it would compile ``_OwnHook.__call__`` once per module
    signature and hit its recompile limit. Marked at the first install (dynamo imported then)."""
    skip = eval_frame_hooks()[1]
    if skip is not None:
        for fn in (_OwnHook.__call__, _Inert.__call__):
            skip(fn.__code__)
