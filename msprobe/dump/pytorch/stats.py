"""Tensor summaries of dump.json: Max/Min/Mean/Norm with upstream 8.1.1's dtype rules, md5.

Pure functions of a tensor. :class:`SummaryCache` avoids summarising the same unchanged tensor twice
(an API's output is usually the next API's input): it is keyed by the tensor object and checked
against its version counter, which every in-place op bumps.
"""

from __future__ import annotations

import functools
import threading
import weakref
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

Stats = tuple[Any, Any, Any, Any]
_NONE4: Stats = (None, None, None, None)
_CAST_TO_FLOAT = {torch.float64}
_NUMPY_MINMAX = frozenset((torch.float32, torch.float16))
_vector_norm = torch.linalg.vector_norm


def _float_stats_cpu(d: torch.Tensor) -> Stats | None:
    """Max/Min with numpy (exact in any order, faster than torch's on CPU), Mean/Norm by torch."""
    try:
        a = d.numpy()
    except (RuntimeError, TypeError):
        return None
    return (a.max().item(), a.min().item(), d.mean().item(), _vector_norm(d).item())


def tensor_stats(t: torch.Tensor) -> Stats:
    """(Max, Min, Mean, Norm) as upstream 8.1.1 computes them (values via ``.item()`` semantics)."""
    d = t.detach()
    if d.dtype in _NUMPY_MINMAX and d.is_cpu and d.dim() > 0 and d.numel() > 0:
        fast = _float_stats_cpu(d)  # the common case first, with the fewest checks
        if fast is not None:
            return fast
    if d.is_meta or d.numel() == 0 or (d.device.type != "meta" and d.data_ptr() == 0 and not d.is_sparse):
        return _NONE4
    if d.dtype == torch.bool:
        return (bool(d.any()), bool(d.all()), None, None)
    if d.dim() == 0:
        v = d.item()
        if isinstance(v, complex):
            v = abs(v)
            return (v, v, v, None)
        return (v, v, v, v)
    if d.is_complex():
        a = np.abs(d.cpu().numpy())
        return (float(a.max()), float(a.min()), float(a.mean()), None)
    if not d.is_floating_point() or d.dtype in _CAST_TO_FLOAT:
        d = d.float()
    elif d.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        d = d.float()  # float8 and other exotic floats
    if d.is_cpu and d.dtype in _NUMPY_MINMAX:
        fast = _float_stats_cpu(d)
        if fast is not None:
            return fast
    mn, mx = torch.aminmax(d)
    vals = torch.stack((mx, mn, d.mean(), torch.linalg.vector_norm(d))).tolist()
    return (vals[0], vals[1], vals[2], vals[3])


_BATCH_DTYPES = frozenset((torch.float32, torch.float16, torch.bfloat16))
_PLAIN = (torch.Tensor, torch.nn.Parameter)
# TorchScript from a string (no source file needed, and not the deprecated ``torch.jit.script``): the
# same ATen reductions as :func:`tensor_stats` (max/min are exact in any order), for a list of tensors
_STATS_OF_MANY = """
def stats_of_many(tensors: List[Tensor]) -> Tensor:
    out = torch.empty([len(tensors), 4], dtype=torch.float64)
    for i in range(len(tensors)):
        d = tensors[i]
        mn, mx = torch.aminmax(d)
        out[i, 0] = mx.double()
        out[i, 1] = mn.double()
        out[i, 2] = d.mean().double()
        out[i, 3] = torch.linalg.vector_norm(d).double()
    return out
"""


@functools.cache
def _stats_of_many() -> Callable[[list[torch.Tensor]], torch.Tensor] | None:
    try:
        return torch.jit.CompilationUnit(_STATS_OF_MANY).stats_of_many  # type: ignore[no-any-return]
    except Exception:  # a torch without TorchScript: one tensor at a time
        return None


def batchable(t: torch.Tensor) -> bool:
    """A plain dense CPU float tensor with elements, whose :func:`tensor_stats` are the four reductions
    that :class:`BatchStats` computes."""
    return (
        type(t) in _PLAIN
        and t.dtype in _BATCH_DTYPES
        and t.layout == torch.strided
        and t.device.type == "cpu"
        and t.dim() > 0
        and t.numel() > 0
    )


class BatchStats:
    """Max/Min/Mean/Norm of many tensors in one TorchScript call, looked up later by tensor and version.

    Why: the background worker summarises hundreds of tensors a step. One at a
    time, each of the four reductions releases the GIL and takes it back, and every hand-over with
    the training thread costs a wake-up on both sides. One call for a group of jobs releases it once.
    Filled by the worker before a group of jobs, cleared after.
    """

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[torch.Tensor, int, Stats]] = {}

    def compute(self, tensors: list[torch.Tensor]) -> None:
        fn = _stats_of_many()
        if fn is None or not tensors:
            return
        try:
            # the plain interpreter (a thread-local switch): the ops as written, and no
            # profiling and optimisation on the first calls; no autograd graph
            with torch.jit.optimized_execution(False), torch.no_grad():
                rows = fn(tensors).tolist()
        except Exception:  # summarised one by one instead (and an error reported there)
            return
        for t, row in zip(tensors, rows):
            self._by_id[id(t)] = (t, t._version, (row[0], row[1], row[2], row[3]))

    def take(self, t: torch.Tensor) -> Stats | None:
        hit = self._by_id.get(id(t))
        if hit is not None and hit[0] is t and hit[1] == t._version:
            return hit[2]
        return None

    def clear(self) -> None:
        self._by_id = {}


