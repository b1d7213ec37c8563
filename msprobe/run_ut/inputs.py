"""Rebuilding an API's arguments from its dump record: real data files (:mod:`.tensor_files`) or
values drawn from statistics (:mod:`.draws`), as :mod:`.arg_values` describes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from msprobe.errors import first_line
from msprobe.run_ut.arg_values import (
    NUMPY_SCALARS,
    DeviceArg,
    InputError,
    TensorArg,
    parse_dtype,
    unwrap,
    wrap,
)
from msprobe.run_ut.draws import random_tensor
from msprobe.run_ut.tensor_files import as_recorded, load_tensor


def apply_prepare_inputs(prepare_inputs: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Run an entry's ``prepare_inputs(args, kwargs) -> (args, kwargs)`` on plain tensors (CPU, dumped
    dtypes) and put its result back in place, wrapped again (tensors it adds never require grad)."""
    grads: dict[int, bool] = {}
    new_args, new_kwargs = prepare_inputs(unwrap(args, grads), unwrap(kwargs, grads))
    args[:] = wrap(list(new_args), grads)
    kwargs.clear()
    kwargs.update(wrap(dict(new_kwargs), grads))


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


NO_INPUTS = (
    'the record holds no inputs (dumped with a data_mode without "input"): nothing to replay; '
    'dump with data_mode ["all"] or ["input", ...] to replay it'
)


class ArgBuilder:
    """Turns the JSON argument descriptions of one record into Python values (tensors on CPU)."""

    def __init__(self, data_dir: Path, gen: torch.Generator, owner: str = "") -> None:
        self.data_dir = data_dir
        self.gen = gen
        self.owner = owner  # the record's name, prefixed to each argument's error
        self.drew = False  # some tensor was drawn from its statistics (not read from a file)
        self.read = False  # some tensor was read from a file (real values)

    def _at(self, where: str, spec: Any, *, grad_ok: bool) -> Any:
        """``value`` of the argument at ``where``; its ``InputError`` names the record and argument."""
        try:
            return self.value(spec, grad_ok=grad_ok)
        except InputError as exc:
            raise InputError(f"{self.owner} {where}{exc.path}: {exc}".lstrip()) from None

    def tensor(self, spec: Mapping[str, Any]) -> torch.Tensor:
        if None in spec["shape"]:  # the dump's shape of a nested (jagged) tensor: [2, null, 3]
            raise InputError(
                f"a nested tensor (shape {spec['shape']}): the replay does not rebuild nested tensors"
            )
        name = spec.get("data_name") or spec.get("datapath")
        if name:
            self.read = True
            return as_recorded(load_tensor(self.data_dir, str(name)), spec, self.data_dir / str(name))
        self.drew = True
        try:
            return random_tensor(spec, self.gen)
        except (RuntimeError, ValueError, OverflowError) as exc:  # statistics the dtype cannot hold
            raise InputError(
                f"cannot draw {spec.get('dtype')} {spec['shape']} from its statistics "
                f"(Max {spec.get('Max')!r}, Min {spec.get('Min')!r}): {first_line(exc)}"
            ) from None

    def value(self, spec: Any, *, grad_ok: bool) -> Any:
        """One argument; ``grad_ok`` says whether a tensor here may require grad."""
        if spec is None:
            return None
        if isinstance(spec, list):
            items = []
            for i, item in enumerate(spec):
                try:
                    items.append(self.value(item, grad_ok=grad_ok))
                except InputError as exc:
                    raise InputError(str(exc), f"[{i}]{exc.path}") from None
            return items
        if not isinstance(spec, Mapping):
            raise InputError(f"unsupported argument description {_short(repr(spec))}")
        kind = spec.get("type")
        if kind in ("torch.Tensor", "torch.nn.parameter.Parameter") or (
            kind is None and "dtype" in spec and "shape" in spec
        ):
            return TensorArg(self.tensor(spec), bool(spec.get("requires_grad")) and grad_ok)
        if kind is None and not spec:  # upstream's dump writes a positional dtype/device as {}
            raise InputError(
                "{} (a positional torch.dtype or torch.device: upstream's dump records no value for it): "
                "cannot rebuild it"
            )
        if kind is None:  # an object the dump wrote as its fields (a dataclass): its type is not known
            keys = ", ".join(repr(k) for k in list(spec)[:6]) + (", ..." if len(spec) > 6 else "")
            raise InputError(f"an object recorded as its fields ({keys}) without its type: cannot rebuild it")
        value = spec.get("value")
        if kind in ("int", "float", "bool", "str"):
            return value
        if kind == "slice" and isinstance(value, list):
            return slice(*value)
        if kind == "ellipsis":
            return ...
        if kind == "torch.Size" and isinstance(value, list):
            return torch.Size(value)
        if kind == "torch.dtype":
            return parse_dtype(str(value))
        if kind == "torch.device":
            return DeviceArg(str(value))
        if kind == "torch.memory_format":
            fmt = getattr(torch, str(spec.get("format")), None)
            if not isinstance(fmt, torch.memory_format):
                raise InputError(f"unknown memory format {spec.get('format')!r}")
            return fmt
        scalar = NUMPY_SCALARS.get(str(kind).removeprefix("numpy."))
        if scalar is not None:
            return scalar(value)
        raise InputError(f"argument type {kind!r} is not supported for replay")

    def build(self, record: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Positional and keyword arguments of a forward record.

        requires_grad is honoured only when the call has no ``out=`` kwarg; tensors inside kwarg lists
        never require grad.
        """
        if "input_args" not in record and "input_kwargs" not in record:
            raise InputError(f"{self.owner}: {NO_INPUTS}".lstrip(": "))
        kwargs_spec = record.get("input_kwargs", {}) or {}
        grad_ok = kwargs_spec.get("out") is None  # ``out: null`` (torch's re-packed ``out=None``) is no out=
        args = [
            self._at(f"input_args[{i}]", a, grad_ok=grad_ok)
            for i, a in enumerate(record.get("input_args", []) or [])
        ]
        kwargs = {
            k: self._at(f"input_kwargs[{k!r}]", v, grad_ok=grad_ok and not isinstance(v, list))
            for k, v in kwargs_spec.items()
        }
        return args, kwargs

    def grad(self, backward: Mapping[str, Any], output: Any = None) -> torch.Tensor | None:
        """The gradient that drives backward: the first entry of the backward record's ``input``; for a
        call whose forward ``output`` is one tensor, the one entry there is. (A backward record holds the
        gradients of the outputs of the autograd node that made the output, and the call may return
        another output than the node's first: ``linalg.svdvals`` returns the singular values, output 1
        of the SVD's three, so its record's input is ``[null, grad, null]``.)"""
        inputs = backward.get("input") or []
        at = 0
        if inputs and not isinstance(inputs[0], Mapping) and _one_tensor(output):
            held = [i for i, g in enumerate(inputs) if isinstance(g, Mapping)]
            if len(held) == 1:
                at = held[0]
        first = inputs[at] if inputs else None
        if not isinstance(first, Mapping):
            return None
        try:
            return self.tensor(first)
        except InputError as exc:
            raise InputError(f"{self.owner} backward input[{at}]: {exc}".lstrip()) from None


def _one_tensor(output: Any) -> bool:
    """Whether a record's forward ``output`` is one tensor (alone, or the one item of its list)."""
    if isinstance(output, list) and len(output) == 1:
        output = output[0]
    return isinstance(output, Mapping) and output.get("type") == "torch.Tensor"
