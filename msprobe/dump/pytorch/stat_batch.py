"""Tensor statistics queued on the tensor's own device at capture, fetched in one transfer per batch.

Why: taking Max/Min/Mean/Norm with ``.item()`` makes four host-device synchronisations per tensor,
thousands a step, and each one stalls the host until the device has caught up. Here the reductions
are launched on the tensor's device when it is captured and their results stay there, one small
vector per tensor; stream order makes a later in-place write into the tensor harmless.
:meth:`StatsBatch.resolve` then joins the results of every pending tensor, one ``torch.cat`` and one
copy to the host per device and kind of value (floats, integers), whatever the number of tensors,
and hands the values to the waiting summaries. md5 of a device tensor is a non-blocking copy to the
host at capture, checksummed at resolve.

On the CPU a reduction costs its dispatch more than its arithmetic on the small tensors a model
records by the hundred, so a small contiguous float tensor is copied at capture (one operation: the
copy is what a later in-place write cannot reach) and summarised at resolve with the other copies of
its dtype and size, as the rows of one matrix: four reductions for the whole group. A row's reduction
reads the same elements in the same order as the full reduction of the tensor (a contiguous row of at
most :data:`GROUP_MAX_NUMEL` elements is never split between threads), so the values are the same
bits, which the tests check. Larger or strided CPU tensors are summarised at once.

The same reductions on every device, with upstream 8.1.1's dtype rules; the values are
torch's own ``max``/``min``/``mean``/``linalg.vector_norm`` of the tensor, which the tests check.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from msprobe.dump.pytorch.irregular import held_elements, is_irregular
from msprobe.dump.pytorch.stats import NONE4, Slot, Stats, data_ptr, tensor_md5, tensors_md5
from msprobe.dump.pytorch.torch_compat import DisableTorchFunction

_FOUR, _BOOL, _ABS3, _SCALAR, _ABS_SCALAR, _INT_SCALAR = range(6)
_NATIVE = frozenset((torch.float32, torch.float16, torch.bfloat16))
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a subclass's copy could turn its group's rows into one
_vector_norm = torch.linalg.vector_norm
GROUP_MAX_NUMEL = 1 << 14  # CPU tensors up to this size are summarised in groups (below torch's grain)
GROUP_BYTES = 64 << 20  # copies held for groups that make the groups be summarised at once
MD5_COPY_BYTES = 256 << 20  # host memory held by md5 copies of device tensors that fills a batch


class _Values:
    """The result vectors of one device (one per tensor), in two lists: floats (and bools) and
    integers, with the number of values each holds so far."""

    __slots__ = ("floats", "ints", "n_floats", "n_ints")

    def __init__(self) -> None:
        self.floats: list[torch.Tensor] = []
        self.ints: list[torch.Tensor] = []
        self.n_floats = 0
        self.n_ints = 0


class StatsBatch:
    """Slots waiting for their statistics (and md5), and the device tensors holding them."""

    __slots__ = ("_copies", "_copy_bytes", "_failure", "_group_bytes", "_groups", "_jobs", "_values")

    def __init__(self) -> None:
        self._jobs: list[tuple[Slot, int, Any, int]] = []  # slot, kind, device, its first value
        self._values: dict[Any, _Values] = {}
        self._copies: list[tuple[Slot, torch.Tensor, Any]] = []  # md5: host copy, source device
        self._copy_bytes = 0
        # small CPU float tensors by dtype and size: their slots and copies
        self._groups: dict[tuple[torch.dtype, int], tuple[list[Slot], list[torch.Tensor]]] = {}
        self._group_bytes = 0
        self._failure: Exception | None = None  # raised by the next resolve, once every slot is filled

    def __len__(self) -> int:
        return len(self._jobs) + len(self._copies) + sum(len(g[0]) for g in self._groups.values())

    @property
    def on_device(self) -> bool:
        """Some pending value is on a device: fetching it now would wait for the device."""
        return bool(self._copies) or any(d.type != "cpu" for d in self._values)

    @property
    def full(self) -> bool:
        """So much host memory is held by md5 copies that the batch should be resolved now."""
        return self._copy_bytes >= MD5_COPY_BYTES

    def add(self, t: torch.Tensor, slot: Slot) -> None:
        """Queue the statistics (and, for an md5 slot, the checksum) of ``t`` for ``slot``."""
        d = t.detach() if t.requires_grad else t  # no graph from our reductions, no numpy refusal
        if d.dtype in _NATIVE and d.layout == torch.strided and not d.is_meta and not d.is_nested:
            if slot.md5:  # the common case first, with the fewest checks
                self._md5(d, slot)
            if d.dim() > 0:
                if d.numel() == 0:
                    slot.set_stats(NONE4)
                else:
                    self._four(d, slot)
                return
        elif d.is_meta:  # no values
            slot.set_stats(NONE4)
            if slot.md5:
                slot.set_digest(None)
            return
        elif is_irregular(d):
            self._irregular(d, slot)
            return
        elif slot.md5:
            self._md5(d, slot)
        if d.numel() == 0 or data_ptr(d) == 0:
            slot.set_stats(NONE4)
        elif d.dtype == torch.bool:
            self._push(slot, _BOOL, d.device, (d.any(), d.all()))
        elif d.dim() == 0:  # its own value, copied: a later in-place write must not reach the record
            if d.is_complex():
                self._push(slot, _ABS_SCALAR, d.device, (d.abs(),))
            elif d.is_floating_point():
                self._push(slot, _SCALAR, d.device, (d.clone(),))
            else:
                self._push(slot, _INT_SCALAR, d.device, (d.clone(),))
        elif d.is_complex():
            a = d.abs()
            self._push(slot, _ABS3, d.device, (a.max(), a.min(), a.mean()))
        else:
            self._four(d.float(), slot)  # integers, float64 and float8: as float32 (upstream 8.1.1)

    def _irregular(self, d: torch.Tensor, slot: Slot) -> None:
        """A sparse, nested, quantized or mkldnn tensor: summarised now, from what it holds (rare
        enough that its host reads cost nothing that matters)."""
        held = held_elements(d)
        if slot.md5:
            slot.set_digest(tensors_md5([*held.indices, held.values]))
        v = held.values
        n = v.numel() + held.implicit_zeros
        if n == 0:
            slot.set_stats(NONE4)
            return
        if v.is_complex():
            v = v.abs()
        if v.dtype not in _NATIVE:  # bool, integers, float64
            v = v.float()
        if v.numel() == 0:  # nothing stored: all zeros
            slot.set_stats((0.0, 0.0, 0.0, 0.0))
            return
        mx, mn = v.max().item(), v.min().item()
        if held.implicit_zeros:
            mx, mn = max(mx, 0.0), min(mn, 0.0)
        mean = _rounded(v.sum(dtype=torch.float32).item() / n, v.dtype)
        slot.set_stats((mx, mn, mean, _vector_norm(v).item()))

    def _four(self, d: torch.Tensor, slot: Slot) -> None:
        if d.is_cpu:
            n = d.numel()
            if n <= GROUP_MAX_NUMEL and d.is_contiguous() and type(d) in _PLAIN:
                key = (d.dtype, n)
                group = self._groups.get(key)
                if group is None:
                    group = self._groups[key] = ([], [])
                group[0].append(slot)
                group[1].append(d.clone())
                self._group_bytes += n * d.element_size()
                if self._group_bytes >= GROUP_BYTES:
                    self._summarise_groups()
                return
            # On the CPU a value is ready when its kernel returns (``.item()`` waits for nothing), so
            # the slot is filled at once. torch's CPU mean is the float32 sum divided by the count,
            # rounded to the dtype (the sum alone is several times cheaper there); a full aminmax
            # costs less than amax + amin at any size (several times less in float16 and bfloat16).
            mn, mx = torch.aminmax(d)
            mean = _rounded(d.sum(dtype=torch.float32).item() / n, d.dtype)
            slot.set_stats((mx.item(), mn.item(), mean, _vector_norm(d).item()))
        else:
            mn, mx = torch.aminmax(d)
            self._push(slot, _FOUR, d.device, (mx, mn, d.mean(), _vector_norm(d)))

    def _push(
        self,
        slot: Slot,
        kind: int,
        device: Any,
        values: tuple[torch.Tensor, ...],
    ) -> None:
        """One vector of a tensor's 0-dim results (stacking a few thousand 0-dim tensors at the
        batch costs more than one small stack per tensor here)."""
        bucket = self._values.get(device)
        if bucket is None:
            bucket = self._values[device] = _Values()
        vector = torch.stack(values) if len(values) > 1 else values[0].reshape(1)
        if kind == _INT_SCALAR:
            self._jobs.append((slot, kind, device, bucket.n_ints))
            bucket.ints.append(vector)
            bucket.n_ints += len(values)
        else:
            self._jobs.append((slot, kind, device, bucket.n_floats))
            bucket.floats.append(vector)
            bucket.n_floats += len(values)

    def _fail(self, exc: Exception) -> None:
        """Keep the first failure of the batch, to raise once every slot is filled."""
        if self._failure is None:
            self._failure = exc

    def _md5(self, d: torch.Tensor, slot: Slot) -> None:
        if d.device.type == "cpu" or d.numel() == 0:
            slot.set_digest(tensor_md5(d))
            return
        if d.dtype == torch.bfloat16 or (d.dtype.itemsize == 1 and d.dtype.is_floating_point):
            d = d.float()  # as tensor_md5 does, on the device
        host = d.contiguous().to("cpu", non_blocking=True)
        self._copies.append((slot, host, d.device))
        self._copy_bytes += host.numel() * host.element_size()

    def _summarise_groups(self) -> None:
        """The statistics of every grouped CPU tensor: four reductions over each group's rows."""
        groups, self._groups, self._group_bytes = self._groups, {}, 0
        results: list[torch.Tensor] = []  # per group: its rows' max, min, mean and norm
        all_slots: list[list[Slot]] = []
        for (dtype, _), (slots, copies) in groups.items():
            try:
                results += _group_statistics(dtype, copies)
            except Exception as exc:  # a tensor subclass without these operations: this group only
                self._fail(exc)
                for slot in slots:
                    slot.set_stats(NONE4)
                continue
            all_slots.append(slots)
        if not results:
            return
        values = self._host_values(results)  # every group's values in one transfer to Python
        at = 0
        for slots in all_slots:
            k = len(slots)
            for i, slot in enumerate(slots, at):
                slot.set_stats((values[i], values[i + k], values[i + 2 * k], values[i + 3 * k]))
            at += 4 * k

    def _host_values(self, vectors: list[torch.Tensor]) -> list[Any]:
        """The values of ``vectors`` as Python numbers, in one transfer to the host (``torch.cat``
        widens float16/bfloat16 exactly). When that fails (a tensor subclass whose results stay
        wrapped on the host: ``tolist`` refuses them), vector by vector, None for the ones that fail:
        one such tensor spoils no other record's values."""
        try:
            return torch.cat(vectors).cpu().tolist()  # type: ignore[no-any-return]
        except Exception:
            pass
        out: list[Any] = []
        for v in vectors:
            try:
                out += v.cpu().tolist()
            except Exception as exc:
                self._fail(exc)
                out += [None] * v.numel()
        return out

    def resolve(self) -> None:
        """Fetch every pending value (one transfer per device and kind) and fill the slots."""
        if not self._groups and not self._jobs and not self._copies and self._failure is None:
            return
        with DisableTorchFunction():  # called where the dump's function mode may be on
            self._resolve()

    def _resolve(self) -> None:
        if self._groups:
            self._summarise_groups()
        if self._jobs or self._copies:
            self._fetch()
        failure, self._failure = self._failure, None
        if failure is not None:  # every slot has its values (None where they failed): now report
            raise failure

    def _fetch(self) -> None:
        jobs, values, copies = self._jobs, self._values, self._copies
        self._jobs, self._values, self._copies, self._copy_bytes = [], {}, [], 0
        # results may come from several streams (a backward pass runs on the forward's streams): the
        # devices finish what was queued before the results are joined on this thread's stream
        devices = {d for d in values if d.type != "cpu"} | {d for _, _, d in copies}
        if devices:
            _synchronize(devices)
        fetched: dict[tuple[Any, bool], list[Any]] = {}
        for device, bucket in values.items():
            if bucket.floats:
                fetched[(device, False)] = self._host_values(bucket.floats)
            if bucket.ints:
                fetched[(device, True)] = self._host_values(bucket.ints)
        for slot, host, _ in copies:
            try:
                slot.set_digest(tensor_md5(host))
            except Exception as exc:
                self._fail(exc)
        for slot, kind, device, at in jobs:
            slot.set_stats(_stats(kind, fetched[(device, kind == _INT_SCALAR)], at))


