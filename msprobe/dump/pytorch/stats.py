"""Summary slots of dump.json's tensor objects, their cache, and md5.

A :class:`Slot` holds one tensor version's Max/Min/Mean/Norm (computed by :mod:`.stat_batch`) and
md5. :class:`SummaryCache` avoids summarising the same unchanged tensor twice (an API's output is
usually the next API's input): it is keyed by the tensor object and checked against its version
counter, which every in-place op bumps. Some writes bump no counter of the tensor's own (fused
optimizers, a write through a ``.data`` alias), so the cache lives for one dump window only, and
what is written in it is forgotten with everything else on its storage.
"""

from __future__ import annotations

import ctypes
import itertools
import weakref
import zlib
from collections.abc import Iterable
from typing import Any

import torch

from msprobe.dump.pytorch.storage_index import StorageIndex

Stats = tuple[Any, Any, Any, Any]
NONE4: Stats = (None, None, None, None)


def tensor_md5(t: torch.Tensor) -> str:
    """Upstream's "md5": CRC-32 of the tensor's bytes (bf16 and other non-numpy dtypes as float32)."""
    return f"{_crc32(t, 0):08x}"


def tensors_md5(parts: list[torch.Tensor]) -> str:
    """The CRC-32 of the bytes of ``parts`` one after the other (a sparse tensor's indices, then
    its values); of one tensor, :func:`tensor_md5`."""
    crc = 0
    for t in parts:
        crc = _crc32(t, crc)
    return f"{crc:08x}"


def _crc32(t: torch.Tensor, crc: int) -> int:
    d = t.detach()
    if d.device.type != "cpu":
        d = d.cpu()
    d = d.resolve_conj().resolve_neg()  # a conj/neg-bit view: the bytes of the values it stands for
    if d.dtype in (torch.bfloat16,) or (d.dtype.itemsize == 1 and d.dtype.is_floating_point):
        d = d.float()
    elif d.dtype == torch.complex32:  # numpy has no complex32: the same bytes as float16 pairs
        d = d.contiguous().reshape(-1).view(torch.float16)
    d = d.contiguous()
    size = d.numel() * d.element_size()
    if size == 0:
        return zlib.crc32(b"", crc)
    # The bytes read in place, not through ``numpy()``: exporting a tensor to numpy marks its storage
    # non-resizable for good, and the tensor is the caller's (FSDP frees an all-gathered parameter
    # with ``storage.resize_(0)``, which would then raise in the training).
    return zlib.crc32((ctypes.c_char * size).from_address(d.data_ptr()), crc)


def element_sequence(t: torch.Tensor, memory_order: bool = False) -> tuple[Any, ...] | None:
    """What a full reduction of ``t`` reads, in order: storage address, offset, dtype and the
    coalesced (size, stride) layout. Two tensors with the same key and the same live storage hold the
    same elements in the same order (``x.view(...)`` of ``x``, a grad and its reshape), so their
    statistics and md5 are identical (torch's reductions coalesce dimensions the same way).

    ``memory_order``: the order a reduction reads them in. torch's reductions walk a tensor's
    dimensions by ascending stride (``x.t().sum()`` reads what ``x.sum()`` reads, in the same order),
    so a transposed or permuted view of a summarised tensor has its statistics, but not its md5
    (the bytes of ``x.t().contiguous()`` differ)."""
    if t.layout != torch.strided or t.device.type == "meta":
        return None
    n = t.numel()
    # the common case first: a contiguous tensor is one run of its elements
    if n > 1 and t.is_contiguous():
        runs: tuple[tuple[int, int], ...] | None = ((n, 1),)
    elif memory_order:
        runs = memory_order_layout(t.shape, t.stride())
    else:
        runs = coalesced_layout(t.shape, t.stride())
    if runs is None:
        return None
    ptr = storage_ptr(t)
    # a conj/neg-bit view reads the same memory as the tensor it views but stands for other values
    return None if ptr is None else (ptr, t.storage_offset(), t.dtype, runs, t.is_conj(), t.is_neg())


def storage_ptr(t: torch.Tensor) -> int | None:
    """The address of ``t``'s storage; None for a tensor without one of its own (a wrapper subclass)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return None


def coalesced_layout(shape: tuple[int, ...], stride: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(size, stride) runs, innermost first: size-1 dimensions dropped, a dimension merged into the
    run inside it where its stride continues that run."""
    return _coalesced(reversed([(n, st) for n, st in zip(shape, stride) if n != 1]))


def memory_order_layout(
    shape: tuple[int, ...], stride: tuple[int, ...]
) -> tuple[tuple[int, int], ...] | None:
    """:func:`coalesced_layout` of the dimensions sorted by stride (memory order); None for an
    expanded tensor (a zero stride, or two dimensions sharing one: elements read more than once, in
    no one order)."""
    dims = sorted((st, n) for n, st in zip(shape, stride) if n != 1)
    if (dims and dims[0][0] == 0) or any(a[0] == b[0] for a, b in itertools.pairwise(dims)):
        return None
    return _coalesced((n, st) for st, n in dims)


