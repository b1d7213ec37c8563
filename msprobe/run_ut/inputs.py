"""Rebuilding an API's arguments from its dump record: real ``.pt`` data or values drawn from statistics.

Rules from upstream msprobe 8.1.1 (no fp8).
Randomness comes only from the ``torch.Generator`` the caller passes, seeded from the API name, so an
API's inputs never depend on which APIs ran before it, in which order, or on which worker.

Security: a ``data_name`` is resolved inside the dump's ``dump_tensor_data`` folder and must stay
there after symlinks are followed; ``.pt`` files are read with ``weights_only=True`` and must hold a
tensor; ``.npy`` files are read without pickle. Nothing from the dump is evaluated.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.errors import first_line


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


def apply_prepare_inputs(prepare_inputs: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Run an entry's ``prepare_inputs(args, kwargs) -> (args, kwargs)`` on plain tensors (CPU, dumped
    dtypes) and put its result back in place, wrapped again (tensors it adds never require grad)."""
    grads: dict[int, bool] = {}
    new_args, new_kwargs = prepare_inputs(unwrap(args, grads), unwrap(kwargs, grads))
    args[:] = wrap(list(new_args), grads)
    kwargs.clear()
    kwargs.update(wrap(dict(new_kwargs), grads))


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


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))  # bool counts: bool tensors carry true/false Max/Min


UNPICKLER_MARKER = "WeightsUnpickler error:"
MAX_REASON = 200
#: torch's boilerplate and advice around a weights_only refusal (e.g. to re-run with weights_only=False):
#: a security tool never passes that on; any clause containing one of these is dropped.
TORCH_ADVICE = (
    "weights_only",
    "weights only load failed",
    "re-running",
    "trust",
    "please",
    "documentation",
    "alternatively",
    "can still be loaded",
    "do it only",
    "allowlist",
)


def _refusal(exc: Exception) -> str:
    """The first clause of why ``torch.load(weights_only=True)`` refused a file, without torch's advice."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    if UNPICKLER_MARKER in text:
        text = text.split(UNPICKLER_MARKER, 1)[1]
    for line in text.splitlines():
        for clause in line.split(". "):
            clause = clause.strip().rstrip(".")
            if clause and not any(word in clause.lower() for word in TORCH_ADVICE):
                return clause[:MAX_REASON]
    return type(exc).__name__


def load_tensor(data_dir: Path, name: str) -> torch.Tensor:
    """Load one saved tensor, refusing paths that leave ``data_dir`` and files that are not tensors."""
    path = data_dir / name
    try:
        resolved = path.resolve(strict=True)
    except (FileNotFoundError, RuntimeError, OSError):
        raise InputError(f"{path}: no such tensor file") from None
    # The rank folder's own dump_tensor_data: a dump_tensor_data that is itself a symlink leaves the dump.
    if not resolved.is_relative_to(data_dir.parent.resolve() / data_dir.name):
        raise InputError(f"{path}: resolves outside the dump folder ({resolved}); refusing to read it")
    if not resolved.is_file():  # a FIFO would block the replay forever, a device never ends
        raise InputError(f"{path}: not a regular file; refusing to read it")
    if resolved.suffix == ".npy":
        try:
            return torch.from_numpy(np.load(resolved, allow_pickle=False))
        except ValueError as exc:
            raise InputError(f"{path}: not a plain numpy array ({exc})") from None
    if resolved.suffix != ".pt":
        raise InputError(f"{path}: unsupported tensor file type {resolved.suffix!r} (expected .pt or .npy)")
    try:
        with warnings.catch_warnings():  # "pickle protocol 4" notes are noise; a refusal raises
            warnings.simplefilter("ignore")
            value = torch.load(resolved, map_location="cpu", weights_only=True)
    except Exception as exc:  # weights_only refuses pickled objects with UnpicklingError and friends
        raise InputError(
            f"{path}: not a plain tensor file (weights_only=True refused it: {_refusal(exc)})"
        ) from None
    if not isinstance(value, torch.Tensor):
        raise InputError(f"{path}: holds a {type(value).__name__}, not a tensor")
    return value


def _record_dtype(text: str) -> str:
    """A record's dtype as torch spells it (``torch.float`` is ``torch.float32``); others unchanged."""
    try:
        return str(parse_dtype(text))
    except InputError:
        return text


