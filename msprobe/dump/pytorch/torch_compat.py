"""Every private PyTorch API the dump uses, in one place (nothing else in msprobe imports one).

Each name below is a thin alias or a few lines around a torch internal; ``tests/dump/test_torch_compat.py``
exercises every one of them on the torch this project pins, so a torch upgrade that removes or changes
one fails there, loudly, instead of somewhere in a dump. Where a torch without the API can still be
served, the shim says how (``None`` or a slower public path).

One private *attribute* is read in place rather than through a function: ``Tensor._version``, the
in-place version counter, on the per-record path (a call around an attribute read would cost more
than the read). The same test checks it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

# -- function modes and grad mode (per record: plain aliases, no wrapper) ---------------------------

DisableTorchFunction = torch._C.DisableTorchFunction
"""``with DisableTorchFunction():`` no ``__torch_function__`` dispatch, no function mode, in the block."""
DisableTorchFunctionSubclass = torch._C.DisableTorchFunctionSubclass
"""``with DisableTorchFunctionSubclass():`` tensor subclasses' ``__torch_function__`` is not called in the
block (an op on one returns a plain tensor unless its ``__torch_dispatch__`` wraps it)."""

set_grad_enabled_raw: Callable[[bool], None] = torch._C._set_grad_enabled
"""``torch.set_grad_enabled`` without its context-manager object (our own tensor code runs a few
hundred times a step)."""

current_graph_task_id: Callable[[], int] | None = getattr(torch._C, "_current_graph_task_id", None)
"""The autograd engine's current graph task, negative outside a backward pass (None: unknown)."""


def running_backward() -> bool | None:
    """Whether autograd runs a backward pass in this thread; None on a torch that cannot tell (each
    caller decides what unknown means for it)."""
    return None if current_graph_task_id is None else current_graph_task_id() >= 0


def push_function_mode(mode: Any) -> None:
    """Push ``mode`` on this thread's function-mode stack without entering it as a context."""
    torch._C._push_on_torch_function_stack(mode)


def function_modes() -> list[Any]:
    """This thread's function-mode stack, bottom first."""
    from torch.overrides import _get_current_function_mode_stack

    return list(_get_current_function_mode_stack())


def holds_function_mode(mode: Any) -> bool:
    """Whether ``mode`` is on this thread's function-mode stack (read in place, nothing popped)."""
    length = getattr(torch._C, "_len_torch_function_stack", None)
    at = getattr(torch._C, "_get_function_stack_at", None)
    if length is None or at is None:
        return mode in function_modes()
    return any(at(i) is mode for i in range(length()))


def pop_function_mode(mode: Any) -> None:
    """Remove ``mode`` from this thread's mode stack wherever it is (a user mode may sit above it)."""
    if mode not in function_modes():
        return
    above = []
    while True:
        top = torch._C._pop_torch_function_stack()
        if top is mode:
            break
        above.append(top)
    for m in reversed(above):
        torch._C._push_on_torch_function_stack(m)


# -- module backward (the autograd graph) -------------------------------------------------------

_will_engine_execute_node: Callable[[Any], bool] | None = getattr(torch._C, "_will_engine_execute_node", None)


def will_run(node: Any) -> bool:
    """Whether the running backward pass executes autograd ``node`` (what torch's multi-grad hooks
    ask); True outside a backward pass or on a torch without the query."""
    if _will_engine_execute_node is None or not running_backward():
        return True
    try:
        return bool(_will_engine_execute_node(node))
    except RuntimeError:
        # a leaf's accumulator while ``torch.autograd.grad`` runs: torch cannot tell ("A leaf node
        # was passed to _will_engine_execute_node but we are currently running autograd.grad()").
        # Its tensor hook fires when the gradient is asked for (the leaf is one of grad's inputs),
        # the case of a module returning its leaf input or a parameter under a gradient penalty.
        return True


def sequence_nr(node: Any) -> int:
    """The creation number of autograd ``node`` (per thread, increasing; AccumulateGrad: the largest)."""
    return int(node._sequence_nr())


_named_parameters = torch.nn.Module.named_parameters


