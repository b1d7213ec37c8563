"""``mindspore.jit`` under the dump: the call runs with every wrapper and hook removed, one record.

A jit function is compiled from its Python source; msprobe's API wrappers, hooked Primitive classes
and Cell hooks must not be visible to the compiler (upstream 8.1.1 patches the pre-2.9 executor
location, so on MindSpore 2.10 compilation sees its wrappers and fails). Here the ``__call__`` of
the running MindSpore's jit executor (``_JitExecutor``) is wrapped: during the call the API wrappers, the
Primitive hooks and the Cell hooks (of the Cells a jit function calls) are suspended, and at L1 and
mix the call is recorded as ``Jit.{function | Cell class}.{n}.forward``; its backward record holds
the real gradients (grads of the outputs as ``input``, of the inputs as ``output``).

``jit(capture_mode="bytecode")`` (PIJit) does not go through that executor: it compiles the bytecode it
traces, our wrappers included, so only the calls where it breaks its graph would be recorded. At L1
and mix its capture is switched off while a dump window is open, as 8.1.1 does: the code runs eagerly
and every API in it is recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mindspore.nn import Optimizer

try:  # mindspore.experimental.optim (AdamW, ...): an Optimizer of its own, no nn.Optimizer
    from mindspore.experimental.optim import Optimizer as _ExperimentalOptimizer

    OPTIMIZERS: tuple[type, ...] = (Optimizer, _ExperimentalOptimizer)
except ImportError:
    OPTIMIZERS = (Optimizer,)

from msprobe.dump.mindspore.backward import cell_backward_hook, hook_outputs, tensor_leaves
from msprobe.dump.mindspore.ms_compat import grad_recording, jit_executor_class, pijit_context_class
from msprobe.formats.record_names import BACKWARD, FORWARD

if TYPE_CHECKING:
    from msprobe.dump.mindspore.service import MsDumpService


class JitHooks:
    def __init__(self, service: MsDumpService) -> None:
        self.service = service
        # each takes whether the jit call runs model code (an optimizer's update does not) and
        # returns the undo of what it suspended
        self.suspend_hooks: list[Callable[[bool], Callable[[], None]]] = []
        self._cls: Any = None
        self._original: Any = None
        self._pijit: Any = None
        self._pijit_original: tuple[Any, Any] | None = None
        self._pijit_skipped = threading.local()  # per thread: a stack, True where __enter__ was skipped

    def install(self) -> bool:
        cls = jit_executor_class()
        if cls is None or getattr(cls.__call__, "__msprobe_jit__", False):
            return False
        original = cls.__call__
        hooks = self

        def __call__(executor: Any, *args: Any, **kwargs: Any) -> Any:
            return hooks.call(executor, original, args, kwargs)

        __call__.__msprobe_jit__ = True  # type: ignore[attr-defined]
        cls.__call__ = __call__
        self._cls, self._original = cls, original
        if self.service.config.records_apis:
            self._install_pijit()
        return True

    def _install_pijit(self) -> None:
        ctx = pijit_context_class()
        if ctx is None or getattr(ctx.__enter__, "__msprobe_jit__", False):
            return
        enter, leave = ctx.__enter__, ctx.__exit__
        hooks = self

        def __enter__(context: Any) -> Any:
            stack = hooks._skipped_stack()
            skip = hooks.service.running
            stack.append(skip)
            return None if skip else enter(context)

        def __exit__(context: Any, *exc: Any) -> Any:
            stack = hooks._skipped_stack()
            if stack and stack.pop():
                return None
            return leave(context, *exc)

        __enter__.__msprobe_jit__ = True  # type: ignore[attr-defined]
        ctx.__enter__, ctx.__exit__ = __enter__, __exit__
        self._pijit, self._pijit_original = ctx, (enter, leave)

    def _skipped_stack(self) -> list[bool]:
        stack = getattr(self._pijit_skipped, "stack", None)
        if stack is None:
            stack = self._pijit_skipped.stack = []
        return stack  # type: ignore[no-any-return]

    def uninstall(self) -> None:
        if self._cls is not None:
            self._cls.__call__ = self._original
            self._cls = None
        if self._pijit is not None and self._pijit_original is not None:
            self._pijit.__enter__, self._pijit.__exit__ = self._pijit_original
            self._pijit = self._pijit_original = None

    def _name(self, executor: Any) -> str:
        obj = getattr(executor, "obj", None)
        if obj is not None:
            return type(obj).__name__
        fn = getattr(executor, "fn", None)
        return getattr(fn, "__name__", "jit")

    def call(self, executor: Any, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        svc = self.service
        # The optimizer's jit-compiled update is not part of the model's forward/backward (8.1.1's
        # fixtures record none of it either); its compilation still must not see the wrappers.
        model_code = not isinstance(getattr(executor, "obj", None), OPTIMIZERS)
        record = (
            svc.running
            and svc.config.level != "L0"  # L0: Cells only (the jit call still runs without our hooks)
            and not svc.inside
            and svc.config.task != "structure"
            and model_code
        )
        with svc.lock:
            svc.batch.flush()  # a jit call may update queued tensors in place (optimizers do)
        suspended = svc.patcher.suspend()
        resumes = [hook(model_code) for hook in self.suspend_hooks]
        inside, svc.inside = svc.inside, True
        try:
            if record:
                svc.inside = inside
                return self._record(executor, original, args, kwargs)
            return original(executor, *args, **kwargs)
        finally:
            svc.inside = inside
            for resume in resumes:
                resume()
            svc.patcher.resume(suspended)

    def _record(self, executor: Any, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        svc = self.service
        s = svc.session
        mode = svc.config.data_mode
        base = f"Jit.{self._name(executor)}"
        index = s.counter.next(base)
        name = f"{base}.{index}.{FORWARD}"
        bname = f"{base}.{index}.{BACKWARD}"
        call_args = args[1:] if getattr(executor, "obj", None) is not None and args else args
        record = None
        if mode.direction(FORWARD) and svc.check(name) and mode.side("input"):
            record = svc.encode_inputs(name, call_args, kwargs)
        parent = svc.parent()
        hook = None
        if mode.direction(BACKWARD) and grad_recording() and tensor_leaves(args):
            hook = cell_backward_hook(bname, lambda gi, go: svc.api_backward(bname, parent, gi, go))
        svc.inside = True
        try:
            if hook is not None:
                out = original(executor, *hook(args), **kwargs)
                out = hook_outputs(hook, out)
            else:
                out = original(executor, *args, **kwargs)
        finally:
            svc.inside = False
        svc.put_construct(name, parent)  # before the record, whose write takes it along
        svc.finish_forward(
            name, record, out, mode.direction(FORWARD) and svc.check(name) and mode.side("output")
        )
        return out
