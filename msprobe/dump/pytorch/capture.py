"""API capture: a ``TorchFunctionMode`` for torch/Tensor/functional/_VF, setattr patches for the rest.

Why a function mode (see docs/dump.md): it sees every public call of the user *and* of
torch's own Python code by the function object itself, so ``from torch.nn.functional import gelu``
bound before the debugger is still recorded and ``fn is F.gelu`` stays true (nothing is replaced).
While a recorded API runs the mode is popped, so calls made inside it are not recorded (upstream's
"outermost call only" rule) at no cost. Calls of *unlisted* Python functions (``Tensor.backward``,
``torch.autograd.backward``) are re-dispatched with the mode pushed, so what they call is seen (upstream
records ``Torch.ones_like`` from ``loss.backward()``).

Families that may bypass ``__torch_function__`` (``torch.distributed``, ``torch_npu``, ``mindspeed``)
and ``register_custom_api`` are patched with wrappers calling the same service entry point.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from msprobe.dump.api_families import DENY_KEY, FAMILIES, FUNCTION_MODE, PATCH, ApiFamily, load_api_list
from msprobe.dump.pytorch.torch_compat import (
    DisableTorchFunction,
    compiler_tracing,
    eval_frame_hooks,
    fake_mode_active,
    in_compiled_code,
    jit_tracing_state,
    own_torch_function,
    private_in_place_functions,
)
from msprobe.formats.record_names import record_api_name

log = logging.getLogger("msprobe")

ApiKey = tuple[str, str]  # (prefix, api name)
CallHandler = Callable[[ApiKey, Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]
WriteHandler = Callable[[tuple[Any, ...], dict[str, Any]], None]
# The table's mark of an unlisted call that writes into its arguments without bumping their version
# counters: run as is, then reported (the dump's cache must not trust what it remembers of them).
WRITES_ARGUMENTS: ApiKey = ("", "writes arguments")

_redispatch = getattr(torch.overrides, "redispatch_function", None)
# True only inside code dynamo traces (it folds the call to a constant); False when Python runs it.
_is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_compiling", lambda: False)


def _resolve(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _import_namespace(family: ApiFamily) -> Any | None:
    """The family's namespace object, or None when it (or what it requires) does not import."""
    for req in family.requires:
        if req not in sys.modules:
            try:
                importlib.import_module(req)
            except BaseException as exc:  # a broken torch_npu must never break the dump
                if isinstance(exc, KeyboardInterrupt):
                    raise
                log.debug("msprobe: %s not importable (%s); family %s skipped", req, exc, family.key)
                return None
    if family.namespace == "torch.Tensor":
        return torch.Tensor
    try:
        return importlib.import_module(family.namespace)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None


def _mode_families() -> list[tuple[ApiFamily, Any]]:
    out = []
    for family in FAMILIES:
        if family.technique == FUNCTION_MODE:
            ns = _import_namespace(family)
            if ns is not None:
                out.append((family, ns))
    return out


def _public_functions(family: ApiFamily, ns: Any, api_lists: dict[str, list[str]]) -> list[str]:
    """Public names of ``ns`` in no list and not denied (sorted, so the table is deterministic)."""
    listed = {d.rpartition(".")[2] for d in api_lists.get(family.key, [])}
    denied = set(api_lists.get(DENY_KEY, ()))
    return [
        n for n in dir(ns) if not n.startswith("_") and n not in listed and f"{family.key}.{n}" not in denied
    ]


