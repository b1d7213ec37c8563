"""stack.json frames: the memo of running frames gives exactly the stack a full walk gives, wherever
the capture happens (nested calls, one frame at several lines, recursion, generators resumed by
different callers, the skipped API frame)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

from msprobe.dump import stack
from msprobe.dump.stack import capture_stack, clear_frames


def _full_walk(
    frame: FrameType, skip_files: tuple[str, ...] = (), skip_code: CodeType | None = None
) -> tuple[str, ...]:
    out = []
    f: FrameType | None = frame
    while f is not None:
        text = stack._format(f.f_code, f.f_lineno or 0)
        if (
            text is not None
            and f.f_code is not skip_code
            and not (skip_files and f.f_code.co_filename.endswith(skip_files))
        ):
            out.append(text)
        f = f.f_back
    return tuple(out)


captured: list[tuple[tuple[str, ...], tuple[str, ...]]] = []


def _capture(skip_files: tuple[str, ...] = (), skip_code: CodeType | None = None) -> None:
    frame = sys._getframe(1)
    captured.append((capture_stack(frame, skip_files, skip_code), _full_walk(frame, skip_files, skip_code)))


def inner(depth: int) -> None:
    _capture()
    if depth:
        inner(depth - 1)  # recursion: the same code at the same line, other frames
    _capture()


def middle() -> None:
    _capture()
    inner(2)
    _capture()
    inner(0)
    _capture(skip_files=("test_stack.py",))
    _capture(skip_code=middle.__code__)


def gen() -> Iterator[int]:
    while True:
        _capture()  # the same frame at the same offset, resumed by another caller each time
        yield 1


def first_caller(g: Iterator[int]) -> None:
    next(g)


def second_caller(g: Iterator[int]) -> None:
    next(g)


def test_memoised_stacks_equal_full_walks() -> None:
    clear_frames()
    captured.clear()
    for _ in range(3):
        middle()
        g = gen()
        first_caller(g)
        second_caller(g)
    assert len(captured) == 3 * (4 + 2 * 3 + 2 + 2)
    for got, expected in captured:
        assert got == expected
    texts = {got for got, _ in captured}
    assert any("in second_caller" in " ".join(t) for t in texts) and any(
        "in first_caller" in " ".join(t) for t in texts
    )


def test_the_memo_is_bounded_and_cleared() -> None:
    clear_frames()
    captured.clear()
    for _ in range(200):
        middle()
    assert all(got == expected for got, expected in captured)
    # only the frames of the last captured stack are held, never those of calls that returned
    depth = len(inspect.stack(0))
    assert all(len(memo) == len(chain) <= depth + 8 for memo, chain in stack._memos.values())
    clear_frames()
    assert not stack._memos


def test_the_memo_does_not_keep_returned_frames_locals() -> None:
    """A returned frame holds its locals: a model layer's temporaries must not outlive it."""
    import weakref

    class Big:
        pass

    refs = []

    def layer() -> None:
        tmp = Big()
        refs.append(weakref.ref(tmp))
        capture_stack()

    clear_frames()
    for _ in range(5):
        layer()
    layer()  # a later capture drops what the earlier ones memoised
    assert sum(r() is not None for r in refs[:-1]) == 0
    clear_frames()


def test_call_sites_of_generated_code_do_not_grow_the_cache_forever(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack, "MAX_SITES", 50)
    for i in range(200):  # code generated at run time: a new code object per call site
        namespace: dict[str, object] = {"capture_stack": capture_stack}
        exec(compile(f"def generated_{i}():\n    return capture_stack()\n", f"<gen{i}>", "exec"), namespace)
        frames = namespace[f"generated_{i}"]()  # type: ignore[operator]
        assert frames
        assert len(stack._by_offset) <= 50


def test_torch_functions_handing_a_call_to_the_function_mode_are_not_shown_twice(
    debugger: Any, tmp_path: Path
) -> None:
    """``loss.backward()`` records ``Torch.ones_like``; ``Tensor.backward`` and ``autograd.backward``
    each hand their call to the dump's function mode (``return handle_torch_function(``) and run again
    further in: each appeared twice, where 8.1.1's stacks (no function mode) show each once."""
    import json

    import torch

    dbg = debugger(task="statistics", level="L1")
    dbg.start()
    x = torch.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    dbg.stop()
    stacks = json.loads((tmp_path / "dump" / "step0" / "rank" / "stack.json").read_text())
    frames = next(f for names, f in stacks.values() if "Torch.ones_like.0.forward" in names)
    assert not [f for f in frames if "handle_torch_function(" in f]
    functions = [f.split(", in ")[1].split(",")[0] for f in frames if "torch" in f.split(",")[0]]
    assert functions[:3] == ["_make_grads", "backward", "backward"], frames  # autograd's, Tensor's
    assert "test_stack.py" in frames[3]


def test_call_sites_read_in_generated_code_do_not_grow_callsite_caches_forever(
    debugger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python-level torch function (``F.relu``) called from code generated at run time (a forward
    exec'd per step): the call-site caches that recover the arguments as written held one entry per
    generated code object for ever, each with the code's whole disassembly (0.7 MB for a 400-line
    generated forward), while stack.py's caches are bounded."""
    import torch
    import torch.nn.functional as F

    from msprobe.dump.pytorch import callsite

    monkeypatch.setattr(callsite, "MAX_SITES", 50, raising=False)
    monkeypatch.setattr(callsite, "MAX_DISASSEMBLED", 8, raising=False)
    dbg = debugger(task="statistics", level="L1", step=[0])
    dbg.start()
    x = torch.ones(2)
    for i in range(120):
        namespace: dict[str, Any] = {"F": F}
        exec(compile(f"def gen(x):\n    y = {i}\n    return F.relu(x)\n", f"<gen{i}>", "exec"), namespace)
        namespace["gen"](x)
        assert len(callsite._sites) <= 50
        assert len(callsite._instructions) <= 8
    dbg.stop()
