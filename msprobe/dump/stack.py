"""Call stacks for stack.json: frames innermost first, our own frames dropped.

A frame is ``"File {path}, line {n}, in {func}, \\n {source line stripped}"``. Formatting goes through
a cache keyed by (code object identity, bytecode offset), so the cost per record is a walk of
``f_back`` pointers: ``f_lineno`` is computed from the line table on every access and a code object's
hash from its constants, while ``id`` and ``f_lasti`` are plain fields (most of what is left is
making the frame objects).
"""

from __future__ import annotations

import linecache
import os
import sys
from types import CodeType, FrameType

_OWN = (os.sep.join(("msprobe", "dump", "")), os.sep.join(("msprobe", "pytorch", "")))
_cache: dict[tuple[CodeType, int], str | None] = {}  # (code, line) -> frame text
# (id(code), f_lasti) -> (code, frame text): keyed by id because hashing a code object hashes its
# constants every time (slow for torch's big functions)
_by_offset: dict[tuple[int, int], tuple[CodeType, str | None]] = {}
STACK_FAILED = ("The call stack retrieval failed.",)


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
            key = (id(code), f.f_lasti)
            hit = get(key)
            if hit is not None and hit[0] is code:
                text = hit[1]
            else:
                text = _format(code, f.f_lineno or 0)
                _by_offset[key] = (code, text)  # holds the code object: its id is not reused
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