def as_recorded(tensor: torch.Tensor, spec: Mapping[str, Any], path: Path) -> torch.Tensor:
    """A loaded data file's tensor, refused when its shape or dtype is not the record's.

    One difference is accepted: numpy has no bfloat16, so a dump stores a bfloat16 tensor in a
    ``.npy`` as float32 (exact values); it is cast back to the recorded bfloat16.
    """
    shape, dtype = list(spec["shape"]), _record_dtype(str(spec["dtype"]))
    if list(tensor.shape) != shape:
        raise InputError(f"{path}: shape {list(tensor.shape)} in the file, {shape} in the record")
    if path.suffix == ".npy" and tensor.dtype == torch.float32 and dtype == str(torch.bfloat16):
        return tensor.to(torch.bfloat16)
    if str(tensor.dtype) != dtype:
        parse_dtype(dtype)  # one the replay cannot run (float8, which the dump saves as float32): that reason
        raise InputError(f"{path}: dtype {tensor.dtype} in the file, {dtype} in the record")
    return tensor


def finite_range(low: float, high: float, dtype: torch.dtype) -> tuple[float, float]:
    """The range ``[lo, hi]`` the elements are drawn from; only a masking Min changes it: ``-inf``, or
    a finite Min within a factor of 2 of the dtype's lowest value (``torch.finfo(dtype).min``, the
    value Hugging Face models put in their additive attention masks).

    8.1.1 draws from ``[Min, Max]``, or ``[finfo.min, Max]`` for ``-inf``: values near the dtype's
    limit, so ``x * 8`` overflows in the dumped dtype but not in the upcast benchmark (inf on one side
    only: a false error), and a mask drawn there makes every softmax row one-hot (gradients of
    rounding noise only). The recorded Min is kept (the caller pins it on the first element); the
    other elements only need to be finite, and Mean/Norm are infinite or overflowed as soon as one
    element is a mask value, so they tell nothing. The missing bound is Max moved down by
    ``max(|Max|, 1)``: the other elements stay within twice the recorded magnitude (or 1), never near
    the dtype's limit.
    """
    lowest = float(torch.finfo(dtype).min)
    if not (math.isinf(low) or low <= lowest / 2):
        return low, high
    return max(high - max(abs(high), 1.0), lowest), high


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def max_generated_bytes() -> int:
    """The largest tensor replay draws from statistics: ``MSPROBE_MAX_TENSOR_GB``, else 1/32 of this
    host's memory (an API's replay holds many copies of a drawn input: the device's and the upcast
    bench's, their outputs and gradients, the noise-floor runs)."""
    env = os.environ.get("MSPROBE_MAX_TENSOR_GB")
    if env:
        try:
            return int(float(env) * 2**30)
        except ValueError:
            raise InputError(f"MSPROBE_MAX_TENSOR_GB={env!r}: not a number of GiB") from None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 32
    except (ValueError, OSError, AttributeError):
        return 1 << 30


OUTPUT_SIZE_FACTOR = 4
"""An output may be this many times :func:`max_generated_bytes` (it is computed, not drawn)."""


def check_size(shape: list[int], dtype: torch.dtype, output: bool = False) -> None:
    """Refuse to draw a tensor larger than :func:`max_generated_bytes`, or to compute an ``output``
    larger than :data:`OUTPUT_SIZE_FACTOR` times that (a record's shape is only a claim)."""
    nbytes = math.prod(shape) * dtype.itemsize
    limit = max_generated_bytes() * (OUTPUT_SIZE_FACTOR if output else 1)
    if nbytes > limit:
        what = "replay computes as an output" if output else "replay draws from statistics"
        raise InputError(
            f"shape {shape} {dtype} is {_size(nbytes)}, more than {what} "
            f"({_size(limit)}; set MSPROBE_MAX_TENSOR_GB to allow it)"
        )


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


