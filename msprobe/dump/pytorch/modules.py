"""Module-level capture (levels L0 and mix, spec §5.3-5.4): forward/backward records of every
descendant of the model passed to ``start()``, direct parameters, parameter gradients, construct.json.

Hooks are registered once, on the first effective ``start()``, and do nothing while dumping is off.
Backward uses PyTorch's full backward hooks; their identity ``BackwardHookFunction`` makes module
inputs/outputs views that refuse in-place ops (pytorch #61519), so while we are installed the views it
returns get the default creation meta back (what upstream 8.1.1 does too), and ``nn.ReLU(inplace=True)``
after a hooked module keeps working.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from msprobe.dump.naming import BACKWARD, FORWARD
from msprobe.dump.pytorch.encode import quiet
from msprobe.dump.pytorch.recompute import in_recomputation
from msprobe.dump.pytorch.tensor_io import plain_cpu_tensor
from msprobe.dump.stack import capture_stack

if TYPE_CHECKING:
    from msprobe.dump.pytorch.encode import Encoder
    from msprobe.dump.pytorch.service import TorchDumpService
    from msprobe.dump.writer import RankStore

OPTIMIZER = "optimizer"


def no_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, never traced by torch.compile (dynamo would compile the recorder, and recompile it).

    ``torch.compiler.disable``'s wrapper resets the frame evaluator on every call (~4 us; our hooks
    run a few hundred times a step). In eager mode there is nothing to disable, so the wrapper below
    calls ``fn`` directly and takes the disabled path only while a compiled frame runs (an eval-frame
    callback is set); its own frame is skipped by dynamo and inlining it is refused like ``disable``'s.
    """
    disable = getattr(torch.compiler, "disable", None)
    if disable is None:
        return fn
    disabled = disable(fn)
    eval_frame_callback, skip_frame = _eval_frame_hooks()
    if eval_frame_callback is None:
        return disabled

    def call(*args: Any, **kwargs: Any) -> Any:
        if eval_frame_callback() is None:
            return fn(*args, **kwargs)
        return disabled(*args, **kwargs)

    skip_frame(call.__code__)  # one code object for every wrapper
    functools.update_wrapper(call, fn)

    for attr in ("_torchdynamo_disable", "_torchdynamo_disable_msg", "_torchdynamo_disable_recursive"):
        if hasattr(disabled, attr):
            setattr(call, attr, getattr(disabled, attr))
    return call


@functools.cache
def _eval_frame_hooks() -> tuple[Any, Any]:
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback
        from torch._dynamo.eval_frame import skip_code
    except (ImportError, AttributeError):  # another torch: the plain disable wrapper
        return None, None
    return get_eval_frame_callback, skip_code


CLIP_GRAD = "clip_grad"


def _distributed() -> bool:
    dist = getattr(torch, "distributed", None)
    return dist is not None and dist.is_available() and dist.is_initialized()


def gradient_for_worker(grad: torch.Tensor) -> torch.Tensor:
    """What the worker may summarise later for a parameter's gradient: the gradient itself (the writes
    that can follow, the next backward's accumulation into ``.grad``, ``zero_grad``, clipping,
    optimizers, are calls the in-place guard waits before), or with torch.distributed, where gradient
    buckets are written in C++ (DDP, FSDP) unseen, a copy (one memory pass instead of four here)."""
    if _distributed() and _snapshot_ok(grad):
        return grad.detach().clone()
    return grad


def _snapshot_ok(t: torch.Tensor) -> bool:
    """A plain dense CPU tensor whose clone has the same layout (so the same summary)."""
    return plain_cpu_tensor(t) and t.is_contiguous()


_named_parameters = torch.nn.Module.named_parameters


