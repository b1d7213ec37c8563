"""Which standard judges a details row, and the numbers each standard uses (8.1.1).

Facts from ``shared/spec/run_ut_compare_v811.md`` §5.2 (routing on the compare side), §6 (thresholds)
and ``run_ut_compare.md`` §6.4 (the API lists) and §6.5 (the per-dtype table). Everything here is data:
the verdict code in :mod:`msprobe.compare.verdicts` reads these tables and knows no API by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from msprobe.run_ut.standards.routing import ROUTING as ROUTING
from msprobe.run_ut.standards.routing import Standard as Standard

# The routing lists (spec §6.4, identical on both sides in 8.1.1, v811 §5.1/§5.2) are the replay
# stage's one table: compare keys it on the bare API name exactly as run_ut does.

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