def _coalesced(dims: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[tuple[int, int]] = []
    for n, st in dims:
        if merged and st == merged[-1][0] * merged[-1][1]:
            merged[-1] = (n * merged[-1][0], merged[-1][1])
        else:
            merged.append((n, st))
    return tuple(merged)


_LAYOUT_MIN_NUMEL = 4096  # below this, summarising is cheaper than the layout key


def version_of(t: torch.Tensor) -> int | None:
    """``t._version``; None for an inference tensor (no version counter: never known unchanged)."""
    try:
        return t._version
    except RuntimeError:
        return None


def data_ptr(t: torch.Tensor) -> int:
    try:
        return int(t.data_ptr())
    except (RuntimeError, NotImplementedError):
        return -1  # sparse and other storage-less layouts


class Slot:
    """The (stats, md5) of one tensor version, and the summaries waiting for them.

    A summary (a dict with ``Max``/``Min``/``Mean``/``Norm`` and, with md5, ``md5`` keys) given to
    :meth:`attach` gets the values as soon as they are known (see :mod:`.stat_batch`).
    """

    __slots__ = ("_digest_known", "_waiting", "digest", "done", "md5", "stats")

    def __init__(self, md5: bool) -> None:
        self.md5 = md5
        self.stats: Stats | None = None
        self.digest: str | None = None  # None when known: a tensor without values (meta)
        self._digest_known = not md5
        self.done = False
        self._waiting: list[dict[str, Any]] = []

    def attach(self, summary: dict[str, Any]) -> None:
        if self.done:
            _fill(summary, self)
        else:
            self._waiting.append(summary)

    def set_stats(self, stats: Stats) -> None:
        self.stats = stats
        self._complete()

    def set_digest(self, digest: str | None) -> None:
        self.digest = digest
        self._digest_known = True
        self._complete()

    def _complete(self) -> None:
        if self.stats is None or not self._digest_known:
            return
        self.done = True
        waiting, self._waiting = self._waiting, []
        for summary in waiting:
            _fill(summary, self)


def _fill(summary: dict[str, Any], slot: Slot) -> None:
    st = slot.stats
    assert st is not None
    summary["Max"], summary["Min"], summary["Mean"], summary["Norm"] = st[0], st[1], st[2], st[3]
    if slot.md5:
        summary["md5"] = slot.digest


Entry = tuple["weakref.ref[torch.Tensor]", int, Slot, int]


# Devices whose reductions are torch's TensorIterator ones (dimensions walked by ascending stride);
# other backends (torch_npu) may copy a strided tensor to logical order before reducing it.
_MEMORY_ORDER_DEVICES = frozenset(("cpu", "cuda"))


def layout_key(t: torch.Tensor, md5: bool) -> tuple[Any, ...] | None:
    """The element sequence of a tensor worth it: its statistics read it in memory order (on the
    devices where torch reduces that way), its md5 in logical order."""
    if t.numel() < _LAYOUT_MIN_NUMEL:
        return None
    return element_sequence(t, memory_order=not md5 and t.device.type in _MEMORY_ORDER_DEVICES)


class SummaryCache:
    """Memo of summary slots per live tensor object and version, and per element sequence: an
    unchanged tensor seen again (an API's output as the next API's input) is summarised once.

    Emptied when a dump window opens (``start()``): between windows a tensor may have been written
    without a version bump (a fused optimizer step, ``p.data.add_(...)``), unseen. Within a window,
    :meth:`forget` drops every entry on a written tensor's storage: a ``.data`` alias has a version
    counter of its own, so writing it leaves the original's counter, and its cached summary, as
    they were."""

    __slots__ = ("_index",)

    def __init__(self, limit: int = 20000) -> None:
        # by tensor id, and by element sequence (whose first item is the storage address)
        self._index: StorageIndex[Entry] = StorageIndex(limit)

    def _cached(self, t: torch.Tensor, version: int, md5: bool) -> Slot | None:
        """The slot remembered for this very tensor object at this version (with md5 if wanted)."""
        hit = self._index.get(id(t))
        if (
            hit is not None
            and hit[0]() is t
            and hit[1] == version
            and (hit[2].md5 or not md5)
            and hit[3] == data_ptr(t)  # ``t.data = other`` swaps the memory without a version bump
        ):
            return hit[2]
        return None

    def same_layout(self, layout: tuple[Any, ...], version: int, md5: bool) -> Slot | None:
        """The slot of a live tensor remembered with this element sequence, unchanged since."""
        same = self._index.get(layout)
        if same is None or not (same[2].md5 or not md5):
            return None
        other = same[0]()
        # alive, unchanged, and on the very same storage: then the address cannot be a reuse
        if other is not None and other._version == version == same[1] and storage_ptr(other) == layout[0]:
            return same[2]
        return None

    def slot(self, t: torch.Tensor, md5: bool) -> tuple[Slot, bool]:
        """``(slot, fresh)``: the cached slot of ``t`` as it is now, or a new empty one (``fresh``)."""
        version = version_of(t)
        if version is None:  # never cached
            return Slot(md5), True
        cached = self._cached(t, version, md5)
        if cached is not None:
            return cached, False
        layout = layout_key(t, md5)
        if layout is not None:
            same = self.same_layout(layout, version, md5)
            if same is not None:
                self._remember(t, version, same, None, layout[0])
                return same, False
            ptr = layout[0]
        else:
            ptr = storage_ptr(t)
        slot = Slot(md5)
        self._remember(t, version, slot, layout, ptr)
        return slot, True

    def _remember(
        self, t: torch.Tensor, version: int, slot: Slot, layout: tuple[Any, ...] | None, ptr: int | None
    ) -> None:
        if ptr is None:  # no storage of its own: nothing could tell a write into it
            return
        try:
            entry = (weakref.ref(t), version, slot, data_ptr(t))
        except TypeError:
            return
        self._index.put(ptr, id(t), entry)
        if layout is not None:
            self._index.put(ptr, layout, entry)

    def forget(self, t: torch.Tensor) -> None:
        """Drop ``t`` and every entry on its storage: ``t`` was written, perhaps without a version
        bump (collectives, ``batch_norm``'s running statistics, a ``.data`` alias)."""
        self._index.drop(id(t))
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            return
        ptr = storage_ptr(t)
        if ptr is not None:
            self._index.drop_storage(ptr)

    def clear(self) -> None:
        """Forget everything (a dump window opens)."""
        self._index.clear()
