"""Choosing the replay device at run time: ``cpu``, ``cuda`` or ``npu`` (torch_npu), never at import.

Without ``--msprobe-device`` the best available one is taken (cuda, then npu, then cpu). Under xdist
each worker takes card ``worker_index % device_count``, so ``-n 8`` spreads over the cards; with an
explicit id list (upstream ``-d 0 1``) worker ``i`` takes ``ids[i % len(ids)]``.
"""

from __future__ import annotations

import importlib
from typing import Any

CHOICES = ("cpu", "cuda", "npu")


class DeviceError(Exception):
    """The requested device is not available on this host."""


def _npu() -> Any | None:
    try:
        importlib.import_module("torch_npu")
    except ImportError:
        return None
    import torch

    npu = getattr(torch, "npu", None)
    return npu if npu is not None and npu.is_available() else None


def available(kind: str) -> bool:
    import torch

    if kind == "cpu":
        return True
    if kind == "cuda":
        return bool(torch.cuda.is_available())
    if kind == "npu":
        return _npu() is not None
    return False


def choose(
    requested: str | None, worker_index: int = 0, ids: tuple[int, ...] = (), jit_compile: bool = False
) -> str:
    """A torch device string for this process (``"cpu"``, ``"cuda:1"``, ``"npu:0"``)."""
    import torch

    if ids:
        worker_index = ids[worker_index % len(ids)]
    kind = requested or next(k for k in ("cuda", "npu", "cpu") if available(k))
    if kind not in CHOICES:
        raise DeviceError(f"unknown device {kind!r}; choose one of {', '.join(CHOICES)}")
    if not available(kind):
        raise DeviceError(f"--msprobe-device={kind}: no {kind} device is available on this host")
    if kind == "cpu":
        return "cpu"
    if kind == "cuda":
        index = worker_index % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(index)
        return f"cuda:{index}"
    npu = _npu()
    assert npu is not None
    index = worker_index % max(npu.device_count(), 1)
    npu.set_compile_mode(jit_compile=jit_compile)  # upstream -j; must match the dump's setting
    npu.config.allow_internal_format = jit_compile
    npu.set_device(index)
    return f"npu:{index}"