def _direct_parameters(mod: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """``mod.named_parameters(recurse=False)``, read straight from ``_parameters`` unless the class
    overrides ``named_parameters`` (the generic path costs ~4 us per module call)."""
    params = getattr(mod, "_parameters", None)
    if type(mod).named_parameters is not _named_parameters or not isinstance(params, dict):
        return list(mod.named_parameters(recurse=False))
    seen: set[int] = set()
    out = []
    for name, p in params.items():
        if p is not None and id(p) not in seen:
            seen.add(id(p))
            out.append((name, p))
    return out


def _reset_views(value: Any) -> Any:
    autograd = torch._C._autograd
    items = value if isinstance(value, tuple | list) else (value,)
    for t in items:
        if isinstance(t, torch.Tensor) and t._is_view():
            try:
                if autograd._get_creation_meta(t) != autograd.CreationMeta.DEFAULT:
                    autograd._set_creation_meta(t, autograd.CreationMeta.DEFAULT)
            except RuntimeError:
                pass
    return value


def _keep_aliases(orig: Callable[..., Any], hook: Any, args: Any) -> Any:
    """Route each distinct tensor through the hook once, so ``q is k`` stays true inside the module.

    BackwardHookFunction returns a separate view per argument: ``attn(h, h, h)`` would see three
    different tensors and take MultiheadAttention's slower, differently rounded path. The grads of
    repeated arguments are then reported at their first position.
    """
    if not isinstance(args, tuple):
        return orig(hook, args)
    first: dict[int, int] = {}
    dups: list[tuple[int, int]] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if id(a) in first:
                dups.append((i, first[id(a)]))
            else:
                first[id(a)] = i
    if not dups:
        return orig(hook, args)
    dedup = list(args)
    for i, _ in dups:
        dedup[i] = None
    res = list(orig(hook, tuple(dedup)))
    for i, j in dups:
        res[i] = res[j]
    return tuple(res)


_patched_backward_hook = False
_active: list[ModuleDumper] = []  # dumpers whose service must ignore the hook machinery's own calls


def _allow_inplace_on_hooked_views() -> None:
    global _patched_backward_hook
    # Our full backward hooks on modules whose inputs need no grad make torch warn on every step.
    warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")
    if _patched_backward_hook:
        return
    from torch.utils import hooks

    for attr in ("setup_input_hook", "setup_output_hook"):
        orig = getattr(hooks.BackwardHook, attr)

        def make(orig: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(orig)
            def wrapper(self: Any, args: Any) -> Any:
                if not any(d.svc.session.running for d in _active):
                    return _reset_views(_keep_aliases(orig, self, args))
                # The hook machinery's own tensor calls (view_as, requires_grad, grad_fn: ~15 per
                # module call) are not the user's: hidden from every function mode while we dump, so
                # neither our API capture nor the in-place guard pays for them.
                with torch._C.DisableTorchFunction():
                    return _reset_views(_keep_aliases(orig, self, args))

            return wrapper

        setattr(hooks.BackwardHook, attr, make(orig))
    _patched_backward_hook = True


class ModuleDumper:
    def __init__(self, service: TorchDumpService) -> None:
        self.svc = service
        self.registered = False
        self.forward_stack: list[str] = []
        self.backward_stack: list[str] = []
        self.handles: list[Any] = []
        self._grad_records: dict[str, dict[str, Any]] = {}  # parameters_grad record -> value (this step)
        # parameters whose gradient arrived since the record was last stored: the record is stored once
        # all its parameters have reported (one encoding per module and backward, not per parameter),
        # or at the next flush for parameters that got no gradient
        self._grad_reported: dict[str, set[str]] = {}
        self._params_hooked: set[int] = set()
        self._restore: list[tuple[Any, str, Any]] = []

    # -- registration -----------------------------------------------------------------------------
    def register(self, model: Any) -> None:
        if self.registered:
            return
        self.registered = True
        _allow_inplace_on_hooked_views()
        _active.append(self)
        models = list(model) if isinstance(model, list | tuple) else [model]
        indexed = isinstance(model, list | tuple)
        for i, root in enumerate(models):
            for name, module in root.named_modules():
                if module is root or not name or type(module).__name__ == "FullyShardedDataParallel":
                    continue
                self._hook(module, f"{i}.{name}" if indexed else name)
        if self.svc.config.level == "mix":
            import torch.optim.optimizer as opt

            self.handles.append(opt.register_optimizer_step_pre_hook(self._optimizer_pre))
            self.handles.append(opt.register_optimizer_step_post_hook(self._optimizer_post))
            self._wrap_clip_grad()

    def hook_named(self, module: torch.nn.Module, dump_name: str, active: Callable[[], bool]) -> None:
        """``module_dump(module, name)``: a non-recursive hook named by the user, live while ``active()``."""
        _allow_inplace_on_hooked_views()
        if self not in _active:
            _active.append(self)
        self._hook(module, dump_name, active)

    def _hook(self, module: torch.nn.Module, path: str, active: Callable[[], bool] | None = None) -> None:
        prefix = f"Module.{path}.{type(module).__name__}"
        pending: list[tuple[str, str | None, bool]] = []  # (name, parent, passes the filter)
        bpending: list[tuple[str, str | None]] = []

        def pre(mod: Any, args: Any, kwargs: Any) -> None:
            if self._off() or (active is not None and not active()):
                return
            name = f"{prefix}.{FORWARD}.{self.svc.session.counter.next(prefix + '.' + FORWARD)}"
            ok = self.svc.session.filter.begin(name)
            pending.append((name, self.forward_stack[-1] if self.forward_stack else None, ok))
            self.forward_stack.append(name)

        def post(mod: Any, args: Any, kwargs: Any, output: Any) -> None:
            if not pending:
                return
            name, parent, ok = pending.pop()
            if self.forward_stack:
                self.forward_stack.pop()
            self.svc.session.filter.end(name)
            store = self.svc.session.store
            if store is None:
                return
            record = ok and not self._off()
            # construct entries in completion order, as 8.1.1 writes them
            store.put_construct(name, parent, kick=not record)
            if record:
                self._guarded(self._record_forward, prefix, name, mod, args, kwargs, output)
                store.kick()

        def bpre(mod: Any, grad_output: Any) -> None:
            if self._off() or (active is not None and not active()):
                return
            name = f"{prefix}.{BACKWARD}.{self.svc.session.counter.next(prefix + '.' + BACKWARD)}"
            bpending.append((name, self.backward_stack[-1] if self.backward_stack else None))
            self.backward_stack.append(name)

        def bpost(mod: Any, grad_input: Any, grad_output: Any) -> None:
            if not bpending:
                return
            name, parent = bpending.pop()
            if self.backward_stack:
                self.backward_stack.pop()
            store = self.svc.session.store
            if store is None:
                return
            record = self.svc.session.filter.check(name)
            store.put_construct(name, parent, kick=not record)
            if record:
                self._guarded(self._record_backward, name, grad_input, grad_output)
                store.kick()

        self.handles.append(module.register_forward_pre_hook(no_compile(pre), with_kwargs=True))
        self.handles.append(module.register_forward_hook(no_compile(post), with_kwargs=True, prepend=True))
        if self.svc.config.data_mode.direction(BACKWARD):
            self.handles.append(module.register_full_backward_pre_hook(no_compile(bpre)))
            self.handles.append(module.register_full_backward_hook(no_compile(bpost)))

    def _off(self) -> bool:
        return not self.svc.session.running or self.svc._inside

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        was = self.svc._inside
        self.svc._inside = True
        try:
            with quiet():
                fn(*args)
        except Exception as exc:
            self._record_failure(fn, args, exc)
        finally:
            self.svc._inside = was

    def _record_failure(self, fn: Callable[..., None], args: tuple[Any, ...], exc: Exception) -> None:
        """A record that could not be made goes to dump_error_info.log (args[1]: its name)."""
        self.svc.session.record_error(fn.__name__.lstrip("_"), str(args[1] if len(args) > 1 else ""), exc)

    # -- records ----------------------------------------------------------------------------------
    def _later(self) -> Encoder | None:
        """The encoder that hands whole records to the background worker, or None to encode here.

        At L0 the worker encodes module records itself (the training thread only notes what a record
        reads). At mix the API records share the summary cache in the training thread, so module
        records are encoded there too (their tensors' summaries still deferred)."""
        enc = self.svc.encoder
        if enc is None or enc.worker is None or self.svc.apis_on:
            return None
        return enc

    def _encode(self, fn: Callable[..., None], record: str, reads: Any, *args: Any) -> None:
        """``fn(encoder, *args)``: on the worker when :meth:`_later` says so, else right here."""
        enc = self._later()
        if enc is not None:
            enc.later(self._worker_guarded, record, reads, fn, *args)
        elif self.svc.encoder is not None:
            fn(self.svc.encoder, *args)

    def _worker_guarded(self, enc: Encoder, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(enc, *args)
        except Exception as exc:
            self._record_failure(fn, args, exc)

    def _record_forward(
        self, prefix: str, name: str, mod: torch.nn.Module, args: Any, kwargs: Any, output: Any
    ) -> None:
        svc = self.svc
        store = svc.session.store
        if store is None or svc.encoder is None:
            return
        if not svc.config.data_mode.direction(FORWARD):
            self._param_grad_placeholder(prefix, mod)
            return
        params = _direct_parameters(mod)
        args, kwargs = tuple(args), dict(kwargs)
        mode = svc.config.data_mode
        # what the record will summarise (the worker computes those summaries ahead, see stats.BatchStats)
        reads = ((args, kwargs) if mode.side("input") else (), output if mode.side("output") else (), params)
        self._encode(
            self._forward_record, name, reads, store, name, args, kwargs, output, params, in_recomputation()
        )
        store.put_stack(name, capture_stack(None, (), None), kick=False)
        self._param_grad_placeholder(prefix, mod, params)  # the caller kicks

    def _forward_record(
        self,
        enc: Encoder,
        store: RankStore,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: Any,
        params: list[tuple[str, torch.nn.Parameter]],
        is_recompute: bool,
    ) -> None:
        mode = self.svc.config.data_mode
        record: dict[str, Any] = {}
        if mode.side("input"):
            record["input_args"] = enc.args(args, name)
            record["input_kwargs"] = enc.kwargs(kwargs, name)
        if mode.side("output"):
            record["output"] = enc.output(output, name)
        record["parameters"] = {p: enc.value(t, name, "parameters", (p,)) for p, t in params}
        record["is_recompute"] = is_recompute
        store.put(name, record, kick=False)

    def _param_grad_placeholder(
        self, prefix: str, mod: torch.nn.Module, params: list[tuple[str, torch.nn.Parameter]] | None = None
    ) -> None:
        if not self.svc.config.data_mode.direction(BACKWARD):
            return
        record = f"{prefix}.parameters_grad"
        store = self.svc.session.store
        if store is None or record in self._grad_records:
            return
        params = [
            (p, t) for p, t in (params if params is not None else _direct_parameters(mod)) if t.requires_grad
        ]
        if not params:
            return
        value: dict[str, Any] = {p: [None] for p, _ in params}
        self._grad_records[record] = value
        self._grad_reported[record] = set()
        store.put(record, value, kick=False)  # the caller kicks
        if self._flush_param_grads not in store.before_flush:  # a new store each step
            store.before_flush.append(self._flush_param_grads)
        for p, t in params:
            if id(t) not in self._params_hooked:
                self._params_hooked.add(id(t))
                self.handles.append(t.register_hook(self._param_hook(record, p)))

    def _param_hook(self, record: str, pname: str) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if self._off():
                return
            self._guarded(self._record_param_grad, record, pname, grad)

        return no_compile(hook)

    def _record_param_grad(self, record: str, pname: str, grad: torch.Tensor) -> None:
        value = self._grad_records.get(record)
        store, enc = self.svc.session.store, self.svc.encoder
        if value is None or store is None or enc is None or not self.svc.session.filter.check(record):
            return
        if enc.worker is None or grad.device.type != "cpu":
            with enc.synchronous():  # device tensors: summarised on their stream, here
                self._param_grad_record(enc, store, record, value, pname, grad)
        else:
            grad = gradient_for_worker(grad)
            self._encode(self._param_grad_record, record, grad, store, record, value, pname, grad)
        store.kick()

    def _param_grad_record(
        self,
        enc: Encoder,
        store: RankStore,
        record: str,
        value: dict[str, Any],
        pname: str,
        grad: torch.Tensor,
    ) -> None:
        value[pname] = [enc.value(grad, record, pname, ())]
        reported = self._grad_reported.setdefault(record, set())
        reported.add(pname)
        if len(reported) >= len(value):
            reported.clear()
            store.put(record, value, kick=False)

    def _flush_param_grads(self) -> None:
        """Before the json files are written (the worker is idle): store the records still waiting
        for a parameter that got no gradient."""
        store = self.svc.session.store
        if store is None:
            return
        for record, reported in self._grad_reported.items():
            if reported:
                reported.clear()
                store.put(record, self._grad_records[record], kick=False)
        store.kick()

    def _record_backward(self, name: str, grad_input: Any, grad_output: Any) -> None:
        svc = self.svc
        store = svc.session.store
        if store is None or svc.encoder is None:
            return
        grad_output = tuple(grad_output)
        grad_input = tuple(g for g in grad_input if g is not None)
        mode = svc.config.data_mode
        reads = (grad_output if mode.side("input") else (), grad_input if mode.side("output") else ())
        self._encode(self._backward_record, name, reads, store, name, grad_input, grad_output)

    def _backward_record(
        self,
        enc: Encoder,
        store: RankStore,
        name: str,
        grad_input: tuple[Any, ...],
        grad_output: tuple[Any, ...],
    ) -> None:
        mode = self.svc.config.data_mode
        record: dict[str, Any] = {}
        if mode.side("input"):
            record["input"] = enc.grads(grad_output, name, "input")
        if mode.side("output"):
            record["output"] = enc.grads(grad_input, name, "output")
        store.put(name, record, kick=False)  # the caller kicks

    # -- optimizer (mix) --------------------------------------------------------------------------
    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        store = self.svc.session.store
        if self.svc.session.running and store is not None:
            if OPTIMIZER not in store.construct:
                store.put_construct(OPTIMIZER, None)
            self.forward_stack.append(OPTIMIZER)

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.forward_stack and self.forward_stack[-1] == OPTIMIZER:
            self.forward_stack.pop()

    def _wrap_clip_grad(self) -> None:
        """APIs inside ``torch.nn.utils.clip_grad_*`` get the parent ``clip_grad`` at mix (spec §3.4)."""
        import torch.nn.utils as nn_utils

        for attr in ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_"):
            orig = getattr(nn_utils, attr, None)
            if orig is None or getattr(orig, "_msprobe_clip", False):
                continue

            def make(orig: Callable[..., Any]) -> Callable[..., Any]:
                @functools.wraps(orig)
                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    store = self.svc.session.store
                    pushed = False
                    if self.svc.session.running and store is not None:
                        if CLIP_GRAD not in store.construct:
                            store.put_construct(CLIP_GRAD, None)
                        self.forward_stack.append(CLIP_GRAD)
                        pushed = True
                    try:
                        return orig(*args, **kwargs)
                    finally:
                        if pushed and self.forward_stack and self.forward_stack[-1] == CLIP_GRAD:
                            self.forward_stack.pop()

                wrapper._msprobe_clip = True  # type: ignore[attr-defined]
                return wrapper

            wrapped = make(orig)
            setattr(nn_utils, attr, wrapped)
            self._restore.append((nn_utils, attr, orig))

    # -- per step ---------------------------------------------------------------------------------
    def reset_step(self) -> None:
        self.forward_stack.clear()
        self.backward_stack.clear()
        self._grad_records.clear()
        self._grad_reported.clear()

    def api_parent(self, direction: str) -> str | None:
        stack = self.forward_stack if direction == FORWARD else self.backward_stack
        return stack[-1] if stack else None

    def remove(self) -> None:
        if self in _active:
            _active.remove(self)
        for h in self.handles:
            h.remove()
        self.handles.clear()
        for owner, attr, orig in self._restore:
            setattr(owner, attr, orig)
        self._restore.clear()
