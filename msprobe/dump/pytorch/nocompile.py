"""``no_compile(fn)``: our hooks and handlers, never traced by torch.compile.

Dynamo would otherwise compile the recorder, and recompile it. Nothing of torch's or the user's is
changed: the one thing marked process-wide is the code object of the wrapper below (dynamo skips its
frames), which is msprobe's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from msprobe.dump.pytorch.torch_compat import eval_frame_hooks

_DISABLE_ATTRS = ("_torchdynamo_disable", "_torchdynamo_disable_msg", "_torchdynamo_disable_recursive")


def no_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, never traced by torch.compile.

    ``torch.compiler.disable``'s wrapper resets the frame evaluator on every call, and our hooks
    run a few hundred times a step. In eager mode there is nothing to disable, so the wrapper below
    calls ``fn`` directly and takes the disabled path only while a compiled frame runs (an eval-frame
    callback is set); its own frame is skipped by dynamo and inlining it is refused like ``disable``'s.
    """
    disable = getattr(torch.compiler, "disable", None)
    if disable is None:
        return fn
    disabled = disable(fn)
    eval_frame_callback, skip_frame = eval_frame_hooks()
    if eval_frame_callback is None or skip_frame is None:
        return disabled

    def call(*args: Any, **kwargs: Any) -> Any:
        if eval_frame_callback() is None:
            return fn(*args, **kwargs)
        return disabled(*args, **kwargs)

    skip_frame(call.__code__)  # one code object for every wrapper
    functools.update_wrapper(call, fn)

    for attr in _DISABLE_ATTRS:
        if hasattr(disabled, attr):
            setattr(call, attr, getattr(disabled, attr))
    return call