DISTINCT_ALONG = "distinct_along"
"""The key a table entry's ``prepare_spec`` puts on a tensor's record to have it drawn with no value
repeated: along the dimension it holds, or in the whole tensor when it holds None."""
_SAME_SIZE_INTEGERS = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


def distinct_integers(
    shape: list[int], dtype: torch.dtype, low: int, high: int, dim: int | None, gen: torch.Generator
) -> torch.Tensor | None:
    """Integers in ``[low, high]``, ``low`` and ``high`` among them, none repeated along ``dim`` (in
    the whole tensor when ``dim`` is None); None when the range holds too few values for that."""
    whole = dim is None or not shape
    axis = 0 if dim is None or not shape else dim % len(shape)
    moved = [math.prod(shape)] if whole else [*shape[:axis], *shape[axis + 1 :], shape[axis]]
    k, rows = moved[-1], math.prod(moved[:-1])
    span = high - low + 1
    if k == 0 or span < k:
        return None
    # k sorted distinct values in [0, span): k sorted draws from [0, span - k], plus 0, 1, ..., k - 1
    values = torch.randint(0, span - k + 1, (rows, k), generator=gen).sort(dim=1).values + torch.arange(k)
    values[0, 0], values[-1, -1] = 0, span - 1  # a row stays sorted and so distinct
    order = torch.rand(rows, k, generator=gen).argsort(dim=1)
    drawn = (values.gather(1, order) + low).to(dtype).reshape(moved)
    return drawn.reshape(shape) if whole else drawn.movedim(-1, axis)


def _subnormals(dtype: torch.dtype) -> int:
    """How many positive subnormal values ``dtype`` has (its mantissa's bit patterns but 0)."""
    return (1 << round(-math.log2(torch.finfo(dtype).eps))) - 1


def _ordinal(value: float, dtype: torch.dtype) -> int:
    """The position of ``value`` (rounded to ``dtype``, subnormals to 0 or the smallest normal) among
    the dtype's zero and normal values, 0 for ±0: the order of the floats, one step per value."""
    bits = int(torch.tensor(value, dtype=dtype).view(_SAME_SIZE_INTEGERS[dtype]).item())
    sign = 1 << (dtype.itemsize * 8 - 1)
    magnitude = bits if bits >= 0 else bits + sign
    position = max(magnitude - _subnormals(dtype), 0)
    return position if bits >= 0 else -position


def distinct_floats(
    shape: list[int], dtype: torch.dtype, low: float, high: float, dim: int | None, gen: torch.Generator
) -> torch.Tensor | None:
    """Values of ``dtype`` in ``[low, high]``, both among them, none repeated along ``dim`` (in the
    whole tensor when None): distinct zero or normal values (a device may flush subnormals to zero)
    drawn uniformly, so most are small in magnitude (the floats are dense near 0). For APIs that only
    order or select values; None when the range holds too few values or a bound is not finite."""
    if dtype not in _SAME_SIZE_INTEGERS or not (math.isfinite(low) and math.isfinite(high)):
        return None
    ordinals = distinct_integers(shape, torch.int64, _ordinal(low, dtype), _ordinal(high, dtype), dim, gen)
    if ordinals is None:
        return None
    sign = 1 << (dtype.itemsize * 8 - 1)
    magnitude = torch.where(ordinals == 0, 0, ordinals.abs() + _subnormals(dtype))
    bits = torch.where(ordinals >= 0, magnitude, magnitude - sign)
    return bits.to(_SAME_SIZE_INTEGERS[dtype]).view(dtype)


