"""API name → precision standard: the one routing table (8.1.1, ``run_ut_compare_v811.md`` §5.1).

Upstream keeps the lists in ``compare/api_precision_standard.yaml``; the names are facts (spec
``run_ut_compare.md`` §6.4). Lookup is by *bare* API name (the middle segment(s) of
``Type.api.N`` / ``Type.prefix.api.N``), first match in the order absolute threshold, binary, ULP,
thousandth, accumulative; no match → benchmark. 4-segment names look up ``prefix.api`` and so never
match a list (v811 §5.1 note), exactly as upstream.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from types import MappingProxyType


class Standard(enum.Enum):
    """A precision standard; the value is the 比对算法 text of api_precision_compare (spec §8.4)."""

    BENCHMARK = "标杆比对法"
    ABSOLUTE_THRESHOLD = "绝对阈值法"
    BINARY = "二进制一致法"
    ULP = "ULP误差比对法"
    THOUSANDTH = "双千指标法"
    ACCUMULATIVE = "累积误差比对法"


# spec §6.4 "AbsoluteThreshStandard (30)"
_ABSOLUTE_THRESHOLD = (
    "mul", "mul_", "__mul__", "__imul__", "__rmul__", "add", "add_", "__add__", "__iadd__", "__radd__",
    "div", "div_", "__div__", "__idiv__", "divide", "divide_", "leaky_relu", "leaky_relu_", "prelu",
    "reciprocal", "reciprocal_", "rsqrt", "rsqrt_", "square", "square_", "sub", "sub_", "rsub",
    "__isub__", "__sub__",
)  # fmt: skip
# spec §6.4 "BinaryCompareStandard (62)"
_BINARY = (
    "abs", "abs_", "absolute", "absolute_", "argmin", "bitwise_and", "bitwise_and_", "broadcast_to",
    "ceil", "ceil_", "equal", "fill_", "flatten", "floor", "floor_", "gather", "greater", "greater_",
    "greater_equal", "greater_equal_", "histc", "isfinite", "isnan", "less", "less_", "less_equal",
    "less_equal_", "logical_and", "logical_and_", "logical_not", "logical_not_", "logical_or",
    "logical_or_", "masked_fill", "masked_fill_", "max_pool3d", "maximum", "minimum", "neg", "neg_",
    "nonzero", "not_equal", "not_equal_", "one_hot", "pad", "relu", "reshape", "round", "round_",
    "select", "sign", "sign_", "sort", "tile", "topk", "transpose", "transpose_", "tril", "tril_",
    "triu", "triu_", "type_as",
)  # fmt: skip
# spec §6.4 "ULPStandard (17)"
_ULP = (
    "__matmul__", "addbmm", "addbmm_", "addmm", "addmm_", "baddbmm", "baddbmm_", "bilinear", "bmm",
    "chain_matmul", "hspmm", "linear", "matmul", "mm", "mv", "smm", "sspaddmm",
)  # fmt: skip
# spec §6.4 "ThousandthStandard" / "AccumulativeErrorStandard"
_THOUSANDTH = ("conv1d", "conv2d")
_ACCUMULATIVE = ("test_api",)

# First match wins, in this order (v811 §5.1).
_LISTS: tuple[tuple[Standard, tuple[str, ...]], ...] = (
    (Standard.ABSOLUTE_THRESHOLD, _ABSOLUTE_THRESHOLD),
    (Standard.BINARY, _BINARY),
    (Standard.ULP, _ULP),
    (Standard.THOUSANDTH, _THOUSANDTH),
    (Standard.ACCUMULATIVE, _ACCUMULATIVE),
)


def _build() -> MappingProxyType[str, Standard]:
    table: dict[str, Standard] = {}
    for standard, names in _LISTS:
        for name in names:
            table.setdefault(name, standard)
    return MappingProxyType(table)


ROUTING: MappingProxyType[str, Standard] = _build()
"""bare API name → standard, for every listed name (everything else is benchmark)."""

assert len(_ABSOLUTE_THRESHOLD) == 30 and len(_BINARY) == 62 and len(_ULP) == 17, "spec §6.4 list sizes"


def bare_name(api_name: str) -> str:
    """``Functional.linear.0`` → ``linear``; ``Torch.linalg.inv.0`` → ``linalg.inv``; a bare name stays.

    Accepts per-output names too (``Functional.linear.0.forward.output.0``).
    """
    parts = api_name.split(".")
    for marker in ("forward", "backward"):
        if marker in parts[1:]:
            parts = parts[: parts.index(marker, 1)]
            break
    if len(parts) in (3, 4) and parts[-1].isdigit():
        return ".".join(parts[1:-1])
    return api_name


def _by_name(api_name: str) -> Standard:
    return ROUTING.get(bare_name(api_name), Standard.BENCHMARK)


def _all_benchmark(api_name: str) -> Standard:
    return Standard.BENCHMARK


POLICIES: MappingProxyType[str, Callable[[str], Standard]] = MappingProxyType(
    {
        "8.1.1": _by_name,  # normative (v811 §5.1)
        # 26.x (spec §6.4 "current code" step 3): every fp16/bf16/fp32/fp64 output → benchmark. Its fp8
        # steps do not apply: 8.1.1 (and so this replay) cannot compare fp8 outputs.
        "26.x": _all_benchmark,
    }
)
DEFAULT_ROUTING = "8.1.1"


def standard_for(api_name: str, routing: str = DEFAULT_ROUTING) -> Standard:
    """The standard of an API's float outputs: bare-name lookup in :data:`ROUTING`, else benchmark
    (8.1.1, v811 §5.1); ``routing="26.x"`` is 26.x's "every float output → benchmark" (documented option).

    ``api_name`` may be full (``Tensor.__add__.0``), per-output or bare (``__add__``). Only meaningful
    for fp16/bf16/fp32 outputs; integer/bool outputs never reach routing on the run_ut side.
    """
    try:
        policy = POLICIES[routing]
    except KeyError:
        raise ValueError(f"unknown routing {routing!r}; choose one of {sorted(POLICIES)}") from None
    return policy(api_name)
