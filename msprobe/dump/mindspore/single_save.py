"""Module-level ``save(save_dir, name, data)`` / ``save_grad(save_dir, name, data)``.

8.1.1 routes these through ``ops.TensorDump`` (a graph op); here, in PyNative, the arrays are written
on the host with the same layout: ``{save_dir}/step{N}/rank{R}/{name}[.{key}...]_{dtype}_{seq}.npy``,
``seq`` a process-wide counter, bfloat16 stored as float32, nested dict/list/tuple data flattened
with ``.key`` suffixes. ``save_grad`` returns ``data`` passed through a gradient hook (use the
returned tensor) and writes ``{name}_grad_…`` when the gradient arrives. N is the debugger's current
step (0 without a debugger); R the communication rank (0 without one).
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import mindspore as ms
import numpy as np

from msprobe.dump.mindspore.backward import hook_backward
from msprobe.dump.mindspore.service import current_rank
from msprobe.dump.mindspore.stats import host_array
from msprobe.dump.writer import make_dirs
from msprobe.formats.dump_json import create_file

_seq = itertools.count()


def _folder(save_dir: str) -> str:
    from msprobe.dump.mindspore.debugger import PrecisionDebugger

    inst = PrecisionDebugger._instance
    step = inst.service.session.current_step if inst is not None else 0
    rank = current_rank() or 0
    return os.path.join(os.path.abspath(save_dir), f"step{step}", f"rank{rank}")


def _write(folder: str, stem: str, tensor: Any) -> None:
    data = host_array(tensor.asnumpy())
    make_dirs(folder)
    path = os.path.join(folder, f"{stem}_{data.dtype.name}_{next(_seq)}.npy")
    with os.fdopen(create_file(path, 0o666), "wb") as fh:  # the mode np.save(path) gives
        np.save(fh, data, allow_pickle=False)


def _leaves(value: Any, stem: str) -> list[tuple[str, Any]]:
    if isinstance(value, ms.Tensor):
        return [(stem, value)]
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _leaves(v, f"{stem}.{k}")]
    if isinstance(value, list | tuple):
        return [x for i, v in enumerate(value) for x in _leaves(v, f"{stem}.{i}")]
    return []


def save(save_dir: str, name: str, data: Any) -> None:
    """Write every tensor in ``data`` now."""
    folder = _folder(save_dir)
    for stem, tensor in _leaves(data, name):
        _write(folder, stem, tensor)


def save_grad(save_dir: str, name: str, data: Any) -> Any:
    """``data`` with a hook that writes its gradient as ``{name}_grad``; use the returned tensor."""
    if not isinstance(data, ms.Tensor):
        return data
    folder = _folder(save_dir)
    return hook_backward(data, lambda grad: _write(folder, f"{name}_grad", grad))
