"""``.pt`` files under ``dump_tensor_data/`` (spec §3.1): a detached, contiguous copy per tensor leaf.

Written at once (a crash keeps every tensor written so far), with mode 0o640, loadable with
``torch.load(path, weights_only=True)``. A tensor already written unchanged under another name (an
API output that is the next API's input) is hard-linked instead of written again.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator

import torch

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


class TensorWriter:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._written: dict[int, tuple[weakref.ref[torch.Tensor], int, str]] = {}

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
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(fd, "wb") as fh, _no_crc32():
            torch.save(_savable(t), fh)
        if len(self._written) > 20000:
            self._written.clear()
        try:
            self._written[id(t)] = (weakref.ref(t), t._version, path)
        except TypeError:
            pass

    def clear(self) -> None:
        self._written.clear()
