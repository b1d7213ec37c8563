"""Which standard judges a details row, and the numbers each standard uses (8.1.1).

Facts from ``shared/spec/run_ut_compare_v811.md`` §5.2 (routing on the compare side), §6 (thresholds)
and ``run_ut_compare.md`` §6.4 (the API lists) and §6.5 (the per-dtype table). Everything here is data:
the verdict code in :mod:`msprobe.compare.verdicts` reads these tables and knows no API by name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np


class Standard(enum.Enum):
    """A precision standard; the value is its 比对算法 text in the compare details CSV (v811 §8)."""

    BENCHMARK = "标杆比对法"
    ABSOLUTE_THRESHOLD = "绝对阈值法"
    BINARY = "二进制一致法"
    ULP = "ULP误差比对法"
    THOUSANDTH = "双千指标法"
    ACCUMULATIVE = "累积误差比对法"


# run_ut_compare.md §6.4, the lists of upstream's api_precision_standard.yaml (identical in 8.1.1, v811 §5.1).
# The replay stage keeps the same lists in msprobe/run_ut/standards/routing.py; the two should become one
# table once both stages are merged.
_LISTS: tuple[tuple[Standard, tuple[str, ...]], ...] = (
    (Standard.ABSOLUTE_THRESHOLD, (
        "mul", "mul_", "__mul__", "__imul__", "__rmul__", "add", "add_", "__add__", "__iadd__", "__radd__",
        "div", "div_", "__div__", "__idiv__", "divide", "divide_", "leaky_relu", "leaky_relu_", "prelu",
        "reciprocal", "reciprocal_", "rsqrt", "rsqrt_", "square", "square_", "sub", "sub_", "rsub",
        "__isub__", "__sub__",
    )),
    (Standard.BINARY, (
        "abs", "abs_", "absolute", "absolute_", "argmin", "bitwise_and", "bitwise_and_", "broadcast_to",
        "ceil", "ceil_", "equal", "fill_", "flatten", "floor", "floor_", "gather", "greater", "greater_",
        "greater_equal", "greater_equal_", "histc", "isfinite", "isnan", "less", "less_", "less_equal",
        "less_equal_", "logical_and", "logical_and_", "logical_not", "logical_not_", "logical_or",
        "logical_or_", "masked_fill", "masked_fill_", "max_pool3d", "maximum", "minimum", "neg", "neg_",
        "nonzero", "not_equal", "not_equal_", "one_hot", "pad", "relu", "reshape", "round", "round_",
        "select", "sign", "sign_", "sort", "tile", "topk", "transpose", "transpose_", "tril", "tril_",
        "triu", "triu_", "type_as",
    )),
    (Standard.ULP, (
        "__matmul__", "addbmm", "addbmm_", "addmm", "addmm_", "baddbmm", "baddbmm_", "bilinear", "bmm",
        "chain_matmul", "hspmm", "linear", "matmul", "mm", "mv", "smm", "sspaddmm",
    )),
    (Standard.THOUSANDTH, ("conv1d", "conv2d")),
    (Standard.ACCUMULATIVE, ("test_api",)),
)  # fmt: skip


def _routing() -> Mapping[str, Standard]:
    table: dict[str, Standard] = {}
    for standard, names in _LISTS:  # first match wins, in list order (v811 §5.1)
        for name in names:
            table.setdefault(name, standard)
    return MappingProxyType(table)


ROUTING: Mapping[str, Standard] = _routing()
"""bare API name → standard for every listed name; any other float API is judged by the benchmark."""

# v811 §5.2: the NPU ``DEVICE Dtype`` decides first.
UNSUPPORTED_DTYPES = frozenset({"torch.float64", "torch.complex64", "torch.complex128"})
"""Rows of these dtypes are SKIP, and an API whose last row has one is SKIP as a whole."""
FLOAT_DTYPES = frozenset({"torch.float16", "torch.bfloat16", "torch.float32"}) | UNSUPPORTED_DTYPES
"""Any dtype outside this set (ints, bool, ``<class 'int'>``, fp8 names, ...) is judged binary."""
ZERO_SHAPE = "(0,)"
UNSUPPORTED_MESSAGE = "This data type does not support benchmark compare."
TOPK_HINT = (
    "在npu上，topk的入参sorted=False时不生效，会返回有序tensor，而cpu上会返回无序tensor。 "
    "如果topk精度不达标，请检查是否是该原因导致的。"
)
"""Result-row hint for a failing forward ``topk`` (v811 §7.1), keyed by bare name in HINTS."""
HINTS: Mapping[str, str] = MappingProxyType({"topk": TOPK_HINT})


@dataclass(frozen=True)
class DtypeNumbers:
    """Per-dtype constants of upstream's ``StandardConfig`` used on the compare side (spec §6.5)."""

    min_error: float  # ratio denominator floor
    accumulative_eb: float  # accumulative standard: error-balance threshold


DTYPE_NUMBERS: Mapping[str, DtypeNumbers] = MappingProxyType(
    {
        "torch.float16": DtypeNumbers(min_error=2**-11, accumulative_eb=2**-20),
        "torch.bfloat16": DtypeNumbers(min_error=2**-8, accumulative_eb=2**-7),
        "torch.float32": DtypeNumbers(min_error=2**-14, accumulative_eb=2**-14),
    }
)
DEFAULT_NUMBERS = DtypeNumbers(min_error=2**-14, accumulative_eb=2**-14)
"""Unknown dtypes use upstream's "default" column (spec §6.5)."""


def per_row(dtypes: np.ndarray, field: str) -> np.ndarray:
    """The ``DtypeNumbers`` field for each row's dtype text, as a float64 array."""
    lookup = {k: getattr(v, field) for k, v in DTYPE_NUMBERS.items()}
    default = getattr(DEFAULT_NUMBERS, field)
    return np.array([lookup.get(d, default) for d in dtypes], dtype=np.float64)


def route(bare_names: np.ndarray, dtypes: np.ndarray) -> np.ndarray:
    """Standard of each evaluated row (v811 §5.2 rules 2 and 3); rows must not be SKIP rows."""
    out = np.array([ROUTING.get(n, Standard.BENCHMARK) for n in bare_names], dtype=object)
    non_float = ~np.isin(dtypes, list(FLOAT_DTYPES))
    out[non_float] = Standard.BINARY
    return out