def discovered_functions(api_lists: dict[str, list[str]]) -> list[tuple[Any, str, Any, ApiKey]]:
    """(owner, name, function, key) of the discovering families' public functions in no list:
    those ``__torch_function__`` sees (torch.overrides' overridable set) and, in
    torch.nn.functional, the Python functions that call torch without it (``grouped_mm``)."""
    overridable: dict[Any, list[Any]] = torch.overrides.get_overridable_functions()
    out = []
    for family, ns in _mode_families():
        if not family.discover:
            continue
        seen = set(overridable.get(ns, ()))
        for name in _public_functions(family, ns, api_lists):
            fn = getattr(ns, name, None)
            if _member(fn, seen) or (family.patch_python and _plain_function_of(fn, family.namespace)):
                out.append((ns, name, fn, (family.prefix, name)))
    return out


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _replacements(api_lists: dict[str, list[str]]) -> list[tuple[Any, str, Any, ApiKey]]:
    """(owner, name, function, key) of the function-mode families' listed names that a user or a
    library replaced with a Python function of its own (not torch's, not ``seed_all``'s, which the
    function mode knows through its original)."""
    out = []
    for family, ns in _mode_families():
        if ns is torch.Tensor:
            continue
        for dotted in api_lists.get(family.key, []):
            fn = getattr(ns, dotted, None) if "." not in dotted else None
            if (
                type(fn) is types.FunctionType
                and not fn.__code__.co_filename.startswith(_TORCH_DIR)
                and getattr(fn, "_msprobe_original", None) is None
            ):
                out.append((ns, dotted, fn, (family.prefix, record_api_name(dotted))))
    return out


def _member(fn: Any, seen: set[Any]) -> bool:
    try:
        return fn in seen
    except TypeError:  # an unhashable attribute is no function
        return False


def _plain_function_of(fn: Any, module: str) -> bool:
    return type(fn) is types.FunctionType and fn.__module__ == module


def _reports_to_function_modes(fn: Any) -> bool:
    """Whether torch hands calls of ``fn`` to ``__torch_function__``: every builtin, and a Python
    function only if its code does (``handle_torch_function``). Read off the code, not off
    ``get_overridable_functions()``, which is cached on first use and would count a function added to
    the namespace before that."""
    code = getattr(fn, "__code__", None)
    return type(fn) is not types.FunctionType or code is None or "handle_torch_function" in code.co_names


def build_mode_table(api_lists: dict[str, list[str]]) -> dict[Any, ApiKey]:
    """Function object -> (prefix, api) for the function-mode families: every listed name first (the
    first family wins an alias: ``F.conv2d`` is ``torch.conv2d``), then the discovered ones."""
    table: dict[Any, ApiKey] = {}
    for family, ns in _mode_families():
        for dotted in api_lists.get(family.key, []):
            try:
                fn = _resolve(ns, dotted)
            except AttributeError:
                continue
            _add(table, fn, (family.prefix, record_api_name(dotted)))
    for _, _, fn, key in discovered_functions(api_lists):
        _add(table, fn, key)
    return table


def _add(table: dict[Any, ApiKey], fn: Any, key: ApiKey) -> None:
    """The first name listed for ``fn`` wins, except that builtins bound to one C function compare
    equal (``torch.dsmm == torch.mm``; ``spmm``, ``hsmm``, ``saddmm`` likewise), and torch hands the
    function mode the one named after the aten operator for a call of any of them: that name wins."""
    try:
        known = table.get(fn)
        if known is not None and known[1] != key[1] and _names_its_operator(fn, key[1]):
            table[fn] = key
        table.setdefault(fn, key)
        original = getattr(fn, "_msprobe_original", None)  # seed_all's dropout replacements
        if original is not None:
            table.setdefault(original, key)
    except TypeError:
        pass


def _names_its_operator(fn: Any, name: str) -> bool:
    """``name`` is ``fn``'s own name and an aten operator's (``mm``; not its alias ``dsmm``)."""
    return getattr(fn, "__name__", None) == name and hasattr(torch.ops.aten, name)


def _resolve_owner(owner: Any, head: str) -> Any | None:
    """``owner.head`` (dotted), importing ``owner.__name__ + '.' + head`` if it is a submodule."""
    if not head:
        return owner
    try:
        return _resolve(owner, head)
    except AttributeError:
        pass
    base = getattr(owner, "__name__", None)
    if not isinstance(base, str):
        return None
    try:
        return importlib.import_module(f"{base}.{head}")
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None


