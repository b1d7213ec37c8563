"""``is_recompute`` of forward records: made while activation checkpointing
recomputes a forward pass during backward.

Detected from the Python stack, by the function running the recomputation:

* ``recompute_fn`` in ``torch/utils/checkpoint.py``: non-reentrant ``torch.utils.checkpoint`` (run from
  a saved-tensor unpack hook) and MindSpeed's ``CheckpointWithoutOutput``;
* the ``backward`` of a checkpoint autograd Function: torch's reentrant ``CheckpointFunction``,
  Megatron's (``megatron/core/tensor_parallel/random.py``) and MindSpeed's replacement
  ``checkpoint_function_backward``.

The ``backward`` of any other custom autograd Function is not a recomputation (upstream flags every
Python ``backward`` that autograd calls; see docs/dump.md, Deviations). Outside a backward pass nothing
is walked: the autograd engine's current graph task says so, cheaply enough to ask on every forward record.

While dumping, non-reentrant checkpoints recompute their whole function (:class:`FullRecomputation`,
as upstream): by default torch stops the recomputation, with an exception, once the tensors backward
needs exist, which would leave the rest of the recomputed forward unrecorded and module hooks entered
but never left.
"""

from __future__ import annotations

import contextlib
import os
import sys
from types import CodeType, FrameType
from typing import Any

from msprobe.dump.pytorch.torch_compat import running_backward

_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")
_CHECKPOINT_MODULES = (_CHECKPOINT_FILE, os.path.join("tensor_parallel", "random.py"))  # torch, Megatron
# id(code) -> (code, recomputes): a code object's hash hashes its constants, its id is a field; the
# entry holds the code object, so its id is not reused
_by_code: dict[int, tuple[CodeType, bool]] = {}
MAX_CODE_OBJECTS = 100_000  # code generated at run time: bounded, as stack.py's caches


def recomputes(code: CodeType) -> bool:
    """Whether frames of this code run a checkpointed forward again (the rules in the module doc)."""
    name, path = code.co_name, code.co_filename
    if name == "recompute_fn":
        return path.endswith(_CHECKPOINT_FILE)
    if name == "checkpoint_function_backward":
        return True
    if name == "backward":
        qualname = getattr(code, "co_qualname", "")  # Python >= 3.11
        return "Checkpoint" in qualname or path.endswith(_CHECKPOINT_MODULES)
    return False


def in_recomputation(frame: FrameType | None = None) -> bool:
    """Whether the caller (or ``frame``) runs inside an activation-checkpoint recomputation."""
    return recomputing_code(frame if frame is not None else sys._getframe(1)) is not None


def recomputing_code(frame: FrameType | None) -> CodeType | None:
    """The code of the innermost frame from ``frame`` out that runs a recomputation, or None."""
    if running_backward() is False:
        return None  # not inside a backward pass
    f = frame
    get = _by_code.get
    while f is not None:
        code = f.f_code
        hit = get(id(code))
        if hit is None or hit[0] is not code:
            if len(_by_code) >= MAX_CODE_OBJECTS:
                _by_code.clear()
            hit = _by_code[id(code)] = (code, recomputes(code))
        if hit[1]:
            return code
        f = f.f_back
    return None


def in_graph_free_recomputation() -> bool:
    """Inside a recomputation whose own graph backward never walks (non-reentrant
    ``torch.utils.checkpoint``: backward goes on through the original forward's nodes, the recomputed
    values only fill their saved tensors); a reentrant checkpoint's recomputation is backpropagated."""
    code = recomputing_code(sys._getframe(1))
    return code is not None and code.co_name == "recompute_fn"


class FullRecomputation:
    """``torch.utils.checkpoint.set_checkpoint_early_stop(False)`` from :meth:`enter` to :meth:`leave`
    (it is read when a checkpointed forward runs, so early-bound ``checkpoint`` names are covered)."""

    def __init__(self) -> None:
        self._active: contextlib.AbstractContextManager[Any] | None = None

    def enter(self) -> None:
        if self._active is not None:
            return
        try:
            from torch.utils.checkpoint import set_checkpoint_early_stop
        except ImportError:  # an older torch: nothing stops early
            return
        cm = set_checkpoint_early_stop(False)
        cm.__enter__()
        self._active = cm

    def leave(self) -> None:
        cm, self._active = self._active, None
        if cm is not None:
            cm.__exit__(None, None, None)