def random_tensor(spec: Mapping[str, Any], gen: torch.Generator) -> torch.Tensor:
    """Draw a tensor matching the dumped statistics."""
    dtype = parse_dtype(spec["dtype"])
    shape = list(spec["shape"])
    low_origin, high_origin = spec.get("Min"), spec.get("Max")
    low = spec.get("Min_except_inf_nan", low_origin)
    high = spec.get("Max_except_inf_nan", high_origin)
    if 0 in shape:
        return torch.empty(shape, dtype=dtype)
    check_size(shape, dtype)
    if not (_is_number(low) and _is_number(high)):
        raise InputError("the tensor has no numeric Max/Min (and no data_name), cannot generate it")
    if dtype.is_complex:
        return _random_complex(shape, dtype, float(low), float(high), gen)
    if dtype == torch.bool:
        blo, bhi = int(low), int(high)
        return torch.randint(min(blo, bhi), max(blo, bhi) + 1, shape, generator=gen) > 0
    if dtype.is_floating_point:
        low, high = float(low), float(high)
        if math.isnan(high):
            tensor = torch.full(shape, math.nan, dtype=dtype)
        elif high_origin and math.isinf(high):
            tensor = torch.full(shape, high, dtype=dtype)
            if tensor.dim() > 0:
                tensor[-1] = low
        else:
            if DISTINCT_ALONG in spec and low == low_origin and high == high_origin:
                distinct = distinct_floats(shape, dtype, low, high, spec[DISTINCT_ALONG], gen)
                if distinct is not None:
                    return distinct
            lo, hi = finite_range(low, high, dtype)
            tensor = torch.rand(shape, dtype=dtype, generator=gen) * (hi - lo) + lo
    else:
        if DISTINCT_ALONG in spec:
            distinct = distinct_integers(shape, dtype, int(low), int(high), spec[DISTINCT_ALONG], gen)
            if distinct is not None:
                return distinct
        tensor = torch.randint(int(low), int(high) + 1, shape, dtype=dtype, generator=gen)
    flat = tensor.reshape(-1)
    if isinstance(high_origin, float) and math.isnan(high_origin):
        if flat.numel() <= 2:
            flat[0], flat[-1] = math.nan, high
        else:
            flat[0], flat[1], flat[-1] = low, math.nan, high
    else:
        flat[0], flat[-1] = low, high
        if isinstance(high_origin, float) and math.isinf(high_origin):
            flat[-1] = high_origin
        if isinstance(low_origin, float) and math.isinf(low_origin):
            flat[0] = low_origin
    return flat.reshape(shape)


def _random_complex(
    shape: list[int], dtype: torch.dtype, low: float, high: float, gen: torch.Generator
) -> torch.Tensor:
    """A complex tensor from its statistics, which are those of its magnitudes (Max, Min, Mean of
    ``|x|``): magnitudes drawn in ``[Min, Max]`` (the first element Min, the last Max) at uniform
    random angles."""
    if not (math.isfinite(low) and math.isfinite(high)) or low < 0:
        raise InputError(f"{dtype} statistics Max {high}, Min {low} are not those of magnitudes")
    parts = dtype.to_real()
    magnitude = torch.rand(shape, dtype=parts, generator=gen) * (high - low) + low
    flat = magnitude.reshape(-1)
    flat[0], flat[-1] = low, high
    angle = torch.rand(shape, dtype=parts, generator=gen) * (2 * math.pi)
    return torch.polar(magnitude, angle).to(dtype)


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
            return as_recorded(load_tensor(self.data_dir, str(name)), spec, self.data_dir / str(name))
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

    def grad(self, backward: Mapping[str, Any]) -> torch.Tensor | None:
        """The gradient that drives backward: the first entry of the backward record's ``input``."""
        inputs = backward.get("input") or []
        first = inputs[0] if inputs else None
        if not isinstance(first, Mapping):
            return None
        try:
            return self.tensor(first)
        except InputError as exc:
            raise InputError(f"{self.owner} backward input[0]: {exc}".lstrip()) from None
