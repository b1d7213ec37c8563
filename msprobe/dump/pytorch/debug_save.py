"""``debugger.save(variable, name, save_backward=True)`` at level ``debug``: debug.json.

Records ``{name}.{k}.debug`` (the value's encoding, tensors as summaries) and, with
``save_backward``, ``{name}_grad.{k}.debug``: the same nesting with ``null`` leaves, each tensor leaf
that requires grad filled in when its gradient arrives. Invalid input is a warning and a skip.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from msprobe.dump.naming import CallCounter
from msprobe.dump.pytorch.encode import quiet
from msprobe.dump.pytorch.nocompile import no_compile
from msprobe.dump.save_walk import Path, check_savable, nulls, save_ignored, set_at, tensor_leaves

if TYPE_CHECKING:
    from msprobe.dump.pytorch.recorder import Recorder

log = logging.getLogger("msprobe")


class DebugSaver:
    def __init__(self, recorder: Recorder) -> None:
        self.rec = recorder
        self.counter = CallCounter()
        self.warned_ignored = False
        self._handles: list[Any] = []  # this step's gradient hooks (save_backward)
        # ``save(variable, name, save_backward=True)``, called from model code that may be compiled:
        # dynamo must not trace the recorder (it would compile our statistics and recompile them
        # every step); it breaks the graph here and the call runs eagerly
        self.save: Callable[..., None] = no_compile(self._save)

    def reset_step(self) -> None:
        self.counter.reset()
        # a hook whose gradient never came (no backward reached the tensor: an evaluation pass, a
        # frozen parameter) must not outlive its step: it holds the step's store, one more per save
        handles, self._handles = self._handles, []
        for h in handles:
            h.remove()

    def _save(self, variable: Any, name: Any, save_backward: Any = True) -> None:
        cfg = self.rec.config
        ignored = save_ignored(cfg.task, cfg.level)
        if ignored:
            if not self.warned_ignored:
                self.warned_ignored = True
                log.warning(ignored)
            return
        if not isinstance(name, str):
            log.warning("msprobe: save() skipped: name must be a str, got %r", name)
            return
        if not isinstance(save_backward, bool):
            log.warning(
                "msprobe: save(%s) skipped: save_backward must be a bool, got %r", name, save_backward
            )
            return
        err = check_savable(variable, torch.Tensor)
        if err:
            log.warning("msprobe: save(%s) skipped: %s", name, err)
            return
        if not self.rec.open_for_save():
            return
        store, enc = self.rec.store, self.rec.encoder
        if store is None or enc is None:
            return
        k = self.counter.next(name)
        record = f"{name}.{k}.debug"
        was = self.rec.enter()
        try:
            with quiet():
                store.put(record, enc.value(variable, record, "", ()))
            if save_backward:
                grads = [(p, t) for p, t in tensor_leaves(variable, torch.Tensor) if t.requires_grad]
                if grads:
                    self._watch(f"{name}_grad.{k}.debug", variable, grads)
        except Exception as exc:
            self.rec.record_error("debug_save", record, exc)
        finally:
            self.rec.leave(was)

    def _watch(self, record: str, variable: Any, grads: list[tuple[Path, torch.Tensor]]) -> None:
        store = self.rec.store
        assert store is not None
        value = nulls(variable)
        store.put(record, value)
        holder = {"value": value}

        for path, t in grads:
            # This step's only: a saved parameter lives on, and a hook left on it would fire in every
            # later backward, one more each step, into later steps' files.
            handle: list[Any] = []

            def hook(grad: torch.Tensor, path: Path = path, handle: list[Any] = handle) -> None:
                enc = self.rec.encoder
                if self.rec.store is not store:
                    handle[0].remove()
                    return
                if enc is None:
                    return
                # the gradient of the backward that follows this save: a saved parameter is a leaf
                # that lives on, and a later backward of the step (the next micro-batch, which saves
                # it again under the next k) must not rewrite this record with its own gradient
                handle[0].remove()
                was = self.rec.enter()
                try:
                    with quiet():
                        holder["value"] = set_at(holder["value"], path, enc.value(grad, record, "", path))
                        store.put(record, holder["value"])
                except Exception as exc:
                    self.rec.record_error("debug_save_grad", record, exc)
                finally:
                    self.rec.leave(was)

            handle.append(t.register_hook(hook))
            self._handles.append(handle[0])