def tensor_md5(t: torch.Tensor) -> str:
    """Upstream's "md5": CRC-32 of the tensor's bytes (bf16 and other non-numpy dtypes as float32)."""
    d = t.detach()
    if d.device.type != "cpu":
        d = d.cpu()
    if d.dtype in (torch.bfloat16,) or (d.dtype.itemsize == 1 and d.dtype.is_floating_point):
        d = d.float()
    arr = d.contiguous().numpy()
    return f"{zlib.crc32(arr.reshape(-1).view(np.uint8)):08x}"  # type: ignore[arg-type]


def element_sequence(t: torch.Tensor) -> tuple[Any, ...] | None:
    """What a full reduction of ``t`` reads, in order: storage address, offset, dtype and the
    coalesced (size, stride) layout. Two tensors with the same key and the same live storage hold the
    same elements in the same order (``x.view(...)`` of ``x``, a grad and its reshape), so their
    statistics and md5 are identical (torch's reductions coalesce dimensions the same way)."""
    if t.layout != torch.strided or t.device.type == "meta":
        return None
    dims = [(n, st) for n, st in zip(t.shape, t.stride()) if n != 1]
    merged: list[tuple[int, int]] = []
    for n, st in reversed(dims):
        if merged and st == merged[-1][0] * merged[-1][1]:
            merged[-1] = (n * merged[-1][0], merged[-1][1])
        else:
            merged.append((n, st))
    return (t.untyped_storage().data_ptr(), t.storage_offset(), t.dtype, tuple(merged))


_LAYOUT_MIN_NUMEL = 4096  # below this, summarising is cheaper than the layout key


def _data_ptr(t: torch.Tensor) -> int:
    try:
        return int(t.data_ptr())
    except (RuntimeError, NotImplementedError):
        return -1  # sparse and other storage-less layouts


def _kept(t: torch.Tensor | None) -> bool:
    return t is not None and isinstance(t, torch.nn.Parameter)


class Slot:
    """The (stats, md5) of one tensor version; filled at once or later by the background worker."""

    __slots__ = ("digest", "done", "md5", "stats")

    def __init__(self, md5: bool) -> None:
        self.md5 = md5
        self.stats: Stats = _NONE4
        self.digest: str | None = None
        self.done = False

    def fill(self, t: torch.Tensor, ahead: BatchStats | None = None) -> None:
        try:
            stats = ahead.take(t) if ahead is not None else None
            self.stats = stats if stats is not None else tensor_stats(t)
            if self.md5:
                self.digest = tensor_md5(t)
        finally:
            self.done = True


Entry = tuple["weakref.ref[torch.Tensor]", int, Slot, int]


class LayoutMemo:
    """Slots by element sequence: a view or reshape of a summarised, unchanged tensor shares its
    summary. Used by the training thread (summaries computed at once) or by the background worker
    (deferred summaries: key and lookup then stay off the training thread); the
    lock makes a clear from the training thread safe while the worker looks up."""

    __slots__ = ("_by_layout", "_lock", "limit")

    def __init__(self, limit: int) -> None:
        self._by_layout: dict[tuple[Any, ...], Entry] = {}
        self._lock = threading.Lock()
        self.limit = limit

    def find(self, layout: tuple[Any, ...], version: int, md5: bool) -> Slot | None:
        with self._lock:
            same = self._by_layout.get(layout)
        if same is None or not (same[2].md5 or not md5):
            return None
        other = same[0]()
        # alive, unchanged, and on the very same storage: then the address cannot be a reuse
        if (
            other is not None
            and other._version == version == same[1]
            and other.untyped_storage().data_ptr() == layout[0]
        ):
            return same[2]
        return None

    def remember(self, layout: tuple[Any, ...], entry: Entry) -> None:
        with self._lock:
            if len(self._by_layout) >= self.limit:
                self._by_layout.clear()
            self._by_layout[layout] = entry

    def forget_storage(self, ptr: int) -> None:
        with self._lock:
            for k in [k for k in self._by_layout if k[0] == ptr]:
                del self._by_layout[k]

    def keep_parameters(self) -> None:
        with self._lock:
            self._by_layout = {k: e for k, e in self._by_layout.items() if _kept(e[0]())}

    def clear(self) -> None:
        with self._lock:
            self._by_layout.clear()


