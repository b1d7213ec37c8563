"""``debugger.save(variable, name, save_backward=True)`` at level ``debug`` (spec §1.6): debug.json.

Records ``{name}.{k}.debug`` (the value's encoding, tensors as summaries) and, with
``save_backward``, ``{name}_grad.{k}.debug``: the same nesting with ``null`` leaves, each tensor leaf
that requires grad filled in when its gradient arrives. Invalid input is a warning and a skip.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from msprobe.dump.naming import CallCounter

if TYPE_CHECKING:
    from msprobe.dump.pytorch.service import TorchDumpService

log = logging.getLogger("msprobe")
MAX_DEPTH = 50
Path = tuple[int | str, ...]


def check_savable(v: Any, depth: int = 0) -> str | None:
    """None if ``v`` is a tensor/int/float/str or a list/tuple/dict (str keys) nesting of them."""
    if depth > MAX_DEPTH:
        return f"nesting deeper than {MAX_DEPTH}"
    if isinstance(v, torch.Tensor | int | float | str):
        return None
    if isinstance(v, list | tuple):
        for x in v:
            err = check_savable(x, depth + 1)
            if err:
                return err
        return None
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                return f"dict key {k!r} is not a str"
            err = check_savable(x, depth + 1)
            if err:
                return err
        return None
    return f"unsupported type {type(v).__name__}"


def _leaves(v: Any, path: Path = ()) -> list[tuple[Path, torch.Tensor]]:
    if isinstance(v, torch.Tensor):
        return [(path, v)]
    if isinstance(v, list | tuple):
        return [leaf for i, x in enumerate(v) for leaf in _leaves(x, (*path, i))]
    if isinstance(v, dict):
        return [leaf for k, x in v.items() for leaf in _leaves(x, (*path, k))]
    return []


def _nulls(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return [_nulls(x) for x in v]
    if isinstance(v, dict):
        return {k: _nulls(x) for k, x in v.items()}
    return None


def _set(tree: Any, path: Path, value: Any) -> Any:
    if not path:
        return value
    tree[path[0]] = _set(tree[path[0]], path[1:], value)  # type: ignore[index]
    return tree


class DebugSaver:
    def __init__(self, service: TorchDumpService) -> None:
        self.svc = service
        self.counter = CallCounter()

    def reset_step(self) -> None:
        self.counter.reset()

    def save(self, variable: Any, name: Any, save_backward: Any = True) -> None:
        cfg = self.svc.config
        if cfg.task not in ("statistics", "tensor") or cfg.level != "debug":
            return
        if not isinstance(name, str):
            log.warning("msprobe: save() skipped: name must be a str, got %r", name)
            return
        if not isinstance(save_backward, bool):
            log.warning(
                "msprobe: save(%s) skipped: save_backward must be a bool, got %r", name, save_backward
            )
            return
        err = check_savable(variable)
        if err:
            log.warning("msprobe: save(%s) skipped: %s", name, err)
            return
        if not self.svc.open_for_save():
            return
        store, enc = self.svc.session.store, self.svc.encoder
        if store is None or enc is None:
            return
        k = self.counter.next(name)
        record = f"{name}.{k}.debug"
        was = self.svc._inside
        self.svc._inside = True
        try:
            with torch._C.DisableTorchFunction(), torch.no_grad():
                store.put(record, enc.value(variable, record, "", ()))
            if save_backward:
                grads = [(p, t) for p, t in _leaves(variable) if t.requires_grad]
                if grads:
                    self._watch(f"{name}_grad.{k}.debug", variable, grads)
        except Exception as exc:
            self.svc.session.record_error("debug_save", record, exc)
        finally:
            self.svc._inside = was

    def _watch(self, record: str, variable: Any, grads: list[tuple[Path, torch.Tensor]]) -> None:
        store = self.svc.session.store
        assert store is not None
        value = _nulls(variable)
        store.put(record, value)
        holder = {"value": value}

        for path, t in grads:

            def hook(grad: torch.Tensor, path: Path = path) -> None:
                st, enc = self.svc.session.store, self.svc.encoder
                if st is None or enc is None:
                    return
                was = self.svc._inside
                self.svc._inside = True
                try:
                    with torch._C.DisableTorchFunction(), torch.no_grad():
                        holder["value"] = _set(holder["value"], path, enc.value(grad, record, "", path))
                        st.put(record, holder["value"])
                except Exception as exc:
                    self.svc.session.record_error("debug_save_grad", record, exc)
                finally:
                    self.svc._inside = was

            t.register_hook(hook)
