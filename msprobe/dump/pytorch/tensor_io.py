"""``.pt`` files under ``dump_tensor_data/``: a detached, contiguous copy per tensor leaf.

Written at once (a crash keeps every tensor written so far), with mode 0o640, loadable with
``torch.load(path, weights_only=True)``. A tensor already written unchanged under another name (an
API output that is the next API's input) is hard-linked instead of written again.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
import weakref
from collections.abc import Iterator

import torch

from msprobe.dump.pytorch.torch_compat import PyTorchFileWriter, storage_alignment, storage_persistent_id

FILE_MODE = 0o640


def _savable(t: torch.Tensor) -> torch.Tensor:
    d = t.detach()
    if d.dtype.is_floating_point and d.dtype.itemsize == 1:
        d = d.float()  # float8: saved as float32, as upstream
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
        writer.write_record("data.pkl", data, len(data))
        writer.write_record(".format_version", b"1", 1)
        writer.write_record(".storage_alignment", self._align, len(self._align))
        writer.write_record("byteorder", self._byteorder, len(self._byteorder))
        storage = d.untyped_storage()  # the stub's ``Storage`` predates UntypedStorage; torch passes it
        writer.write_record("data/0", storage, storage.nbytes())  # type: ignore[arg-type]
        writer.write_end_of_file()


class TensorWriter:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._written: dict[int, tuple[weakref.ref[torch.Tensor], int, str]] = {}
        lean = PyTorchFileWriter is not None and os.environ.get("MSPROBE_PT_WRITER") != "torch.save"
        self._lean: _LeanSaver | None = _LeanSaver() if lean else None  # the env: benchmark comparison

    def save(self, t: torch.Tensor, file_name: str) -> None:
        path = os.path.join(self.directory, file_name)
        if os.path.basename(file_name) != file_name:
            raise ValueError(f"tensor file name {file_name!r} must not contain a path separator")
        hit = self._written.get(id(t))
        if hit is not None and hit[0]() is t and hit[1] == t._version:
            try:
                if os.path.exists(path):
                    os.remove(path)
                os.link(hit[2], path)
                return
            except OSError:
                pass
        d = _savable(t)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            done = False
            if self._lean is not None and _lean_ok(d):
                try:
                    self._lean.save(d, fh)
                    done = True
                except Exception:  # a torch whose private writer API differs: torch.save from now on
                    self._lean = None
                    fh.seek(0)
                    fh.truncate()
            if not done:
                with _no_crc32():
                    torch.save(d, fh)
        if len(self._written) > 20000:
            self._written.clear()
        try:
            self._written[id(t)] = (weakref.ref(t), t._version, path)
        except TypeError:
            pass

    def forget(self, t: torch.Tensor) -> None:
        self._written.pop(id(t), None)

    def clear(self) -> None:
        self._written.clear()