def layout_key(t: torch.Tensor) -> tuple[Any, ...] | None:
    return element_sequence(t) if t.numel() >= _LAYOUT_MIN_NUMEL else None


class SummaryCache:
    """Memo of summary slots per live tensor object and version, and per element sequence.

    The id/version memo is used from the training thread only; a slot may be filled later by the
    background worker (jobs run in order, so a slot handed out again is filled before any later job
    reads it). With ``layouts=False`` the element-sequence lookup is left to the caller (the worker,
    through :attr:`layouts`).
    """

    __slots__ = ("_entries", "ahead", "layouts", "limit")

    def __init__(self, limit: int = 20000) -> None:
        self._entries: dict[int, Entry] = {}
        self.layouts = LayoutMemo(limit)
        self.limit = limit
        self.ahead = BatchStats()  # the worker's summaries of its current batch

    def get(self, t: torch.Tensor, md5: bool) -> tuple[Stats, str | None]:
        """Summary now (computed here unless cached or computed ahead)."""
        slot, fresh = self.slot(t, md5)
        if fresh or not slot.done:
            slot.fill(t, self.ahead)
        return slot.stats, slot.digest

    def summarise_ahead(self, stamps: Iterable[tuple[Any, int]], md5: bool) -> None:
        """Worker side, before a batch of jobs: compute in one call the summaries that the jobs'
        ``(tensor, version when queued)`` will need: each distinct batchable tensor, unchanged since,
        not summarised already at that version."""
        todo: dict[int, torch.Tensor] = {}
        for t, version in stamps:
            if (
                id(t) not in todo
                and isinstance(t, torch.Tensor)
                and t._version == version
                and batchable(t)
                and not self._known(t, md5)
            ):
                todo[id(t)] = t
        self.ahead.compute(list(todo.values()))

    def _known(self, t: torch.Tensor, md5: bool) -> bool:
        cached = self._cached(t, t._version, md5)
        return cached is not None and cached.done

    def _cached(self, t: torch.Tensor, version: int, md5: bool) -> Slot | None:
        """The slot remembered for this very tensor object at this version (with md5 if wanted)."""
        hit = self._entries.get(id(t))
        if (
            hit is not None
            and hit[0]() is t
            and hit[1] == version
            and (hit[2].md5 or not md5)
            and hit[3] == _data_ptr(t)  # ``t.data = other`` swaps the memory without a version bump
        ):
            return hit[2]
        return None

    def slot(self, t: torch.Tensor, md5: bool, layouts: bool = True) -> tuple[Slot, bool]:
        """``(slot, fresh)``: the cached slot of ``t`` as it is now, or a new empty one (``fresh``)."""
        key = id(t)
        version = t._version
        cached = self._cached(t, version, md5)
        if cached is not None:
            return cached, False
        layout = layout_key(t) if layouts else None
        if layout is not None:
            same = self.layouts.find(layout, version, md5)
            if same is not None:
                self._remember(key, t, version, same, None)
                return same, False
        slot = Slot(md5)
        self._remember(key, t, version, slot, layout)
        return slot, True

    def share_layout(self, t: torch.Tensor, version: int, slot: Slot) -> Slot | None:
        """Worker side of ``slot(..., layouts=False)``: the filled slot of an unchanged tensor with
        the same element sequence as ``t`` (then ``t`` needs no summary of its own), else None after
        registering ``slot`` for ``t``'s element sequence."""
        layout = layout_key(t)
        if layout is None:
            return None
        same = self.layouts.find(layout, version, slot.md5)
        if same is not None and same is not slot and same.done:
            return same
        try:
            self.layouts.remember(layout, (weakref.ref(t), version, slot, _data_ptr(t)))
        except TypeError:
            pass
        return None

    def _remember(
        self, key: int, t: torch.Tensor, version: int, slot: Slot, layout: tuple[Any, ...] | None
    ) -> None:
        if len(self._entries) >= self.limit:
            self._entries.clear()
            self.layouts.clear()
        try:
            entry = (weakref.ref(t), version, slot, _data_ptr(t))
        except TypeError:
            return
        self._entries[key] = entry
        if layout is not None:
            self.layouts.remember(layout, entry)

    def forget(self, t: torch.Tensor) -> None:
        """Drop ``t``: collectives write into tensors without bumping their version counter."""
        self._entries.pop(id(t), None)
        if isinstance(t, torch.Tensor) and t.layout == torch.strided:
            self.layouts.forget_storage(t.untyped_storage().data_ptr())

    def clear(self) -> None:
        self._entries.clear()
        self.layouts.clear()

    def prune(self) -> None:
        """At a step's end keep only live parameters: a parameter written by ``optimizer.step()``
        (recorded as ``Tensor.add_``'s output) is not summarised again as the next forward's input.
        Buffers are dropped: kernels such as batch_norm update running statistics without bumping
        the version counter."""
        self._entries = {k: e for k, e in self._entries.items() if _kept(e[0]())}
        self.layouts.keep_parameters()
