"""Python values -> dump.json objects, tensors through a summary hook.

The encoder is a table of (type test, encoder) rows tried in order; tensors and numpy arrays get the
statistics object plus, when a :class:`TensorWriter` is given, a ``data_name`` and a ``.pt`` file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from msprobe.dump.exceptions import MsprobeException
from msprobe.dump.pytorch.irregular import nested_shape
from msprobe.dump.pytorch.stat_batch import StatsBatch, tensor_stats
from msprobe.dump.pytorch.stats import SummaryCache
from msprobe.dump.pytorch.tensor_io import TensorWriter
from msprobe.dump.pytorch.torch_compat import (
    DisableTorchFunction,
    local_shard,
    restore_transforms,
    set_grad_enabled_raw,
    set_transforms_aside,
    transform_level,
    transform_values,
    transform_wrapped,
)
from msprobe.dump.pytorch.tree import SEQUENCE, branches
from msprobe.formats.record_names import data_file_name

MAX_DEPTH = 50
PARAMETERS_GRAD = ".parameters_grad"
DEBUG_SUFFIX = ".debug"


class quiet:
    """``with quiet():`` around our own tensor code: no function-mode dispatch, no autograd and no
    torch.func transform, as ``DisableTorchFunction()`` + ``torch.no_grad()`` at a fraction of their
    cost; it runs a few hundred times a step."""

    __slots__ = ("_grad", "_off", "_transforms")

    def __enter__(self) -> None:
        self._off = DisableTorchFunction()
        self._off.__enter__()
        self._grad = torch.is_grad_enabled()
        set_grad_enabled_raw(False)
        self._transforms = None if transform_level() is None else set_transforms_aside()

    def __exit__(self, *exc: Any) -> None:
        if self._transforms is not None:
            restore_transforms(self._transforms)
        set_grad_enabled_raw(self._grad)
        self._off.__exit__(*exc)


Path = tuple[int | str, ...]


def _slice_value(v: Any) -> Any:
    if v is None or type(v) is int:
        return v
    if isinstance(v, torch.Tensor):
        return int(v.item())
    try:  # a numpy integer, or another ``__index__`` bound: its int, as upstream writes it
        return int(v)
    except (TypeError, ValueError):
        return None


class Encoder:
    """Values of one step's records; tensor statistics go to ``batch`` (resolved before encoding)."""

    def __init__(
        self,
        cache: SummaryCache,
        md5: bool,
        writer: TensorWriter | None,
        batch: StatsBatch,
        save_filter: Callable[[str], bool] | None = None,
    ) -> None:
        self.cache = cache
        self.md5 = md5
        self.writer = writer
        self.batch = batch
        self.save_filter = save_filter

    # -- tensors ----------------------------------------------------------------------------------
    def tensor(self, t: torch.Tensor, record: str, side: str, path: Path) -> dict[str, Any]:
        local = local_shard(t)  # a DTensor: this rank's shard
        example = local
        if transform_wrapped(local):  # under vmap: every example, and the first one
            local, example = transform_values(local)
        slot, fresh = self.cache.slot(local, self.md5)
        if fresh:
            self.batch.add(local, slot)
        try:
            out = _tensor_summary(example, t.requires_grad)
        except RuntimeError:
            if not example.is_nested:  # a strided nested tensor has no shape
                raise
            out = _nested_summary(example, t.requires_grad)
        if self.md5:
            out["md5"] = None
        slot.attach(out)
        if self.writer is not None and (self.save_filter is None or self.save_filter(record)):
            shareable = not record.endswith(PARAMETERS_GRAD)  # rewritten by each gradient of the step
            # debugger.save: one file per saved record, as 8.1.1 ({name}[_grad].{k}.debug[.{path}].pt)
            own_file = record.endswith(DEBUG_SUFFIX)
            out["data_name"] = self.writer.save(
                example, data_file_name(record, side, path), shareable and not own_file, reuse=not own_file
            )
        return out

    def ndarray(self, a: np.ndarray, record: str, side: str, path: Path) -> dict[str, Any]:
        t = torch.from_numpy(np.ascontiguousarray(a)) if a.dtype != object else None
        stats = tensor_stats(t) if t is not None else (None, None, None, None)
        out: dict[str, Any] = {
            "type": "numpy.ndarray",
            "dtype": str(a.dtype),
            "shape": list(a.shape),
            "Max": stats[0],
            "Min": stats[1],
            "Mean": stats[2],
            "Norm": stats[3],
        }
        if (
            self.writer is not None
            and t is not None
            and (self.save_filter is None or self.save_filter(record))
        ):
            out["data_name"] = self.writer.save(t, data_file_name(record, side, path))
        return out

    # -- everything -------------------------------------------------------------------------------
    def value(
        self, v: Any, record: str, side: str, path: Path = (), key: str | None = None, depth: int = 0
    ) -> Any:
        if isinstance(v, torch.Tensor):
            return self.tensor(v, record, side, path)
        if depth > MAX_DEPTH:
            raise MsprobeException(
                MsprobeException.RECURSION_LIMIT_ERROR, f"{record}: nesting deeper than {MAX_DEPTH}"
            )
        if v is None:
            return None
        if key == "device" and isinstance(v, int | str) and not isinstance(v, bool):
            return {"type": "torch.device", "value": v}  # ``device=0``, ``device="cuda:0"``, as upstream
        if isinstance(v, bool | int | float | str):
            builtin = type(v)
            if builtin in (bool, int, float, str):
                return {"type": builtin.__name__, "value": v}
            if isinstance(v, np.generic):  # np.float64, np.str_: numpy's own name, as upstream
                return {"type": builtin.__name__, "value": v.item()}
            return {"type": _base(v), "value": v}
        if isinstance(v, torch.dtype):
            return {"type": "torch.dtype", "value": str(v)} if key == "dtype" else {}
        if isinstance(v, torch.device):
            return {"type": "torch.device", "value": f"{v.type}:{v.index}"} if key == "device" else {}
        if isinstance(v, torch.Size):
            return {"type": "torch.Size", "value": list(v)}
        if isinstance(v, torch.memory_format):
            return {"type": "torch.memory_format", "format": str(v).rsplit(".", 1)[-1]}
        if isinstance(v, slice):
            return {
                "type": "slice",
                "value": [_slice_value(v.start), _slice_value(v.stop), _slice_value(v.step)],
            }
        if v is Ellipsis:
            return {"type": "ellipsis", "value": "..."}
        if isinstance(v, np.ndarray):
            return self.ndarray(v, record, side, path)
        if isinstance(v, np.generic):
            return {"type": type(v).__name__, "value": v.item()}
        node = branches(v)
        if node is not None:
            kind, parts = node
            if kind == SEQUENCE:
                return [self.value(x, record, side, (*path, i), None, depth + 1) for i, x in parts]
            return {k: self.value(x, record, side, (*path, k), k, depth + 1) for k, x in parts}
        special = _SPECIAL.get(type(v).__name__)
        if special is not None:
            return special(self, v, record, side, path)
        return None

    def args(self, args: tuple[Any, ...], record: str) -> list[Any]:
        return [self.value(a, record, "input", (i,)) for i, a in enumerate(args)]

    def kwargs(self, kwargs: dict[str, Any], record: str) -> dict[str, Any]:
        return {k: self.value(v, record, "kwargs", (k,), k) for k, v in kwargs.items()}

    def output(self, out: Any, record: str) -> list[Any]:
        if isinstance(out, tuple) and not hasattr(out, "_fields"):
            return [self.value(x, record, "output", (i,), None, 1) for i, x in enumerate(out)]
        return [self.value(out, record, "output", (0,))]  # a list too: upstream wraps every non-tuple

    def grads(self, grads: Any, record: str, side: str) -> list[Any]:
        return [self.value(g, record, side, (i,)) for i, g in enumerate(grads)]


