"""Level mix: the APIs called by ``optimizer.step()`` and ``torch.nn.utils.clip_grad_*`` get the
construct.json parent ``optimizer`` / ``clip_grad`` (upstream 8.1.1).

:meth:`ScopeParents.install` registers torch's global optimizer step hooks and wraps the
``clip_grad_*`` functions of ``torch.nn.utils``; :meth:`ScopeParents.remove` removes the hooks and
puts the original functions back (from ``start()`` to ``stop()``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from msprobe.dump.pytorch.recorder import Recorder

OPTIMIZER = "optimizer"
CLIP_GRAD = "clip_grad"
_CLIP_FUNCTIONS = ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_")


class ScopeParents:
    """Pushes ``optimizer``/``clip_grad`` on ``forward_stack`` (the API parents) while they run."""

    def __init__(self, recorder: Recorder, forward_stack: list[str]) -> None:
        self.rec = recorder
        self.forward_stack = forward_stack
        self._handles: list[Any] = []
        self._restore: list[tuple[Any, str, Any]] = []
        # the frame of the optimizer step that pushed ``optimizer``: a step that raises runs no
        # post hook, and its parent must not outlive it
        self._step_frame: Any = None

    def install(self) -> None:
        if self._handles:
            return
        import torch.optim.optimizer as opt

        self._handles.append(opt.register_optimizer_step_pre_hook(self._optimizer_pre))
        self._handles.append(opt.register_optimizer_step_post_hook(self._optimizer_post))
        self._wrap_clip_grad()

    def remove(self) -> None:
        self._step_frame = None
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for owner, attr, orig in reversed(self._restore):
            setattr(owner, attr, orig)
        self._restore.clear()

    def _enter(self, parent: str) -> bool:
        store = self.rec.store
        if not self.rec.running or store is None:
            return False
        if parent not in store.construct:
            store.put_construct(parent, None)
        self.forward_stack.append(parent)
        return True

    def _leave(self, parent: str) -> None:
        if self.forward_stack and self.forward_stack[-1] == parent:
            self.forward_stack.pop()

    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.prune()
        if self._enter(OPTIMIZER):
            self._step_frame = sys._getframe(1)  # torch's step wrapper, running the hooks

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._leave(OPTIMIZER)
        self._step_frame = None

    def prune(self) -> None:
        """``optimizer`` off the stack when the step that pushed it is no longer running (it raised:
        torch runs no post hook then), so later calls keep their true parents."""
        frame = self._step_frame
        if frame is None or not self.forward_stack or self.forward_stack[-1] != OPTIMIZER:
            return
        f: Any = sys._getframe(1)
        while f is not None:
            if f is frame:
                return
            f = f.f_back
        self.forward_stack.pop()
        self._step_frame = None

    def _wrap_clip_grad(self) -> None:
        import torch.nn.utils as nn_utils

        for attr in _CLIP_FUNCTIONS:
            orig = getattr(nn_utils, attr, None)
            if orig is None or getattr(orig, "_msprobe_clip", False):
                continue
            setattr(nn_utils, attr, self._clip_wrapper(orig))
            self._restore.append((nn_utils, attr, orig))

    def _clip_wrapper(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            pushed = self._enter(CLIP_GRAD)
            try:
                return orig(*args, **kwargs)
            finally:
                if pushed:
                    self._leave(CLIP_GRAD)

        wrapper._msprobe_clip = True  # type: ignore[attr-defined]
        return wrapper
