"""Tensor summaries of the MindSpore dump, computed on the host.

Why numpy and not MindSpore ops: upstream computes ``mint.norm`` on the device, which has no CPU
kernel in MindSpore 2.10 (8.1.1 crashes there), and every MindSpore op is a kernel launch plus a
sync per statistic. Here the tensor is copied to the host once (``asnumpy``) and all four values come
from numpy. Mean and Norm are accumulated in float64 and rounded to the dtype upstream reports them
in (float32 for float32/int/float64 input, the tensor's own dtype for float16/bfloat16), so they
equal a correctly rounded result; upstream's device reductions differ from it by at most a few ulp.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from msprobe.formats.jsonfmt import Summary

_STAT_KEYS = ("Max", "Min", "Mean", "Norm")


def _to_bf16_float(value: float) -> float:
    """Round a float to the nearest bfloat16 (ties to even) and return it as a Python float."""
    bits = np.array([value], dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return float(rounded.astype(np.uint32).view(np.float32)[0])


def host_array(data: np.ndarray) -> np.ndarray:
    """The array as saved to ``.npy`` and hashed for md5: bfloat16 becomes float32."""
    if data.dtype.name == "bfloat16":
        return data.astype(np.float32)
    return data


def _round(value: float, dtype_name: str) -> float:
    if dtype_name == "float16":
        return float(np.float16(value))
    if dtype_name == "bfloat16":
        return _to_bf16_float(value)
    return float(np.float32(value))


def array_stats(data: np.ndarray) -> tuple[Any, Any, Any, Any]:
    """``(Max, Min, Mean, Norm)`` of a host array with upstream's dtype rules (pure function)."""
    if data.size == 0:
        return None, None, None, None
    kind = data.dtype.kind
    if kind == "b":  # 8.1.1 tests bool before 0-dim: a 0-dim bool also has null Mean and Norm
        return bool(data.max()), bool(data.min()), None, None
    if data.ndim == 0:
        v = data.item()
        if kind == "c":
            v = float(abs(v))
        elif not isinstance(v, int | float):  # bfloat16's item() is a numpy scalar json cannot write
            v = float(v)
        return v, v, v, v
    name = data.dtype.name
    if kind == "c":
        mag = np.abs(data).astype(np.float64)
        rname = "float32"
    elif name in ("float16", "bfloat16"):
        mag = data.astype(np.float64)
        rname = name
    else:  # float32, float64 and integers: upstream casts to float32 first
        mag = data.astype(np.float32).astype(np.float64)
        rname = "float32"
    vmax = _round(float(mag.max()), rname)
    vmin = _round(float(mag.min()), rname)
    mean = _round(float(mag.mean()), rname)
    norm = _round(float(np.sqrt(np.dot(mag.ravel(), mag.ravel()))), rname)
    return vmax, vmin, mean, norm


def crc32_hex(data: np.ndarray) -> str:
    """Upstream's ``md5`` field: CRC-32 of the raw bytes (bf16 as float32), 8 hex digits."""
    return f"{zlib.crc32(np.ascontiguousarray(host_array(data)).tobytes()) & 0xFFFFFFFF:08x}"


def tensor_summary(
    dtype_name: str | None, shape: list[int] | None, data: np.ndarray | None, md5: bool
) -> Summary:
    """The JSON object of one ``mindspore.Tensor`` leaf (key order as upstream); null statistics (and
    md5) when its values could not be read (``data`` None), null dtype and shape when unknown."""
    out = Summary(type="mindspore.Tensor", dtype=dtype_name, shape=shape)
    stats = array_stats(data) if data is not None else (None, None, None, None)
    for key, value in zip(_STAT_KEYS, stats):
        out[key] = value
    if md5:
        out["md5"] = crc32_hex(data) if data is not None else None
    return out
