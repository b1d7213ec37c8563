"""Python/MindSpore values -> dump.json values, ``.npy`` tensor files.

The encoder is a table of ``(type test, encoder)`` rows tried in order; tensors go through
:func:`msprobe.dump.mindspore.stats.tensor_summary`. Tensor files are written when the record is
collected, named ``{record}.{side}.{index path}.npy``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import mindspore as ms
import numpy as np

from msprobe.dump.mindspore.deferred import Pending
from msprobe.dump.mindspore.stats import array_stats, host_array, tensor_summary
from msprobe.formats.dump_json import create_file
from msprobe.formats.jsonfmt import Summary
from msprobe.formats.record_names import file_safe

log = logging.getLogger("msprobe")

MAX_DEPTH = 50
_MAX_PATH = 4096


def _is_dtype(value: Any) -> bool:
    return isinstance(value, ms.dtype.Type)


class TensorSaver:
    """Writes ``.npy`` files into one ``dump_tensor_data`` folder."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def save(self, stem: str, data: np.ndarray) -> str | None:
        """Write ``data`` as ``{stem}.npy`` (its file name made one name, :func:`file_safe`); the file
        name written (the record's ``data_name``), None when it is too long to write."""
        file_name = file_safe(f"{stem}.npy")
        # a record name made of user text (a Cell or class name, a custom API prefix) must not lead
        # out of dump_tensor_data ("../../x"), as the PyTorch writer refuses it
        if os.path.basename(file_name) != file_name:
            raise ValueError(f"tensor file name {file_name!r} must not contain a path separator")
        path = os.path.join(self.directory, file_name)
        if len(path) > _MAX_PATH or len(file_name) > 255:
            log.warning("msprobe: tensor file name too long, not saved: %s", file_name)
            return None
        # the mode is set on the file opened (an earlier run's file keeps its own), never on what a
        # link at the name leads to: create_file refuses links
        with os.fdopen(create_file(path, 0o640), "wb") as fh:
            os.fchmod(fh.fileno(), 0o640)
            np.save(fh, host_array(data), allow_pickle=False)
        return file_name


