"""Call stacks for stack.json (spec §3.5): frames innermost first, our own frames dropped.

A frame is ``"File {path}, line {n}, in {func}, \\n {source line stripped}"``. Formatting goes through
a cache keyed by (code object, bytecode offset), so the cost per record is a walk of ``f_back``
pointers: ``f_lineno`` is computed from the line table on every access (~1.5 us a frame, ~50 us for a
module call nested in a model), ``f_lasti`` is a plain field.
"""

from __future__ import annotations

import linecache
import os
import sys
from types import CodeType, FrameType

_OWN = (os.sep.join(("msprobe", "dump", "")), os.sep.join(("msprobe", "pytorch", "")))
_cache: dict[tuple[CodeType, int], str | None] = {}  # (code, line) -> frame text
_by_offset: dict[tuple[CodeType, int], str | None] = {}  # (code, f_lasti) -> frame text
STACK_FAILED = ("The call stack retrieval failed.",)
_MISS = object()


def _format(code: CodeType, lineno: int) -> str | None:
    key = (code, lineno)
    try:
        return _cache[key]
    except KeyError:
        pass
    path = code.co_filename
    text: str | None = None
    if not any(own in path for own in _OWN):
        src = linecache.getline(path, lineno).strip()
        if src:
            text = f"File {path}, line {lineno}, in {code.co_name}, \n {src}"
    _cache[key] = text
    return text


def capture_stack(
    frame: FrameType | None = None, skip_files: tuple[str, ...] = (), skip_code: CodeType | None = None
) -> tuple[str, ...]:
    """Frames from ``frame`` (default: the caller) outwards; ``skip_files`` suffixes are dropped."""
    try:
        f: FrameType | None = frame if frame is not None else sys._getframe(1)
        out: list[str] = []
        get = _by_offset.get
        while f is not None:
            code = f.f_code
            key = (code, f.f_lasti)
            text = get(key, _MISS)
            if text is _MISS:
                text = _by_offset[key] = _format(code, f.f_lineno or 0)
            if (
                text is not None
                and code is not skip_code
                and not (skip_files and code.co_filename.endswith(skip_files))
            ):
                out.append(text)  # type: ignore[arg-type]
            f = f.f_back
        return tuple(out)
    except Exception:  # pragma: no cover - defensive: a stack is never worth a crash
        return STACK_FAILED
