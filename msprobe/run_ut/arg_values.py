"""What a rebuilt argument is: a tensor with its recorded ``requires_grad`` (:class:`TensorArg`), a
device to replace (:class:`DeviceArg`), the dtypes a record may name, and :class:`InputError`, the
reason an argument cannot be rebuilt. Nested arguments (lists, tuples, dict values) are walked by
:func:`map_leaves` and :func:`leaves`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


class InputError(Exception):
    """An argument cannot be rebuilt (missing or unsafe file, unsupported dtype, no statistics).

    ``path`` is where inside the argument (``[1]`` for the second tensor of a list argument)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class DeviceArg:
    """A ``torch.device`` kwarg: the device side puts its own device here, the CPU side drops it."""

    value: str


@dataclass(frozen=True)
class TensorArg:
    """A rebuilt tensor plus the record facts the execution needs."""

    tensor: torch.Tensor
    requires_grad: bool


def map_leaves(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` rebuilt with ``fn`` applied to each leaf: lists, tuples and dict values are walked."""
    if isinstance(value, list):
        return [map_leaves(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(map_leaves(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_leaves(v, fn) for k, v in value.items()}
    return fn(value)


def leaves(value: Any) -> Iterator[Any]:
    """The leaves of ``value`` in order, walked as :func:`map_leaves` walks them."""
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    else:
        yield value


def unwrap(value: Any, grads: dict[int, bool]) -> Any:
    """Plain tensors in place of ``TensorArg`` (remembering each one's requires_grad by identity)."""

    def plain(leaf: Any) -> Any:
        if isinstance(leaf, TensorArg):
            grads[id(leaf.tensor)] = leaf.requires_grad
            return leaf.tensor
        return leaf

    return map_leaves(value, plain)


def wrap(value: Any, grads: dict[int, bool]) -> Any:
    """The inverse of :func:`unwrap`; new tensors (e.g. a generated mask) never require grad."""
    return map_leaves(
        value,
        lambda leaf: TensorArg(leaf, grads.get(id(leaf), False)) if isinstance(leaf, torch.Tensor) else leaf,
    )


FLOAT_DTYPES = {
    "torch.float32": torch.float32,
    "torch.float": torch.float32,
    "torch.float64": torch.float64,
    "torch.double": torch.float64,
    "torch.float16": torch.float16,
    "torch.half": torch.float16,
    "torch.bfloat16": torch.bfloat16,
}
COMPLEX_DTYPES = {
    "torch.complex64": torch.complex64,
    "torch.cfloat": torch.complex64,
    "torch.complex128": torch.complex128,
    "torch.cdouble": torch.complex128,
}
INT_DTYPES = {
    f"torch.{name}": getattr(torch, name)
    for name in ("int8", "int16", "int32", "int64", "uint8", "long", "int", "short")
}
NUMPY_SCALARS = {
    name: getattr(np, name)
    for name in (
        "bool_",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}


def parse_dtype(text: str) -> torch.dtype:
    if text == "torch.bool":
        return torch.bool
    dtype = FLOAT_DTYPES.get(text) or INT_DTYPES.get(text) or COMPLEX_DTYPES.get(text)
    if dtype is None:
        raise InputError(f"Dtype is not supported: {text}")
    return dtype


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float))  # bool counts: bool tensors carry true/false Max/Min