_SUMMARIES: dict[tuple[torch.dtype, torch.Size], dict[str, Any]] = {}  # by dtype and shape


def _tensor_summary(t: torch.Tensor, requires_grad: bool) -> dict[str, Any]:
    """A tensor's statistics object, values to come, without md5/data_name (those follow, in this
    key order); copied from one made once per dtype and shape (the ``shape`` list is shared and never
    changed). A plain dict: records are pickled to the encoder process, and pickle writes a dict
    subclass such as :class:`~msprobe.formats.jsonfmt.Summary` several times slower; the JSON writer
    knows a tensor summary by its keys."""
    key = (t.dtype, t.shape)
    proto = _SUMMARIES.get(key)
    if proto is None:
        if t.is_nested:  # a jagged one: symbolic sizes
            return _nested_summary(t, requires_grad)
        proto = {
            "type": "torch.Tensor",
            "dtype": str(t.dtype),
            "shape": list(t.shape),
            "Max": None,
            "Min": None,
            "Mean": None,
            "Norm": None,
            "requires_grad": False,
        }
        if len(_SUMMARIES) < 4096:
            _SUMMARIES[key] = proto
    out = dict(proto)
    if requires_grad:
        out["requires_grad"] = True
    return out


def _nested_summary(t: torch.Tensor, requires_grad: bool) -> dict[str, Any]:
    out = _tensor_summary(torch.empty(0, dtype=t.dtype), requires_grad)
    out["shape"] = nested_shape(t)
    return out


def _base(v: Any) -> str:
    for t in (bool, int, float, str):
        if isinstance(v, t):
            return t.__name__
    return type(v).__name__


def _group_ranks(group: Any) -> list[int]:
    import torch.distributed as dist

    try:
        return list(dist.get_process_group_ranks(group))
    except Exception:
        return []


def _process_group(enc: Encoder, v: Any, record: str, side: str, path: Path) -> Any:
    import zlib

    ranks = _group_ranks(v)
    return {
        "type": "torch.ProcessGroup",
        "group_ranks": ranks,
        "group_id": f"{zlib.crc32(str(ranks).encode()):08x}",
    }


def _reduce_op(enc: Encoder, v: Any, record: str, side: str, path: Path) -> Any:
    return {"type": "torch.distributed.ReduceOp", "value": str(v)}


def _p2p_op(enc: Encoder, v: Any, record: str, side: str, path: Path) -> Any:
    import zlib

    ranks = _group_ranks(v.group) if v.group is not None else []
    return {
        "class_type": "torch.distributed.P2POp",
        "tensor": enc.value(v.tensor, record, side, (*path, "tensor")),
        "op": getattr(v.op, "__name__", str(v.op)),
        "peer": v.peer,
        "tag": v.tag,
        "group_id": f"{zlib.crc32(str(ranks).encode()):08x}",
    }


_SPECIAL: dict[str, Callable[[Encoder, Any, str, str, Path], Any]] = {
    "ProcessGroup": _process_group,
    "ReduceOp": _reduce_op,
    "RedOpType": _reduce_op,
    "P2POp": _p2p_op,
}