def _stats(kind: int, values: list[Any], at: int) -> Stats:
    if values[at] is None:  # not readable on the host (see StatsBatch._host_values)
        return NONE4
    if kind == _FOUR:
        return (values[at], values[at + 1], values[at + 2], values[at + 3])
    if kind == _BOOL:
        return (bool(values[at]), bool(values[at + 1]), None, None)
    if kind == _ABS3:
        return (values[at], values[at + 1], values[at + 2], None)
    v = values[at]
    return (v, v, v, None) if kind == _ABS_SCALAR else (v, v, v, v)


def _group_statistics(dtype: torch.dtype, copies: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Max, min, mean and norm of each of ``copies`` (one size), as rows of one matrix."""
    shape = copies[0].shape
    if all(c.shape == shape for c in copies):
        rows = torch.stack(copies).view(len(copies), -1)
    else:  # tensors of one size in several shapes (a view per copy only here)
        rows = torch.stack([c.view(-1) for c in copies])
    # torch's CPU mean: the float32 sum divided by the count in float32, rounded to the dtype
    means = rows.sum(dim=1, dtype=torch.float32).div_(rows.shape[1])
    if dtype != torch.float32:
        means = means.to(dtype)
    # (aminmax over rows is not vectorised)
    return rows.amax(dim=1), rows.amin(dim=1), means, _vector_norm(rows, dim=1)


def _rounded(v: float, dtype: torch.dtype) -> float:
    """``v`` rounded to float32 (a float32 division: double rounding of a quotient of float32s through
    float64 is exact), then to ``dtype``, as torch's CPU mean rounds its result."""
    f = np.float32(v)
    if dtype == torch.float16:
        return float(np.float16(f))
    if dtype == torch.bfloat16 and np.isfinite(f):
        bits = int(f.view(np.uint32))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round to nearest even
        return float(np.uint32(bits).view(np.float32))
    return float(f)


def _synchronize(devices: set[Any]) -> None:
    """Wait for the devices' queued work (every stream): results and host copies are complete."""
    acc = getattr(torch, "accelerator", None)
    for device in devices:
        module = getattr(torch, device.type, None)
        sync = getattr(module, "synchronize", None)
        if sync is not None:
            sync(device)
        elif acc is not None:
            acc.synchronize(device)


def tensor_stats(t: torch.Tensor) -> Stats:
    """(Max, Min, Mean, Norm) of one tensor, now: a batch of one."""
    slot = Slot(md5=False)
    batch = StatsBatch()
    batch.add(t, slot)
    batch.resolve()
    assert slot.stats is not None
    return slot.stats