class Encoder:
    """Encodes one record's arguments; ``saver`` is set when tensors are written for that record."""

    def __init__(
        self,
        md5: bool,
        saver: TensorSaver | None,
        save_filter: Callable[[str], bool] | None = None,
        defer: bool = False,
    ) -> None:
        self.md5 = md5
        self.saver = saver
        self.save_filter = save_filter
        self.defer = defer  # summaries of non-Parameter tensors without a file become ``Pending``

    # -- public entry points ------------------------------------------------------------------------
    def args(self, args: tuple[Any, ...] | list[Any], record: str, side: str = "input") -> list[Any]:
        saver = self._saver_for(record)
        return [self.value(a, saver, f"{record}.{side}.{i}", 0) for i, a in enumerate(args)]

    def kwargs(self, kwargs: dict[str, Any], record: str) -> dict[str, Any]:
        saver = self._saver_for(record)
        out: dict[str, Any] = {}
        for key, v in kwargs.items():
            if key == "dtype" and _is_dtype(v):
                out[key] = {"type": "mindspore.dtype", "value": str(v)}
            else:
                out[key] = self.value(v, saver, f"{record}.kwargs.{key}", 0)
        return out

    def output(self, out: Any, record: str, side: str = "output") -> list[Any]:
        items = list(out) if isinstance(out, tuple | list) else [out]
        return self.args(items, record, side)

    def named(self, values: dict[str, Any], record: str, side: str) -> dict[str, Any]:
        """``{name: value}`` (parameters): files ``{record}.{side}.{name}.npy``."""
        saver = self._saver_for(record)
        return {k: self.value(v, saver, f"{record}.{side}.{k}", 0) for k, v in values.items()}

    def debug(self, value: Any, record: str) -> Any:
        """A ``save()`` variable: files ``{record}[.{index path}].npy``."""
        return self.value(value, self._saver_for(record), record, 0)

    # -- values -------------------------------------------------------------------------------------
    def _saver_for(self, record: str) -> TensorSaver | None:
        if self.saver is None:
            return None
        if self.save_filter is not None and not self.save_filter(record):
            return None
        return self.saver

    def value(self, v: Any, saver: TensorSaver | None, stem: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise RecursionError(f"the value nests deeper than {MAX_DEPTH} levels")
        for test, enc in _ROWS:
            if test(v):
                return enc(self, v, saver, stem, depth)
        return None

    def summarise(self, t: Any) -> Summary:
        return tensor_summary(str(t.dtype), list(t.shape), t.asnumpy(), self.md5)

    def blank(self, t: Any) -> Summary:
        """The summary of a tensor whose values cannot be read: null statistics (and md5), and a null
        dtype and shape when the tensor of a failed op cannot tell them either."""
        try:
            return tensor_summary(str(t.dtype), list(t.shape), None, self.md5)
        except Exception:
            return tensor_summary(None, None, None, self.md5)

    def tensor(self, t: Any, saver: TensorSaver | None, stem: str, depth: int) -> Any:
        if saver is None and self.defer and not isinstance(t, ms.Parameter):
            return Pending(t, self.summarise, self.blank)
        data = t.asnumpy()
        out = tensor_summary(str(t.dtype), list(t.shape), data, self.md5)
        written = saver.save(stem, data) if saver is not None else None
        if written is not None:
            out["data_name"] = written
        return out

    def ndarray(self, a: np.ndarray, saver: TensorSaver | None, stem: str, depth: int) -> Any:
        vmax, vmin, mean, norm = array_stats(a)
        out: dict[str, Any] = {
            "type": "numpy.ndarray",
            "dtype": str(a.dtype),
            "shape": list(a.shape),
            "Max": vmax,
            "Min": vmin,
            "Mean": mean,
            "Norm": norm,
        }
        written = saver.save(stem, a) if saver is not None else None
        if written is not None:
            out["data_name"] = written
        return out

    def sequence(self, v: Any, saver: TensorSaver | None, stem: str, depth: int) -> Any:
        return [self.value(x, saver, f"{stem}.{i}", depth + 1) for i, x in enumerate(v)]

    def mapping(self, v: Any, saver: TensorSaver | None, stem: str, depth: int) -> Any:
        items = v._asdict().items() if hasattr(v, "_fields") else v.items()
        return {str(k): self.value(x, saver, f"{stem}.{k}", depth + 1) for k, x in items}


def _scalar(enc: Encoder, v: Any, saver: TensorSaver | None, stem: str, depth: int) -> Any:
    return {"type": type(v).__name__, "value": v}


def _np_scalar(enc: Encoder, v: Any, saver: TensorSaver | None, stem: str, depth: int) -> Any:
    return {"type": type(v).__name__, "value": v.item()}


def _slice(enc: Encoder, v: slice, saver: TensorSaver | None, stem: str, depth: int) -> Any:
    def bound(b: Any) -> Any:
        return None if b is None else int(b)

    return {"type": "slice", "value": [bound(v.start), bound(v.stop), bound(v.step)]}


_ROWS: tuple[tuple[Callable[[Any], bool], Callable[..., Any]], ...] = (
    (lambda v: v is None, lambda enc, v, s, stem, d: None),
    (lambda v: isinstance(v, ms.Tensor), Encoder.tensor),
    (lambda v: isinstance(v, bool | int | float | str), _scalar),
    (_is_dtype, lambda enc, v, s, stem, d: {"type": "mindspore.dtype", "value": str(v)}),
    (lambda v: isinstance(v, np.ndarray), Encoder.ndarray),
    (lambda v: isinstance(v, np.generic), _np_scalar),
    (lambda v: isinstance(v, slice), _slice),
    (lambda v: v is Ellipsis, lambda enc, v, s, stem, d: {"type": "ellipsis", "value": "..."}),
    (lambda v: isinstance(v, dict) or (isinstance(v, tuple) and hasattr(v, "_fields")), Encoder.mapping),
    (lambda v: isinstance(v, list | tuple), Encoder.sequence),
)