def direct_parameters(mod: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """``mod.named_parameters(recurse=False)``, read straight from ``Module._parameters`` unless the
    class overrides ``named_parameters`` (the generic path is slow for a per-module-call lookup)."""
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


_BASE_HANDLERS = frozenset(
    (torch.Tensor.__torch_function__.__func__, torch._C._disabled_torch_function_impl)  # type: ignore[attr-defined]
)


def own_torch_function(types: Any) -> bool:
    """Whether one of ``types`` (a ``__torch_function__`` call's) has a handler of its own, not
    ``torch.Tensor``'s or ``nn.Parameter``'s."""
    for t in types:
        handler = getattr(t, "__torch_function__", None)
        if getattr(handler, "__func__", handler) not in _BASE_HANDLERS:
            return True
    return False


def share_version_counter(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Provably one version counter: one is the other's base, or both are views of one base (an
    in-place write through either bumps both), read off ``Tensor._base``. ``x.data`` and
    ``torch.from_numpy`` aliases have counters of their own, so a write through them is not seen:
    those are not matched."""
    base_a, base_b = a._base, b._base
    return base_a is b or base_b is a or (base_a is not None and base_a is base_b)


def private_in_place_functions() -> list[Any]:
    """torch's private in-place functions (``torch._fused_adamw_``, ``torch._foreach_mul_``,
    ``torch._amp_foreach_non_finite_check_and_unscale_``): optimizers and GradScaler call them, some
    write without bumping a version counter, and no API list holds them."""
    out = []
    for ns in (torch, torch.Tensor):
        for name in dir(ns):
            if name.startswith("_") and name.endswith("_") and not name.endswith("__"):
                fn = getattr(ns, name, None)
                if callable(fn):
                    out.append(fn)
    return out


# -- distributed tensors ----------------------------------------------------------------------------


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank, as a plain tensor (what ``to_local()`` returns, read from
    ``DTensor._local_tensor`` without an autograd node); any other tensor as it is. A DTensor has no
    storage of its own and its results cannot be read on the host (``tolist``), and its global
    values would need a collective: a rank's dump holds its own shard."""
    if type(t) is torch.Tensor:
        return t
    local = getattr(t, "_local_tensor", None)
    if isinstance(local, torch.Tensor):
        return local
    to_local = getattr(t, "to_local", None)  # a torch that keeps the shard elsewhere
    if callable(to_local) and type(t).__name__ == "DTensor":
        return to_local()  # type: ignore[no-any-return]
    return t


# -- torch.func transforms (vmap, grad, jacrev, functionalize) ----------------------------------------

_functorch = getattr(torch._C, "_functorch", None)
transform_level: Callable[[], int | None] = getattr(_functorch, "maybe_current_level", lambda: None)
"""The level of the innermost active torch.func transform, None when none is (per record: an alias)."""
transform_wrapped: Callable[[torch.Tensor], bool] = getattr(
    _functorch, "is_functorch_wrapped_tensor", lambda t: False
)
"""Whether a tensor is a torch.func transform's wrapper (per tensor: an alias)."""


def set_transforms_aside() -> list[Any] | None:
    """Our own tensor code is about to run: set aside the stack of active torch.func transforms, if
    any (one C call when none is), for :func:`restore_transforms` to put back. Under a transform every
    operation, even on a plain tensor, makes a tensor of the transform's level, which is dead
    (unusable) once the transform returns."""
    if transform_level() is None:
        return None
    assert _functorch is not None
    saved = []
    while _functorch.peek_interpreter_stack() is not None:
        saved.append(_functorch.pop_dynamic_layer_stack())
    return saved


def restore_transforms(saved: list[Any] | None) -> None:
    """Put back what :func:`set_transforms_aside` returned."""
    while saved:
        _functorch.push_dynamic_layer_stack(saved.pop())  # type: ignore[union-attr]


