"""Which standard judges a details row, and the numbers each standard uses (upstream 8.1.1).

Everything here is read from the replay stage's tables: the standard of an API from its API table
entry (:func:`msprobe.run_ut.standards.standard_for`, the same routing run_ut uses), the per-dtype
numbers from the one thresholds table. The verdict code in :mod:`msprobe.compare.verdicts` reads
these and knows no API by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import pandas as pd

from msprobe.compare.cells import text_test
from msprobe.formats.accuracy_csv import (
    BINARY_ERR_RATE,
    ERROR_BALANCE,
    REL_ERR_RATE,
    RMSE,
    THOUSANDTH,
    ULP_MEAN,
)
from msprobe.run_ut import registry
from msprobe.run_ut.api_info import Standard as Standard
from msprobe.run_ut.api_table import TOPK_HINT as TOPK_HINT
from msprobe.run_ut.standards.routing import ROUTING as ROUTING
from msprobe.run_ut.standards.thresholds import BF16, DEFAULT, FP16, FP32, thresholds

# upstream 8.1.1: the NPU ``DEVICE Dtype`` decides first.
UNSUPPORTED_DTYPES = frozenset({"torch.float64", "torch.complex64", "torch.complex128"})
"""Rows of these dtypes are SKIP, and an API whose last row has one is SKIP as a whole."""
FLOAT_DTYPES = frozenset({"torch.float16", "torch.bfloat16", "torch.float32"}) | UNSUPPORTED_DTYPES
"""Any dtype outside this set (ints, bool, ``<class 'int'>``, fp8 names, ...) is judged binary."""
EMPTY_SHAPE = re.compile(r"[(,]\s*0\s*[,)]")
"""A ``Shape`` text with a zero dimension (``(0,)``, ``(2, 4, 16, 0)``): an empty output."""


def empty_shapes(shapes: np.ndarray) -> np.ndarray:
    """Which ``Shape`` cells are those of empty outputs. 8.1.1 knows only ``(0,)``: other empty shapes
    are rows of blank metrics there, "ERROR: Input data is an empty string"."""
    return text_test(shapes, lambda text: EMPTY_SHAPE.search(text) is not None)


UNSUPPORTED_MESSAGE = "This data type does not support benchmark compare."
HINTS: Mapping[str, str] = MappingProxyType(
    {name: info.hint for (api_type, name), info in registry.INDEX.items() if api_type is None and info.hint}
)
"""bare API name -> result-row hint for a failing forward direction (the table's ``hint`` fields)."""


@dataclass(frozen=True)
class DtypeNumbers:
    """Per-dtype constants of upstream's ``StandardConfig`` used on the compare side."""

    min_error: float  # ratio denominator floor
    accumulative_eb: float  # accumulative standard: error-balance threshold


def _numbers(dtype: str) -> DtypeNumbers:
    return DtypeNumbers(
        min_error=thresholds(Standard.BENCHMARK, dtype).min_err,
        accumulative_eb=thresholds(Standard.ACCUMULATIVE, dtype).eb_threshold,
    )


DTYPE_NUMBERS: Mapping[str, DtypeNumbers] = MappingProxyType({d: _numbers(d) for d in (FP16, BF16, FP32)})
DEFAULT_NUMBERS = _numbers(DEFAULT)
"""Unknown dtypes use upstream's "default" column."""


def per_row(dtypes: np.ndarray, field: str) -> np.ndarray:
    """The ``DtypeNumbers`` field for each row's dtype text, as a float64 array."""
    lookup = {k: getattr(v, field) for k, v in DTYPE_NUMBERS.items()}
    default = getattr(DEFAULT_NUMBERS, field)
    return np.array([lookup.get(d, default) for d in dtypes], dtype=np.float64)


def route(
    api_types: np.ndarray, bare_names: np.ndarray, dtypes: np.ndarray, routing: str = "8.1.1"
) -> np.ndarray:
    """Standard of each evaluated row (upstream's compare routing: a float row by its API's table entry,
    any other dtype binary); rows must not be SKIP rows. ``api_types``: ``Torch`` (the first segment of
    ``Torch.add.0``), ``bare_names``: ``add``. ``routing="26.x"``: every float row by the benchmark
    standard, as 26.x's replay and compare score them."""
    if routing == "26.x":
        routed = np.full(len(dtypes), Standard.BENCHMARK, dtype=object)
        routed[~np.isin(dtypes, list(FLOAT_DTYPES))] = Standard.BINARY
        return routed
    type_codes, types = pd.factorize(np.asarray(api_types, dtype=object))
    bare_codes, bares = pd.factorize(np.asarray(bare_names, dtype=object))
    api_codes, apis = pd.factorize(type_codes * len(bares) + bare_codes)  # one code per (type, bare)
    standards = [registry.lookup(types[a // len(bares)], bares[a % len(bares)]).standard for a in apis]
    out = np.array(standards, dtype=object)[api_codes] if len(apis) else np.zeros(0, dtype=object)
    non_float = ~np.isin(dtypes, list(FLOAT_DTYPES))
    out[non_float] = Standard.BINARY
    return out


def scored_standards(cells: Callable[[str], np.ndarray], n: int) -> np.ndarray:
    """Per row, the standard whose columns the replay filled (None where it filled none): what it
    scored the row by, whatever compare's table routes the API to (a ``pytest_msprobe_api_info``
    answer may route a project's own op elsewhere). ``cells(column)``: that column of the rows.

    Each standard fills its own columns; the accumulative one fills the absolute threshold's and
    误差均衡性, which the benchmark standard fills too, so the benchmark's 均方根误差 is read first."""

    def filled(column: str) -> np.ndarray:
        return text_test(cells(column), lambda text: bool(text.strip()))

    rates = filled(REL_ERR_RATE)
    out = np.full(n, None, dtype=object)
    unset = np.ones(n, dtype=bool)
    for standard, mask in (
        (Standard.BENCHMARK, filled(RMSE)),
        (Standard.ACCUMULATIVE, rates & filled(ERROR_BALANCE)),
        (Standard.ABSOLUTE_THRESHOLD, rates),
        (Standard.BINARY, filled(BINARY_ERR_RATE)),
        (Standard.ULP, filled(ULP_MEAN)),
        (Standard.THOUSANDTH, filled(THOUSANDTH)),
    ):
        out[unset & mask] = standard
        unset &= ~mask
    return out
