"""The MindSpore API families (prefix, namespace) and the patcher that wraps their functions.

Behaviour is data: :data:`FAMILIES` says which yaml section is wrapped on which object under which
record prefix; the names come from ``support_wrap_ops.yaml`` next to this
module (``MSPROBE_MS_API_LIST`` may point to another file of the same format). Every wrapper calls one
function, ``handler(key, original, args, kwargs)``, so the dump logic lives in one place.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from msprobe.dump.api_families import api_list_path as core_api_list_path
from msprobe.dump.api_families import read_api_list
from msprobe.formats.record_names import record_api_name

ApiKey = tuple[str, str]  # (record prefix, api name)
Handler = Callable[[ApiKey, Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]


@dataclass(frozen=True)
class MsApiFamily:
    key: str  # section of support_wrap_ops.yaml
    prefix: str  # record-name prefix
    module: str  # importable module that holds the functions (or the Tensor class, see ``attr``)
    attr: str = ""  # attribute of ``module`` to patch instead of the module itself
    collective: bool = False  # communication: async handles are waited on before the output is read
    output_is_args: bool = False  # in-place collectives: ``output`` = the arguments after the call


FAMILIES: tuple[MsApiFamily, ...] = (
    MsApiFamily("ops", "Functional", "mindspore.ops"),
    MsApiFamily("tensor", "Tensor", "mindspore.common.tensor", "Tensor"),
    MsApiFamily("mint.ops", "Mint", "mindspore.mint"),
    MsApiFamily("mint.nn.functional", "MintFunctional", "mindspore.mint.nn.functional"),
    MsApiFamily(
        "communication.comm_func", "Distributed", "mindspore.communication.comm_func", collective=True
    ),
    MsApiFamily(
        "mint.distributed",
        "MintDistributed",
        "mindspore.mint.distributed",
        collective=True,
        output_is_args=True,
    ),
)


BY_PREFIX: dict[str, MsApiFamily] = {f.prefix: f for f in FAMILIES}
# irecv writes its tensor after it returns: waited for before the record. isend only reads its tensor,
# and waiting inside it would deadlock the exchange in which both ranks send first (as the PyTorch dump)
_ASYNC_APIS = ("irecv",)


class _DoneHandle:
    """Returned instead of a work handle that the dump already waited on."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def finish_collective(
    family: MsApiFamily, api: str, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, Any]:
    """``(value returned to the caller, value recorded as output)`` of a communication call.

    With ``async_op=True`` (or for irecv) the handle is waited on, so the recorded tensors are
    final, and a completed handle is returned; ``batch_isend_irecv`` waits on each request.
    """
    if not family.collective:
        return out, out
    returned = out
    if api == "batch_isend_irecv" and isinstance(out, list | tuple):
        for work in out:
            if hasattr(work, "wait"):
                work.wait()
        returned = [_DoneHandle() for _ in out]
    elif (kwargs.get("async_op") or api in _ASYNC_APIS) and out is not None:
        handle = out[-1] if isinstance(out, tuple) and out and hasattr(out[-1], "wait") else out
        if hasattr(handle, "wait"):
            handle.wait()
            returned = (*out[:-1], _DoneHandle()) if handle is not out else _DoneHandle()
    recorded = [*args, *kwargs.values()] if family.output_is_args else returned
    return returned, recorded


def api_list_path() -> str:
    return core_api_list_path("MSPROBE_MS_API_LIST", "msprobe.dump.mindspore")


def load_api_list(path: str | None = None) -> dict[str, list[str]]:
    return read_api_list(path or api_list_path(), {f.key for f in FAMILIES})


def _owner(family: MsApiFamily) -> Any | None:
    try:
        mod = importlib.import_module(family.module)
    except Exception:  # a namespace this MindSpore build lacks (e.g. no communication support)
        return None
    return getattr(mod, family.attr) if family.attr else mod


