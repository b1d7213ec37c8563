"""``PrecisionDebugger.save(variable, name, save_backward)`` at level debug.

Records ``{name}.{k}.debug`` (and ``{name}_grad.{k}.debug``, filled by ``Tensor.register_hook`` when
the gradients arrive) into ``debug.json``; tensor task writes ``{name}.{k}.debug[.{index}].npy``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import mindspore as ms

from msprobe.dump.naming import CallCounter
from msprobe.dump.save_walk import Path, check_savable, nulls, save_ignored, set_at, tensor_leaves

if TYPE_CHECKING:
    from msprobe.dump.mindspore.service import MsDumpService

log = logging.getLogger("msprobe")


class DebugSaver:
    def __init__(self, service: MsDumpService) -> None:
        self.service = service
        self.counter = CallCounter()
        self.warned_ignored = False
        service.step_reset.append(self.counter.reset)

    def save(self, variable: Any, name: Any, save_backward: Any = True) -> None:
        svc = self.service
        cfg = svc.config
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
            log.warning("msprobe: save() skipped for %s: save_backward must be a bool", name)
            return
        why = check_savable(variable, ms.Tensor)
        if why:
            log.warning("msprobe: save() skipped for %s: %s", name, why)
            return
        if not svc.start():
            return
        svc.session.running = False  # save() records directly; no API hooks run at level debug
        assert svc.encoder is not None
        store = svc.session.store
        assert store is not None
        k = self.counter.next(name)
        record = f"{name}.{k}.debug"
        svc.inside = True
        try:
            store.put(record, svc.encoder.debug(variable, record))
        except Exception as exc:
            svc.session.record_error("debug_data_collect", record, exc)
        finally:
            svc.inside = False
        if save_backward:
            self._attach_grads(variable, f"{name}_grad.{k}.debug")

    def _attach_grads(self, variable: Any, record: str) -> None:
        svc = self.service
        store = svc.session.store
        assert store is not None
        holder = {"v": nulls(variable)}
        store.put(record, holder["v"])
        for path, tensor in tensor_leaves(variable, ms.Tensor):
            tensor.register_hook(self._grad_hook(record, path, holder))

    def _grad_hook(self, record: str, path: Path, holder: dict[str, Any]) -> Any:
        def hook(grad: Any) -> None:
            svc = self.service
            store = svc.session.store
            if store is None or svc.encoder is None or svc.foreign_process():
                return  # (a forked child's backward: the store and the tensor folder are its parent's)
            stem = ".".join([record, *map(str, path)])
            svc.inside = True
            try:
                holder["v"] = set_at(holder["v"], path, svc.encoder.debug(grad, stem))
                store.put(record, holder["v"])
            except Exception as exc:
                svc.session.record_error("debug_grad_collect", record, exc)
            finally:
                svc.inside = False

        return hook


__all__ = ["DebugSaver"]
