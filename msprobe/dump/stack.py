"""Call stacks for stack.json: frames innermost first, our own frames dropped.

A frame is ``"File {path}, line {n}, in {func}, \\n {source line stripped}"``. Formatting goes through
a cache keyed by (code object identity, bytecode offset), so the cost per record is a walk of
``f_back`` pointers: ``f_lineno`` is computed from the line table on every access and a code object's
hash from its constants, while ``id`` and ``f_lasti`` are plain fields (most of what is left is
making the frame objects).
"""

from __future__ import annotations

import inspect
import linecache
import os
import sys
from types import CodeType, FrameType

_OWN = (os.sep.join(("msprobe", "dump", "")), os.sep.join(("msprobe", "pytorch", "")))
# A torch function handing its call to the function mode (``return handle_torch_function(...)``): the
# same function runs again further in, redispatched, so the frame would show it twice; without the
# dump's mode (upstream's stacks) it never takes that branch. Dropped like our own frames.
_DISPATCH, _TORCH = "handle_torch_function(", os.sep.join(("", "torch", ""))
_cache: dict[tuple[CodeType, int], str | None] = {}  # (code, line) -> frame text
# (id(code), f_lasti) -> (code, frame text): keyed by id because hashing a code object hashes its
# constants every time (slow for torch's big functions)
_by_offset: dict[tuple[int, int], tuple[CodeType, str | None]] = {}
_own_code: dict[int, CodeType] = {}  # id -> code object of msprobe's own functions met in a walk
# call sites remembered at most: code generated at run time (``exec`` per step, recompiled graphs)
# would otherwise grow the caches for as long as the process dumps
MAX_SITES = 100_000
STACK_FAILED = ("The call stack retrieval failed.",)


def _format(code: CodeType, lineno: int) -> str | None:
    key = (code, lineno)
    try:
        return _cache[key]
    except KeyError:
        pass
    path = code.co_filename
    text: str | None = None
    if any(own in path for own in _OWN):
        _own_code[id(code)] = code  # held: its id is not reused
    else:
        src = linecache.getline(path, lineno).strip()
        if src and not (_DISPATCH in src and _TORCH in path):
            text = f"File {path}, line {lineno}, in {code.co_name}, \n {src}"
    _cache[key] = text
    return text


# Stacks of the frames still running, per ``skip_files``: id(frame) -> (frame, its f_lasti, texts from
# it outwards, its place in the chain), and the chain of those ids, outermost first. A running
# ordinary frame's callers are all suspended, so what lies outside it cannot change while it runs at
# that offset: most captures walk a few frames and find the rest here. Holding the frame keeps its id
# from being reused, and its locals alive: so the memo holds only the frames of the last captured
# stack (the entries beyond a capture's hit have returned or moved on, and are dropped then), never
# the frames of calls that returned long ago (a model's earlier layers and their tensors). Cleared at
# every stop (clear_frames). Generator and coroutine frames are resumed by other callers: never memoised.
_Memo = dict[int, tuple[FrameType, int, tuple[str, ...], int]]
_memos: dict[tuple[str, ...], tuple[_Memo, list[int]]] = {}
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def clear_frames() -> None:
    """Forget the memoised frames (they keep their locals alive)."""
    _memos.clear()


def capture_stack(
    frame: FrameType | None = None, skip_files: tuple[str, ...] = (), skip_code: CodeType | None = None
) -> tuple[str, ...]:
    """Frames from ``frame`` (default: the caller) outwards; ``skip_files`` suffixes are dropped, and
    the frame running ``skip_code``."""
    try:
        f: FrameType | None = frame if frame is not None else sys._getframe(1)
        walked: list[tuple[FrameType, int, str | None]] = []
        tail: tuple[str, ...] = ()
        get = _by_offset.get
        memoised = _memos.get(skip_files)
        if memoised is None:
            memoised = _memos[skip_files] = ({}, [])
        memo, chain = memoised
        kept = 0  # chain entries still on the stack: the hit and the frames outside it
        own = _own_code
        while f is not None:
            code = f.f_code
            if own.get(id(code)) is code and code is not skip_code:
                f = f.f_back  # ours (the recorder's own frames, most of every walk): dropped
                continue
            lasti = f.f_lasti
            if skip_code is None:
                hit = memo.get(id(f))
                if hit is not None and hit[0] is f and hit[1] == lasti:
                    tail = hit[2]
                    kept = hit[3] + 1
                    break
            key = (id(code), lasti)
            cached = get(key)
            if cached is not None and cached[0] is code:
                text = cached[1]
            else:
                text = _format(code, f.f_lineno or 0)
                if len(_by_offset) >= MAX_SITES:
                    _by_offset.clear()
                    _cache.clear()
                _by_offset[key] = (code, text)  # holds the code object: its id is not reused
            if text is not None and skip_files and code.co_filename.endswith(skip_files):
                text = None
            if code is skip_code:
                text, skip_code = None, None  # outside it, the memo applies
            walked.append((f, lasti, text))
            f = f.f_back
        out = tail
        while len(chain) > kept:  # returned, or running at another offset (walked again below)
            memo.pop(chain.pop(), None)
        for fr, lasti, text in reversed(walked):
            if text is not None:
                out = (text, *out)
                if not fr.f_code.co_flags & _RESUMABLE:
                    memo[id(fr)] = (fr, lasti, out, len(chain))
                    chain.append(id(fr))
        return out
    except Exception:  # pragma: no cover - defensive: a stack is never worth a crash
        return STACK_FAILED
