"""Which routing a replay scored a details file with: 8.1.1's (each float output by its API's own
standard) or 26.x's (every float output by the benchmark standard), read off the file itself.

Upstream 26.x's replay, and ours with ``--msprobe-routing=26.x``, write no routing into the file; the
columns they fill tell: the benchmark's columns on a float output of an API that 8.1.1 routes
elsewhere.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprobe.compare.cells import text_test
from msprobe.compare.standards import FLOAT_DTYPES, UNSUPPORTED_DTYPES, route
from msprobe.compare.verdicts import api_names
from msprobe.formats.accuracy_csv import (
    ABS_ERR_RATE,
    API_NAME,
    BINARY_ERR_RATE,
    DEVICE_DTYPE,
    INF_NAN_ERR_RATE,
    REL_ERR_RATE,
    RMSE,
    THOUSANDTH,
    ULP_MAX,
    ULP_MEAN,
    ULP_PROPORTION,
)
from msprobe.run_ut.api_info import Standard

_CALL_AND_OUTPUT = r"\.\d+\.(?:forward|backward)\.output\.\d+$"
#: The columns a float output's standard other than the benchmark fills under 8.1.1's routing (双千指标,
#: the binary, absolute-threshold and ULP columns); 26.x's replay leaves them blank for float outputs.
OTHER_STANDARD_COLUMNS = (
    THOUSANDTH,
    BINARY_ERR_RATE,
    INF_NAN_ERR_RATE,
    REL_ERR_RATE,
    ABS_ERR_RATE,
    ULP_MAX,
    ULP_MEAN,
    ULP_PROPORTION,
)


def routing_of(frame: pd.DataFrame) -> str:
    """The routing a replay scored a details file's rows with: ``"26.x"`` when float outputs of APIs
    that 8.1.1 routes off the benchmark standard carry the benchmark standard's columns (26.x scores
    every float output by them; 8.1.1 fills them for benchmark rows only) and none of those APIs was
    scored by its own standard instead (an 8.1.1 replay whose ``pytest_msprobe_api_info`` hook routed
    one API to the benchmark standard is still an 8.1.1 file); ``"8.1.1"`` otherwise."""
    scored = frame[
        np.isin(frame[DEVICE_DTYPE].to_numpy(dtype=object), list(FLOAT_DTYPES - UNSUPPORTED_DTYPES))
    ]
    if not len(scored):
        return "8.1.1"

    def filled(column: str) -> np.ndarray:
        return text_test(scored[column].to_numpy(dtype=object), lambda t: bool(t.strip()))

    names = scored[API_NAME].astype(str)
    # per API (its name without call number and output): the standard depends on nothing else
    codes, apis = pd.factorize(names.str.replace(_CALL_AND_OUTPUT, "", regex=True))
    first = np.unique(codes, return_index=True)[1]
    bench, own = np.zeros(len(apis), dtype=bool), np.zeros(len(apis), dtype=bool)
    np.logical_or.at(bench, codes, filled(RMSE))
    np.logical_or.at(own, codes, np.logical_or.reduce([filled(c) for c in OTHER_STANDARD_COLUMNS]))
    valid, _, api_type, bare, _ = api_names(names.iloc[first])
    dtypes = scored[DEVICE_DTYPE].to_numpy(dtype=object)[first]
    off = np.zeros(len(apis), dtype=bool)
    off[valid] = route(api_type[valid], bare[valid], dtypes[valid]) != Standard.BENCHMARK
    bench, own = bench & off, own & off
    return "26.x" if bench.any() and not (own & ~bench).any() else "8.1.1"