def family_function(family_key: str, record_name: str) -> Callable[..., Any] | None:
    """The function the dump records as ``record_name`` in the family ``family_key`` (its API-list
    entry, ``fusion_attention_v2.npu_fusion_attention`` for MindSpeed's), or None when the family or
    the function does not import here."""
    family = next((f for f in FAMILIES if f.key == family_key), None)
    ns = _import_namespace(family) if family is not None else None
    if family is None or ns is None:
        return None
    for dotted in load_api_list().get(family.key, []):
        head, _, attr = dotted.rpartition(".")
        if record_api_name(dotted) == record_name:
            target = _resolve_owner(ns, head)
            func = getattr(target, attr, None) if target is not None else None
            if callable(func):
                return func
    return None


class ApiTracer(TorchFunctionMode):
    """Routes listed API calls to ``handler``; everything else runs untouched."""

    def __init__(
        self, table: dict[Any, ApiKey], handler: CallHandler, on_write: WriteHandler | None = None
    ) -> None:
        super().__init__()
        self.table = table
        self.handler = handler
        self.on_write = on_write
        if on_write is not None:
            for fn in private_in_place_functions():
                _add(table, fn, WRITES_ARGUMENTS)  # a listed one stays recorded

    def __torch_function__(
        self, func: Any, types_: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if _is_compiling() or jit_tracing_state() is not None:
            # dynamo inlines function modes into the graphs it builds: the compiled region is not
            # recorded, and reads nothing of ours (no guard on our state, no recompilation);
            # torch.jit.trace would put our statistics ops into the user's traced graph
            return func(*args, **(kwargs or {}))
        kwargs = kwargs or {}
        try:
            key = self.table.get(func)
        except TypeError:
            key = None
        if key is None and type(func) is not types.FunctionType:
            # an unlisted builtin (a property getter, ``item``): run as is, the common case first
            return func(*args, **kwargs)
        if key is WRITES_ARGUMENTS:  # compiled code's writes too
            out = func(*args, **kwargs)
            assert self.on_write is not None
            self.on_write(args, kwargs)
            return out
        if in_compiled_code() or fake_mode_active():
            # called by torch.compile's runtime or inductor's kernels, or run on fake tensors while
            # torch infers a shape (DTensor's sharding propagation): not a model call
            return func(*args, **kwargs)
        if key is not None:
            return self.handler(key, func, args, kwargs)
        original = getattr(func, "_msprobe_original_of_wrapper", None)
        if original is not None:
            # One of our patches, reported by torch's dispatch from inside the original we called
            # (F.dropout names whatever ``F.dropout`` is now): the patch already handled this call,
            # so run the original below every mode (redispatching the wrapper would enter the patch
            # again, forever).
            with DisableTorchFunction():
                return original(*args, **kwargs)
        key = self._key_of_replacement(func)
        if key is not None:
            return self.handler(key, func, args, kwargs)
        if _redispatch is not None and type(func) is types.FunctionType and not own_torch_function(types_):
            with self:
                return _redispatch(func, types_, args, kwargs)
        # a subclass's own __torch_function__ handles it, as without the dump (redispatching skips it)
        return func(*args, **kwargs)

    def _key_of_replacement(self, func: Any) -> ApiKey | None:
        """The key of the function ``func`` replaced after the table was built (``seed_all`` after the
        debugger: ``F.dropout``'s own ``handle_torch_function`` then names the replacement), kept."""
        original = getattr(func, "_msprobe_original", None)
        key = None if original is None else self.table.get(original)
        if key is not None:
            self.table[func] = key
        return key


def _never_compiled(fn: Callable[..., Any]) -> None:
    """Dynamo never compiles a frame of ``fn`` on its own (called from compiled code it would,
    recompiling for every argument signature); it still inlines ``fn`` where it traces a caller."""
    skip = eval_frame_hooks()[1]
    if skip is not None:
        skip(fn.__code__)  # the code object, shared by every wrapper


def _put_back(attr: str, owner: Any, orig: Any, own: bool) -> None:
    """The original again; an inherited one (``Tensor.__add__`` is ``TensorBase``'s) by deleting ours."""
    if own:
        setattr(owner, attr, orig)
    else:
        delattr(owner, attr)


class Patcher:
    """setattr-based capture for the PATCH families and for ``register_custom_api``."""

    def __init__(self, handler: CallHandler) -> None:
        self.handler = handler
        # (id(owner), attr) -> (owner, original, whether the owner itself held it or inherited it)
        self._originals: dict[tuple[int, str], tuple[Any, Any, bool]] = {}
        # (id(original), key) -> its wrapper: a function bound under several names
        # (``torch.distributed.isend`` is ``distributed_c10d.isend``) gets one wrapper, so identity
        # checks such as ``P2POp``'s ``op in [isend, irecv]`` still hold while it is patched
        self._wrappers: dict[tuple[int, ApiKey], Callable[..., Any]] = {}

    def wrap(self, owner: Any, attr: str, key: ApiKey) -> None:
        orig = getattr(owner, attr)
        if getattr(orig, "_msprobe_original_of_wrapper", None) is not None:  # wrapped already
            return
        wrapper = self._wrappers.get((id(orig), key))
        if wrapper is None or getattr(wrapper, "_msprobe_original_of_wrapper", None) is not orig:
            wrapper = self._wrappers[(id(orig), key)] = self._new_wrapper(orig, key)
        own = attr in getattr(owner, "__dict__", {})
        self._originals[(id(owner), attr)] = (owner, orig, own)
        setattr(owner, attr, wrapper)

    def _new_wrapper(self, orig: Any, key: ApiKey) -> Callable[..., Any]:
        handler = self.handler

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if (
                _is_compiling()
                or compiler_tracing()
                or in_compiled_code()
                or jit_tracing_state() is not None
                or fake_mode_active()
            ):
                # traced by dynamo or torch.jit.trace, run on fake tensors while a graph is compiled
                # or while DTensor infers a shape, or called by torch.compile's runtime: not a model call
                return orig(*args, **kwargs)
            return handler(key, orig, args, kwargs)

        _never_compiled(wrapper)
        wrapper._msprobe_original_of_wrapper = orig  # type: ignore[attr-defined]
        return wrapper

    def restore(self, owner: Any, attr: str) -> bool:
        entry = self._originals.pop((id(owner), attr), None)
        if entry is None:
            return False
        _put_back(attr, *entry)
        return True

    def restore_all(self) -> None:
        for (_, attr), entry in list(self._originals.items()):
            _put_back(attr, *entry)
        self._originals.clear()

    def patches_while_on(self, api_lists: dict[str, list[str]]) -> list[tuple[Any, str, ApiKey]]:
        """(owner, attr, key) of what to patch while dumping is on: the operator methods, and the
        Python functions ``__torch_function__`` never sees: discovered ones (``F.grouped_mm``) and
        listed ones a library replaced before the debugger with a wrapper calling the original (its
        ``F.linear``), which the function mode would see as the original's inner builtin, unnamed."""
        out: list[tuple[Any, str, ApiKey]] = []
        for owner, name, fn, key in [*discovered_functions(api_lists), *_replacements(api_lists)]:
            if not _reports_to_function_modes(fn):
                out.append((owner, name, key))
        for family in FAMILIES:
            if not family.patch_dunders:
                continue
            ns = _import_namespace(family)
            if ns is None:
                continue
            for name in api_lists.get(family.key, []):
                if name.startswith("__") and hasattr(ns, name):
                    out.append((ns, name, (family.prefix, name)))
        return out

    def patch_families(self, api_lists: dict[str, list[str]]) -> int:
        n = 0
        for family in FAMILIES:
            if family.technique != PATCH:
                continue
            ns = _import_namespace(family)
            if ns is None:
                continue
            owners = [ns]
            if family.key == "distributed":
                c10d = getattr(ns, "distributed_c10d", None)
                if c10d is not None:
                    owners.append(c10d)
            for dotted in api_lists.get(family.key, []):
                head, _, attr = dotted.rpartition(".")
                for owner in owners:
                    target = _resolve_owner(owner, head)
                    if target is None or not hasattr(target, attr):
                        continue
                    self.wrap(target, attr, (family.prefix, record_api_name(dotted)))
                    n += 1
        return n
