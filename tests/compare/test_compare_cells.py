"""Cell reading as upstream's pandas-based compare reads cells."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from msprobe.compare.cells import EMPTY, NOT_FLOAT, OK, as_read, first_error, format_floats, parse
from msprobe.formats.accuracy_csv import format_cell


@pytest.mark.parametrize(
    ("text", "value", "code"),
    [
        ("0.5", 0.5, OK),
        (" 2 ", 2.0, OK),
        ("inf", math.inf, OK),
        ("-inf", -math.inf, OK),
        ("nan", math.nan, OK),
        ("", math.nan, OK),
        ("None", math.nan, OK),
        ("NAN", math.nan, OK),
        ("1e-3", 1e-3, OK),
        (" ", math.nan, EMPTY),
        ("  ", math.nan, EMPTY),
        ("abc", math.nan, NOT_FLOAT),
    ],
)
def test_parse(text, value, code):
    values, codes = parse(pd.Series([text], dtype=object))
    assert codes[0] == code
    assert (math.isnan(values[0]) and math.isnan(value)) or values[0] == value


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=20))
def test_formats_like_format_cell_and_parse_round_trips(values):
    arr = np.array(values, dtype=np.float64)
    texts = format_floats(arr)
    assert list(texts) == [format_cell(v) for v in values]


def test_first_error_follows_the_given_order():
    a = np.array([OK, EMPTY, NOT_FLOAT, OK], dtype=np.int8)
    b = np.array([OK, NOT_FLOAT, EMPTY, NOT_FLOAT], dtype=np.int8)
    assert first_error([a, b]).tolist() == [OK, EMPTY, NOT_FLOAT, NOT_FLOAT]


def test_as_read_keeps_text_or_reprints_numbers():
    cells = pd.Series(["0.125", "nan", " "], dtype=object)
    assert as_read(cells, numeric=False).tolist() == ["0.125", "nan", " "]
    assert as_read(pd.Series(["0.125", "1"], dtype=object), numeric=True).tolist() == [
        "0.12500000000000",
        "1.00000000000000",
    ]