def make_wrapper(original: Callable[..., Any], key: ApiKey, handler: Handler) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return handler(key, original, args, kwargs)

    try:
        functools.update_wrapper(wrapper, original)
    except (AttributeError, TypeError):
        pass
    wrapper.__msprobe_original__ = original  # type: ignore[attr-defined]
    return wrapper


def _put_back(owner: Any, attr: str, raw: Any, own: bool) -> None:
    if own:
        setattr(owner, attr, raw)
    else:  # the attribute was inherited (e.g. a TensorPy method): drop our shadowing entry
        delattr(owner, attr)


class Patcher:
    """``setattr``-based wrapping with originals remembered for :meth:`restore`."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self._saved: dict[tuple[int, str], tuple[Any, str, Any, bool]] = {}
        self._wrappers: dict[tuple[int, str], Any] = {}
        # a wrapper replaced by a later wrap of the same name (register_custom_api on an API the dump
        # wraps), put back by restore()
        self._replaced: dict[tuple[int, str], Any] = {}

    def wrap(self, owner: Any, attr: str, key: ApiKey, handler: Handler | None = None) -> bool:
        slot = (id(owner), attr)
        own = attr in vars(owner)
        # re-registering a wrapped name wraps the original under the new key
        raw = self._saved[slot][2] if slot in self._saved else inspect.getattr_static(owner, attr)
        func = raw.__func__ if isinstance(raw, staticmethod | classmethod) else raw
        if not callable(func) or isinstance(func, type):
            return False
        wrapper: Any = make_wrapper(func, key, handler or self.handler)
        if isinstance(raw, staticmethod):
            wrapper = staticmethod(wrapper)
        elif isinstance(raw, classmethod):
            wrapper = classmethod(wrapper)
        try:
            setattr(owner, attr, wrapper)
        except (AttributeError, TypeError):
            return False
        if slot not in self._saved:
            self._saved[slot] = (owner, attr, raw, own)
        elif slot in self._wrappers:
            self._replaced.setdefault(slot, self._wrappers[slot])
        self._wrappers[slot] = wrapper
        return True

    def restore(self, owner: Any, attr: str) -> None:
        """Undoes the last wrap of the name: back to the wrapper it replaced, else to the original."""
        slot = (id(owner), attr)
        replaced = self._replaced.pop(slot, None)
        if replaced is not None:
            setattr(owner, attr, replaced)
            self._wrappers[slot] = replaced
            return
        saved = self._saved.pop(slot, None)
        self._wrappers.pop(slot, None)
        if saved is not None:
            _put_back(*saved)

    def restore_all(self) -> None:
        for saved in list(self._saved.values()):
            _put_back(*saved)
        self._saved.clear()
        self._wrappers.clear()
        self._replaced.clear()

    def suspend(self) -> list[tuple[Any, str, Any]]:
        """Put every original back (e.g. while ``mindspore.jit`` compiles); returns what to re-wrap."""
        current = []
        for slot, (owner, attr, raw, own) in self._saved.items():
            current.append((owner, attr, self._wrappers[slot]))
            _put_back(owner, attr, raw, own)
        return current

    @staticmethod
    def resume(current: list[tuple[Any, str, Any]]) -> None:
        for owner, attr, wrapper in current:
            setattr(owner, attr, wrapper)

    def is_wrapped(self, owner: Any, attr: str) -> bool:
        return (id(owner), attr) in self._saved

    def original(self, owner: Any, attr: str) -> Any:
        """The unwrapped attribute (for the tool's own calls)."""
        saved = self._saved.get((id(owner), attr))
        return getattr(owner, attr) if saved is None else saved[2]

    def patch_families(self, lists: dict[str, list[str]]) -> int:
        """Wrap every listed name that exists on its family's object; returns how many."""
        count = 0
        for family in FAMILIES:
            owner = _owner(family)
            if owner is None:
                continue
            for name in lists.get(family.key, []):
                try:
                    inspect.getattr_static(owner, name)
                except AttributeError:
                    continue
                count += self.wrap(owner, name, (family.prefix, record_api_name(name)))
        return count