def transform_values(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, example)`` of a tensor a torch.func transform wrapped, as plain tensors; any other
    tensor is both. ``values``: everything under the wrappers, which for a vmapped tensor is every
    example of the batch (its batch dimensions included); ``example``: the first example of every
    vmap level, with the shape the API saw. A functionalized tensor's pending writes are applied
    first. Call it with the transforms set aside (:func:`set_transforms_aside`)."""
    if not transform_wrapped(t):
        return t, t
    assert _functorch is not None
    batch_dims = []
    while transform_wrapped(t):
        if _functorch.is_functionaltensor(t):
            torch._sync(t)
        elif _functorch.is_batchedtensor(t):
            batch_dims.append(_functorch.maybe_get_bdim(t))
        t = _functorch.get_unwrapped(t)
    example = t
    for dim in reversed(batch_dims):  # the innermost level's batch dimension is the plain tensor's
        example = example.select(dim, 0)
    return t, example


# -- torch.compile ----------------------------------------------------------------------------------


@functools.cache
def eval_frame_hooks() -> tuple[Callable[[], Any] | None, Callable[[Any], None] | None]:
    """``(get_eval_frame_callback, skip_code)`` of dynamo: the callback is None while no compiled
    frame runs; ``skip_code(code)`` makes dynamo never trace frames of ``code`` (marks that code
    object only). ``(None, None)`` on a torch without them."""
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback
        from torch._dynamo.eval_frame import skip_code
    except (ImportError, AttributeError):
        return None, None
    return get_eval_frame_callback, skip_code


# not None while ``torch.jit.trace`` records a graph: what runs then is traced into the user's graph,
# so our statistics ops must not run, and the calls are not the model's (bound once: a hot-path check)
jit_tracing_state: Callable[[], Any] = getattr(torch._C, "_get_tracing_state", lambda: None)


_FAKE_KEY = getattr(getattr(torch._C, "_TorchDispatchModeKey", None), "FAKE", None)
_get_dispatch_mode = getattr(torch._C, "_get_dispatch_mode", None)


def fake_mode_active() -> bool:
    """Whether a FakeTensorMode is active: torch runs code on fake tensors to infer shapes, outside
    torch.compile too (DTensor's sharding propagation, the first time it meets an op): those calls
    are not the model's, and their tensors hold no values."""
    return (
        _FAKE_KEY is not None and _get_dispatch_mode is not None and _get_dispatch_mode(_FAKE_KEY) is not None
    )


def compiler_tracing() -> bool:
    """Whether torch.compile is building a graph now (dynamo tracing, AOT autograd or inductor running
    the model's code on fake tensors): Python code called then is not the user's call."""
    return _tracing_context() is not None


def in_compiled_code() -> bool:
    """Whether the Python frame that made the call being handled (two frames up: our handler's
    caller) is torch.compile's machinery or code inductor generated: AOT autograd's runtime
    wrappers, inductor's kernels calling extern ops (``mm(..., out=buf)``). Decided once per code
    object (kept by id: hashing a code object hashes its constants, every time)."""
    code = sys._getframe(2).f_code
    known = _compiler_code.get(id(code))
    if known is not None and known[0] is code:
        return known[1]
    filename = code.co_filename
    hit = filename.startswith(_COMPILER_DIRS) or filename.startswith(_inductor_cache_dir())
    if len(_compiler_code) >= MAX_CODE_OBJECTS:  # code generated at run time: bounded
        _compiler_code.clear()
    _compiler_code[id(code)] = (code, hit)  # holds the code object: its id is not reused
    return hit


_TORCH_DIR = os.path.dirname(torch.__file__)
_COMPILER_DIRS = tuple(
    os.path.join(_TORCH_DIR, *sub) + os.sep
    for sub in (("_dynamo",), ("_inductor",), ("_functorch", "_aot_autograd"))
)
_compiler_code: dict[int, tuple[Any, bool]] = {}
MAX_CODE_OBJECTS = 100_000


@functools.cache
def _inductor_cache_dir() -> str:
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except (ImportError, AttributeError):
        return os.sep + "\0"  # matches no file
    return os.path.join(cache_dir(), "")


def _no_context() -> None:
    return None


try:
    from torch._guards import TracingContext

    _tracing_context: Callable[[], Any] = TracingContext.try_get
except (ImportError, AttributeError):
    _tracing_context = _no_context


# -- .pt files --------------------------------------------------------------------------------------

PyTorchFileWriter: Any = getattr(torch._C, "PyTorchFileWriter", None)
"""torch.save's zip writer (None: write with torch.save)."""


def storage_alignment() -> int:
    """The record alignment torch.save uses in its zip archives."""
    return int(torch.serialization._get_storage_alignment())


def storage_persistent_id(obj: object) -> object:
    """torch.save's persistent id of a typed storage as record ``data/0`` on the CPU (else None)."""
    if isinstance(obj, torch.storage.TypedStorage):
        storage_type = getattr(torch, obj._pickle_storage_type())
        return ("storage", storage_type, "0", "cpu", obj._size())
    if isinstance(obj, torch.UntypedStorage):
        # dtypes without a typed storage class (complex32, uint16/32/64, bits*): torch.save pickles
        # the untyped storage itself, by bytes (without this, pickle falls back to the storage's own
        # __reduce__, a legacy nested torch.save that no torch.load can read back)
        return ("storage", torch.UntypedStorage, "0", "cpu", obj.nbytes())
    return None


# -- autograd engine --------------------------------------------------------------------------------


Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def _wrap_attribute(owner: Any, name: str, wrap: Wrap) -> Callable[[], None] | None:
    """``owner.name = wrap(owner.name)``; returns the undo, or None where ``owner`` has no ``name``."""
    original = getattr(owner, name, None)
    if original is None:
        return None
    setattr(owner, name, wrap(original))

    def undo() -> None:
        setattr(owner, name, original)

    return undo


def wrap_engine_backward(wrap: Wrap) -> Callable[[], None] | None:
    """Route every backward pass that Python starts (``Tensor.backward``, ``torch.autograd.backward``
    and ``grad``) through ``wrap(original)``; returns the undo, or None where torch has no such entry
    point (nothing wrapped)."""
    return _wrap_attribute(torch.autograd, "_engine_run_backward", wrap)


def watch_version_counter_resets(before: Callable[[Any], None]) -> Callable[[], None] | None:
    """Call ``before(tensors)`` whenever torch sets version counters back: what
    ``torch.autograd._unsafe_preserve_version_counter`` does after a write it hides from autograd
    (FSDP2 copies each all-gathered parameter into its buffer so). Returns the undo, or None where
    torch has no such function."""

    def wrap(set_version_counter: Callable[..., Any]) -> Callable[..., Any]:
        def reported(tensors: Any, versions: Any) -> Any:
            before(tensors)
            return set_version_counter(tensors, versions)

        return reported

    return _wrap_attribute(getattr(torch._C, "_autograd", None), "_unsafe_set_version_counter", wrap)


# -- data loading -----------------------------------------------------------------------------------


def dataloader_iter_class() -> Any:
    """The base class of every DataLoader iterator (its ``__next__`` ends a step in dataloader mode)."""
    from torch.utils.data import dataloader

    return dataloader._BaseDataLoaderIter


# -- torch.distributed -------------------------------------------------------------------------------


def _coalesce_state() -> dict[Any, list[Any]]:
    """torch's queue of collectives per process group inside ``_coalescing_manager`` (empty on a
    torch without the manager or distributed)."""
    try:
        from torch.distributed import distributed_c10d
    except ImportError:
        return {}
    return getattr(getattr(distributed_c10d, "_world", None), "pg_coalesce_state", None) or {}


def coalescing_groups() -> tuple[Any, ...]:
    """The process groups inside ``torch.distributed._coalescing_manager`` now: their collectives are
    queued, and run when the manager exits."""
    return tuple(_coalesce_state())


def coalescing_queues() -> dict[Any, int]:
    """How many collectives each coalescing process group has queued now."""
    return {g: len(ops) for g, ops in _coalesce_state().items()}


def queued_since(before: dict[Any, int] | None) -> tuple[Any, ...]:
    """The process groups whose coalescing queue grew since ``before``: the call in between was queued
    there (a collective on another group, or one torch does not queue, ran at once)."""
    return tuple(g for g, n in coalescing_queues().items() if n > (before or {}).get(g, 0))


def coalescing_manager_class() -> Any:
    """The class of what ``_coalescing_manager(async_ops=True)`` yields, whose ``append`` receives the
    handle of the queued collectives as the manager exits (None where torch has none)."""
    try:
        from torch.distributed import distributed_c10d
    except ImportError:
        return None
    return getattr(distributed_c10d, "_CoalescingManager", None)
