"""A CUDA device made of CPU tensors, counting what a real device would synchronise the host on.

:class:`OnDevice` wraps a CPU tensor and reports ``device == cuda:0``; every operation runs on the
wrapped tensor. It counts the host synchronisations a real device makes: a value read on the host
(``aten._local_scalar_dense``: ``item()``, ``float()``, ``bool()``), a blocking copy to the host
(``.cpu()``, ``.tolist()``, ``.numpy()`` go through one), and ``torch.cuda.synchronize`` (patched by
:func:`counting`). A non-blocking copy to the host is counted apart: it does not wait.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map

aten = torch.ops.aten
DEVICE = torch.device("cuda", 0)
CPU = torch.device("cpu")
COUNTS: Counter[str] = Counter()


class OnDevice(torch.Tensor):
    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> OnDevice:
        t = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls,
            inner.shape,
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            device=DEVICE,
            requires_grad=inner.requires_grad,
        )
        t.inner = inner
        return t  # type: ignore[no-any-return]

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self) -> str:  # type: ignore[override]
        return f"OnDevice({self.inner!r})"

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default:
            COUNTS["sync"] += 1
            return args[0].inner.item()
        plain_args, plain_kwargs = tree_map(_inner, (args, kwargs))
        if func in (aten._to_copy.default, aten.to.device, aten.to.dtype_layout) and _to_host(
            plain_kwargs, args
        ):
            COUNTS["copy_async" if plain_kwargs.get("non_blocking") else "sync"] += 1
            plain_kwargs = {k: v for k, v in plain_kwargs.items() if k != "non_blocking"}
            return func(*plain_args, **plain_kwargs)
        if "device" in plain_kwargs and plain_kwargs["device"] is not None:
            plain_kwargs["device"] = CPU  # factories asked for the device: made on the CPU, wrapped
        out = func(*plain_args, **plain_kwargs)
        return tree_map(_wrap, out)


def _inner(x: Any) -> Any:
    return x.inner if isinstance(x, OnDevice) else x


def _wrap(x: Any) -> Any:
    return OnDevice(x) if isinstance(x, torch.Tensor) and not isinstance(x, OnDevice) else x


def _to_host(kwargs: dict[str, Any], args: Any) -> bool:
    device = kwargs.get("device")
    return isinstance(args[0], OnDevice) and device is not None and torch.device(device).type == "cpu"


def on_device(t: torch.Tensor) -> torch.Tensor:
    """``t`` (a parameter's data too) on the fake device."""
    return OnDevice(t.detach().requires_grad_(t.requires_grad))


@contextlib.contextmanager
def counting(monkeypatch: Any) -> Iterator[Counter[str]]:
    """Counts from zero inside the block; ``torch.cuda.synchronize`` counted as one sync."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: COUNTS.update(["sync"]))
    COUNTS.clear()
    yield COUNTS
