"""Drawing a tensor from its recorded statistics (Max, Min; upstream msprobe 8.1.1's rules, no fp8).

Randomness comes only from the ``torch.Generator`` the caller passes, seeded from the API name, so an
API's inputs never depend on which APIs ran before it, in which order, or on which worker.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from msprobe.run_ut.arg_values import InputError, is_number, parse_dtype


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
    if not (is_number(low) and is_number(high)):
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
        low, high = _integer_bounds(low, high, dtype)
        if DISTINCT_ALONG in spec:
            distinct = distinct_integers(shape, dtype, low, high, spec[DISTINCT_ALONG], gen)
            if distinct is not None:
                return distinct
        # randint's bound is exclusive and must fit int64: int64's largest value is pinned below
        top = high + 1 if high < torch.iinfo(torch.int64).max else high
        if top > low:
            tensor = torch.randint(low, top, shape, dtype=dtype, generator=gen)
        else:
            tensor = torch.full(shape, low, dtype=dtype)
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


def _integer_bounds(low: Any, high: Any, dtype: torch.dtype) -> tuple[int, int]:
    """Min and Max of an integer tensor, as ints within the dtype's range. 8.1.1's dump (and ours) takes
    them in float32, which rounds a value near the dtype's limit past it: ``iinfo(int32).max`` is
    written ``2147483648.0``, ``iinfo(int64).max`` ``9.223372036854776e+18``, one more than the dtype
    holds, and drawing with that bound fails (8.1.1 skips the API)."""
    info = torch.iinfo(dtype)
    return min(max(int(low), info.min), info.max), min(max(int(high), info.min), info.max)


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
