"""``.pt`` files under ``dump_tensor_data/``: a detached, contiguous copy per tensor leaf.

Written at once (a crash keeps every tensor written so far), with mode 0o640, loadable with
``torch.load(path, weights_only=True)``. A tensor already written unchanged (an API output that is
the next API's input) is not written again: :meth:`TensorWriter.save` returns the earlier file's name,
which the record then carries as its ``data_name``.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

from msprobe.dump.pytorch.irregular import is_irregular, savable
from msprobe.dump.pytorch.stats import storage_ptr, version_of
from msprobe.dump.pytorch.storage_index import StorageIndex
from msprobe.dump.pytorch.torch_compat import (
    DisableTorchFunctionSubclass,
    PyTorchFileWriter,
    share_version_counter,
    storage_alignment,
    storage_persistent_id,
)
from msprobe.formats.dump_json import create_file

FILE_MODE = 0o640


def _savable(t: torch.Tensor) -> torch.Tensor:
    d = t.detach()
    if type(d) is not torch.Tensor and not is_irregular(d):
        # a tensor subclass (AsyncCollectiveTensor, the output of a functional collective that tensor
        # parallel layers return): torch.save would pickle its class, which weights_only=True refuses
        with DisableTorchFunctionSubclass():
            plain = d.clone()
        if type(plain) is torch.Tensor:
            return _savable(plain)
    if d.dtype.is_floating_point and d.dtype.itemsize == 1:
        d = d.float()  # float8: saved as float32, as upstream
    if d.device.type != "cpu" and d.device.type != "meta":
        d = d.cpu()  # loadable anywhere (the bytes cross to the host for the file anyway)
    if is_irregular(d):
        return savable(d)
    storage_bytes = d.untyped_storage().nbytes()
    if d.is_contiguous() and d.storage_offset() == 0 and storage_bytes == d.numel() * d.element_size():
        return d
    return d.contiguous().clone()


@contextlib.contextmanager
def _no_crc32() -> Iterator[None]:
    """Skip the zip CRC-32 of the payload while *we* save (a third of torch.save's time).

    torch.load does not check it; the user's own torch.save calls keep the setting they had.
    """
    ser = torch.serialization
    getter = getattr(ser, "get_crc32_options", None)
    setter = getattr(ser, "set_crc32_options", None)
    if getter is None or setter is None:
        yield
        return
    old = getter()
    setter(False)
    try:
        yield
    finally:
        setter(old)


class _StoragePickler(pickle.Pickler):
    """torch.save's pickling of one tensor whose one storage is record ``data/0`` (same bytes)."""

    def persistent_id(self, obj: object) -> object:
        return storage_persistent_id(obj)


def plain_cpu_tensor(t: torch.Tensor) -> bool:
    """A plain (no subclass) dense CPU tensor that does not require grad."""
    return (
        type(t) is torch.Tensor
        and t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.requires_grad
    )


def _lean_ok(d: torch.Tensor) -> bool:
    return plain_cpu_tensor(d) and not d.is_quantized and not d.is_conj() and not d.is_neg()


class _LeanSaver:
    """The zip archive torch.save writes for one plain CPU tensor, without its per-call overhead.

    torch.save spends most of its time on a small tensor outside the actual write (a pickler class built per
    call, tensor reduction, storage bookkeeping); a dump writes hundreds of files a step. The pickle
    (``data.pkl``) depends only on dtype, shape and strides, so it is made once per key with torch's
    own tensor reduction and reused; the records are the ones torch.save writes, through torch's own
    zip writer (no CRC-32: torch.load does not check it). Anything unusual goes through torch.save.
    """

    def __init__(self) -> None:
        self._pickles: dict[tuple[torch.dtype, tuple[int, ...], tuple[int, ...]], bytes] = {}
        self._alignment = storage_alignment()
        self._align = str(self._alignment).encode()
        self._byteorder = sys.byteorder.encode()

    def _pickle(self, d: torch.Tensor) -> bytes:
        key = (d.dtype, tuple(d.shape), d.stride())
        data = self._pickles.get(key)
        if data is None:
            buf = io.BytesIO()
            _StoragePickler(buf, protocol=torch.serialization.DEFAULT_PROTOCOL).dump(d)
            data = buf.getvalue()
            if len(self._pickles) > 4096:
                self._pickles.clear()
            self._pickles[key] = data
        return data

    def save(self, d: torch.Tensor, fh: io.BufferedWriter) -> None:
        data = self._pickle(d)
        writer = PyTorchFileWriter(fh, False, self._alignment)
        try:
            writer.write_record("data.pkl", data, len(data))
            writer.write_record(".format_version", b"1", 1)
            writer.write_record(".storage_alignment", self._align, len(self._align))
            writer.write_record("byteorder", self._byteorder, len(self._byteorder))
            storage = d.untyped_storage()  # the stub's ``Storage`` predates UntypedStorage; torch passes it
            writer.write_record("data/0", storage, storage.nbytes())  # type: ignore[arg-type]
        except BaseException:
            # A failed write (ENOSPC, EIO) leaves the archive unfinished, and the writer's destructor
            # would finish it, fail again and throw from a C++ destructor: std::terminate, the
            # training aborted. Finish it here (torch marks it finalized even when this raises), as
            # torch.save does in its ``__exit__``, and report the first error.
            try:
                writer.write_end_of_file()
            except Exception:
                pass
            raise
        writer.write_end_of_file()


Layout = tuple[Any, ...]


def _memory(t: torch.Tensor) -> tuple[Any, ...] | None:
    """Where and how ``t`` reads its memory: ``t.data = other`` changes it without a version bump."""
    try:
        return (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
    except (RuntimeError, NotImplementedError):
        return None  # sparse and other storage-less layouts


def _layout(t: torch.Tensor) -> Layout | None:
    """What the file of a plain dense tensor holds, read off its memory: storage address, offset,
    dtype, shape, strides, device. Conjugate, negative and quantized views read the same memory as
    other values, subclasses may hold anything: those have no layout."""
    if (
        type(t) not in (torch.Tensor, torch.nn.Parameter)
        or is_irregular(t)
        or t.is_meta
        or t.is_conj()
        or t.is_neg()
    ):
        return None
    ptr = storage_ptr(t)
    if ptr is None:
        return None
    return (ptr, t.storage_offset(), t.dtype, tuple(t.shape), t.stride(), t.device)


class _Written(NamedTuple):
    tensor: weakref.ref[torch.Tensor]
    version: int
    memory: tuple[Any, ...] | None
    name: str


class WrittenFiles:
    """The files written this step, by tensor object and by layout.

    A tensor is written unchanged when it is the very tensor object written before, at the same
    version and on the same memory, read the same way (``t.data = other`` swaps it without a version
    bump), or a view with the same layout as a tensor written before that is still alive, unchanged
    and provably shares its version counter (``x[:]``, a reshape to the same shape). Only weak
    references to the tensors are kept.
    """

    def __init__(self, limit: int = 20000) -> None:
        self._index: StorageIndex[_Written] = StorageIndex(limit)

    def earlier(self, t: torch.Tensor) -> str | None:
        """The file ``t`` was written to unchanged, or None."""
        version = version_of(t)
        if version is None:
            return None
        hit = self._index.get(id(t))
        if hit is not None and hit.tensor() is t and hit.version == version and hit.memory == _memory(t):
            return hit.name
        layout = _layout(t)
        if layout is None:
            return None
        hit = self._index.get(layout)
        if hit is None or hit.version != version:
            return None
        other = hit.tensor()
        if (
            other is None
            or other._version != version
            or storage_ptr(other) != layout[0]  # other's memory swapped (``other.data = ...``)
            or not share_version_counter(t, other)
        ):
            return None
        self.remember(t, hit.name, by_layout=False)
        return hit.name

    def remember(self, t: torch.Tensor, name: str, by_layout: bool = True) -> None:
        """``t`` is in file ``name`` as it is now (``by_layout``: also for views of it)."""
        version = version_of(t)
        storage = storage_ptr(t)
        if version is None or storage is None:
            return
        try:
            entry = _Written(weakref.ref(t), version, _memory(t), name)
        except TypeError:
            return
        self._index.put(storage, id(t), entry)
        layout = _layout(t) if by_layout else None
        if layout is not None:
            self._index.put(storage, layout, entry)

    def forget(self, t: torch.Tensor) -> None:
        """Drop ``t`` and everything on its memory (written without a version bump)."""
        self._index.drop(id(t))
        storage = storage_ptr(t)
        if storage is not None:
            self._index.drop_storage(storage)

    def clear(self) -> None:
        self._index.clear()


class TensorWriter:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._written = WrittenFiles()
        lean = PyTorchFileWriter is not None and os.environ.get("MSPROBE_PT_WRITER") != "torch.save"
        self._lean: _LeanSaver | None = _LeanSaver() if lean else None  # the env: benchmark comparison

    def save(self, t: torch.Tensor, file_name: str, shareable: bool = True, reuse: bool = True) -> str:
        """Write ``t`` as ``file_name`` unless it was written unchanged this step; the name of the
        file that holds it (the record's ``data_name``). ``shareable=False``: a file that its record
        may write again this step (``parameters_grad`` keeps the step's last gradient), so no other
        record is handed its name: a rewrite would change what that record names. ``reuse=False``:
        always write ``file_name`` (a ``debugger.save`` record has its own file, as in 8.1.1)."""
        if os.path.basename(file_name) != file_name:
            raise ValueError(f"tensor file name {file_name!r} must not contain a path separator")
        earlier = self._written.earlier(t) if reuse else None
        if earlier is not None:
            return earlier
        path = os.path.join(self.directory, file_name)
        if os.path.lexists(path):
            self._written.clear()  # written again: a record naming the old contents must not be handed out
        self._write(t, path)
        if shareable:
            self._written.remember(t, file_name)
        return file_name

    def _write(self, t: torch.Tensor, path: str) -> None:
        d = _savable(t)
        fd = create_file(path, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as fh:
                done = False
                if self._lean is not None and _lean_ok(d):
                    try:
                        self._lean.save(d, fh)
                        done = True
                    except OSError:  # the disk (ENOSPC, EIO), not the writer: said as it is, lean kept
                        raise
                    except Exception:  # a torch whose private writer API differs: torch.save from now on
                        self._lean = None
                        fh.seek(0)
                        fh.truncate()
                if not done:
                    with _no_crc32():
                        torch.save(d, fh)
        except BaseException:  # no unfinished file is left under the name a record would carry
            with contextlib.suppress(OSError):
                os.remove(path)
            raise

    def forget(self, t: torch.Tensor) -> None:
        self._written.forget(t)

    def forget_all(self) -> None:
        """Every file is written again when next seen (a dump window opens: tensors may have been
        written unseen since the last one, some without a version bump)."""
        self._written.clear()
