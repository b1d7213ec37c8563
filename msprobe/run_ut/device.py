"""Choosing the replay device at run time: ``cpu``, ``cuda`` or ``npu`` (torch_npu), never at import.

Without ``--msprobe-device`` the best available one is taken (cuda, then npu, then cpu). Under xdist
each worker takes card ``worker_index % device_count``, so ``-n 8`` spreads over the cards; with an
explicit id list (upstream ``-d 0 1``) worker ``i`` takes ``ids[i % len(ids)]``.

torch_npu is looked up with ``importlib.util.find_spec`` before it is imported: where it is absent it
is never imported. Where it is installed but fails to import (RuntimeError/OSError on a host without
CANN is common) the default probe falls back to cuda/cpu with one warning, and an explicit
``--msprobe-device=npu`` is a one-line error naming the import error.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from msprobe.errors import first_line
from msprobe.paths import where

CHOICES = ("cpu", "cuda", "npu")


class DeviceError(Exception):
    """The requested device is not available on this host."""


def _named(exc: BaseException) -> str:
    line = first_line(exc)
    return line if line == type(exc).__name__ else f"{type(exc).__name__}: {line}"


def _npu_installed() -> bool:
    try:
        return importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):  # a half-imported torch_npu in sys.modules without a spec
        return True


def _npu() -> Any | None:
    """``torch.npu`` when torch_npu imports and sees a card; None when absent or without a card.

    Raises ``DeviceError`` when torch_npu is installed but its import fails.
    """
    if not _npu_installed():
        return None
    try:
        importlib.import_module("torch_npu")
    except Exception as exc:  # whatever a broken torch_npu raises is named on one line
        raise DeviceError(f"torch_npu is installed but failed to import ({_named(exc)})") from None
    import torch

    npu = getattr(torch, "npu", None)
    return npu if npu is not None and npu.is_available() else None


def available(kind: str) -> bool:
    """Whether ``kind`` can be used here; ``DeviceError`` for an installed but broken torch_npu."""
    if kind == "cpu":
        return True
    import torch

    if kind == "cuda":
        return bool(torch.cuda.is_available())
    if kind == "npu":
        return _npu() is not None
    return False


def _unavailable(kind: str) -> str:
    if kind == "cuda":
        return "no CUDA device is available on this host (torch.cuda.is_available() is False)"
    if not _npu_installed():
        return "torch_npu is not installed on this host"
    return "no NPU device is available on this host (torch.npu.is_available() is False)"


def resolve(
    requested: str | None,
    warn: Callable[[str], None] = lambda message: None,
    option: str = "--msprobe-device=",
) -> str:
    """The device kind to replay on, checked once before anything runs.

    ``requested`` None takes the best available kind; a torch_npu that fails to import is reported
    through ``warn`` (one line) and skipped. A requested kind that is not usable raises ``DeviceError``
    with the one-line reason, prefixed with the option that asked for it (``option``, as the user
    typed it: ``msprobe run_ut`` checks its ``-device_type`` first).
    """
    if requested is None:
        for kind in ("cuda", "npu"):
            try:
                if available(kind):
                    return kind
            except DeviceError as exc:
                warn(f"{exc}; not replaying on npu")
        return "cpu"
    if requested not in CHOICES:
        raise DeviceError(f"unknown device {requested!r}; choose one of {', '.join(CHOICES)}")
    try:
        usable = available(requested)
    except DeviceError as exc:
        raise DeviceError(f"{where(option, requested)}: {exc}") from None
    if not usable:
        raise DeviceError(f"{where(option, requested)}: {_unavailable(requested)}")
    return requested


def card_count(kind: str) -> int:
    """How many cards of ``kind`` (cuda or npu) this process sees."""
    if kind == "cuda":
        import torch

        return int(torch.cuda.device_count())
    npu = _npu()
    return int(npu.device_count()) if npu is not None else 0


def check_ids(kind: str, ids: tuple[int, ...]) -> None:
    """Refuse card numbers this machine does not have (a worker would take another card)."""
    if kind == "cpu" or not ids:
        return
    count = card_count(kind)
    missing = [i for i in ids if i >= count]
    if missing:
        raise DeviceError(
            f"--msprobe-device-ids: no {kind} card {missing[0]} here ({count} visible: "
            f"{'0' if count == 1 else f'0-{count - 1}'})"
        )


def choose(
    requested: str | None, worker_index: int = 0, ids: tuple[int, ...] = (), jit_compile: bool = False
) -> str:
    """A torch device string for this process (``"cpu"``, ``"cuda:1"``, ``"npu:0"``)."""
    import torch

    if ids:
        worker_index = ids[worker_index % len(ids)]
    kind = resolve(requested)
    if kind == "cpu":
        return "cpu"
    index = worker_index % max(card_count(kind), 1)
    if kind == "cuda":
        torch.cuda.set_device(index)
        return f"cuda:{index}"
    npu = _npu()
    assert npu is not None
    npu.set_compile_mode(jit_compile=jit_compile)  # upstream -j; must match the dump's setting
    npu.config.allow_internal_format = jit_compile
    npu.set_device(index)
    return f"npu:{index}"
