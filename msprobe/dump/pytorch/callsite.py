"""Recover the arguments *as the caller wrote them* for Python-level torch functions.

A Python function such as ``F.batch_norm`` reaches the function mode through its own
``handle_torch_function(...)`` call, which re-packs the arguments (``F.relu(x)`` arrives as
``(x,), {"inplace": False}``). Upstream records the user's call (``input_args=[x]``), so we read the
call site instead: the number of positional arguments and the keyword names from the caller's
``CALL`` instruction, and the values from the function's frame. When the call site cannot be read
(``f(*args)``, a C caller, an unknown bytecode), the re-packed arguments are used unchanged.
"""

from __future__ import annotations

import dis
import inspect
import sys
from types import CodeType, FrameType
from typing import Any

_CALLS = {"CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_KW", "CALL_FUNCTION_KW"}
_sites: dict[tuple[CodeType, int], tuple[int, tuple[str, ...]] | None] = {}
_instructions: dict[CodeType, list[dis.Instruction]] = {}
# bounds, as stack.py's: code generated at run time (``exec`` per step, regenerated forwards) would
# otherwise grow the caches for as long as the process dumps. A disassembly is large (hundreds of
# bytes per instruction), so few are kept: the call sites found in them stay in ``_sites``.
MAX_SITES = 100_000
MAX_DISASSEMBLED = 64


def _site(code: CodeType, lasti: int) -> tuple[int, tuple[str, ...]] | None:
    key = (code, lasti)
    if key in _sites:
        return _sites[key]
    result = None
    try:
        ins = _instructions.get(code)
        if ins is None:
            if len(_instructions) >= MAX_DISASSEMBLED:
                _instructions.clear()
            ins = _instructions[code] = list(dis.get_instructions(code))
        idx = None
        for i, x in enumerate(ins):
            if x.offset <= lasti and (i + 1 == len(ins) or ins[i + 1].offset > lasti):
                idx = i
                break
        if idx is not None and ins[idx].opname in _CALLS and isinstance(ins[idx].arg, int):
            call = ins[idx]
            argc = int(call.arg or 0)
            kwnames: tuple[str, ...] = ()
            if call.opname in ("CALL_KW", "CALL_FUNCTION_KW"):
                prev = ins[idx - 1]
                if prev.opname == "LOAD_CONST" and isinstance(prev.argval, tuple):
                    kwnames = prev.argval
            else:
                for back in range(1, 4):
                    prev = ins[idx - back]
                    if prev.opname == "KW_NAMES":
                        kwnames = code.co_consts[int(prev.arg or 0)]
                        break
            result = (argc - len(kwnames), tuple(kwnames))
    except Exception:
        result = None
    if len(_sites) >= MAX_SITES:
        _sites.clear()
    _sites[key] = result
    return result


def _find_frame(code: CodeType, start: FrameType | None, limit: int = 8) -> FrameType | None:
    f = start
    while f is not None and limit > 0:
        if f.f_code is code:
            return f
        f = f.f_back
        limit -= 1
    return None


def recover_call_args(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], bound: bool
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` as written at the call site of ``func``, or the given ones if unknown."""
    code = getattr(func, "__code__", None)
    if code is None:
        return args, kwargs
    frame = _find_frame(code, sys._getframe(2))
    if frame is None or frame.f_back is None:
        return args, kwargs
    caller = frame.f_back
    site = _site(caller.f_code, caller.f_lasti)
    if site is None:
        return args, kwargs
    npos, kwnames = site
    if bound:
        npos += 1
    n_params = code.co_argcount
    names = code.co_varnames
    kwonly = code.co_kwonlyargcount
    flags = code.co_flags
    varargs = names[n_params + kwonly] if flags & inspect.CO_VARARGS else None
    varkw_index = n_params + kwonly + (1 if varargs else 0)
    varkw = names[varkw_index] if flags & inspect.CO_VARKEYWORDS else None
    local = frame.f_locals
    try:
        if npos < 0 or (npos > n_params and varargs is None):
            return args, kwargs
        new_args = [local[p] for p in names[: min(npos, n_params)]]
        if npos > n_params and varargs is not None:
            new_args.extend(local[varargs][: npos - n_params])
        new_kwargs: dict[str, Any] = {}
        for k in kwnames:
            if k in local and k in names[: n_params + kwonly]:
                new_kwargs[k] = local[k]
            elif varkw is not None and k in local.get(varkw, {}):
                new_kwargs[k] = local[varkw][k]
            else:
                return args, kwargs
    except (KeyError, TypeError):
        return args, kwargs
    if args and new_args and args[0] is not new_args[0] and not kwnames:
        return args, kwargs  # the call site is not the one that called func (a C caller in between)
    if not _rest_is_default(func, names, n_params, kwonly, min(npos, n_params), new_kwargs, local):
        return args, kwargs  # a C caller in between (``functools.partial``) passed more than the site shows
    return tuple(new_args), new_kwargs


def _rest_is_default(
    func: Any,
    names: tuple[str, ...],
    n_params: int,
    kwonly: int,
    given: int,
    new_kwargs: dict[str, Any],
    local: dict[str, Any],
) -> bool:
    """Whether every parameter the call site does not pass holds its default value."""
    defaults = getattr(func, "__defaults__", None) or ()
    first_default = n_params - len(defaults)
    for i in range(given, n_params):
        p = names[i]
        if p not in new_kwargs and (
            i < first_default or not _same(local.get(p, _MISSING), defaults[i - first_default])
        ):
            return False
    kwdefaults = getattr(func, "__kwdefaults__", None) or {}
    for p in names[n_params : n_params + kwonly]:
        if p not in new_kwargs and (p not in kwdefaults or not _same(local.get(p, _MISSING), kwdefaults[p])):
            return False
    return True


_MISSING = object()


def _same(value: Any, default: Any) -> bool:
    return value is default or (
        type(value) is type(default) and type(value) in (bool, int, float, str) and value == default
    )
