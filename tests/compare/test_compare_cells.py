"""Cell reading as upstream's pandas-based compare reads cells."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from msprobe.compare.cells import (
    EMPTY,
    NOT_FLOAT,
    OK,
    as_read,
    first_error,
    format_floats,
    parse,
    text_frame,
)
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


def test_format_floats_keeps_the_sign_of_zero_among_repeated_values():
    texts = format_floats(np.array([0.0, -0.0, 0.0, 1.5, 1.5, -0.0]))
    assert texts.tolist() == [
        "0.00000000000000",
        "-0.00000000000000",
        "0.00000000000000",
        "1.50000000000000",
        "1.50000000000000",
        "-0.00000000000000",
    ]


def test_text_frame_keeps_objects_and_can_be_written_to():
    source = pd.DataFrame({"a": ["x", "y"]}, dtype=object)
    view = source["a"].to_numpy(dtype=object)  # a read-only view under copy-on-write
    assert not view.flags.writeable
    frame = text_frame({"a": view, "b": np.array(["p", "q"], dtype=object), "n": np.array([1.0, 2.0])})
    frame.loc[0, "a"] = "z"
    assert frame["a"].tolist() == ["z", "y"] and source["a"].tolist() == ["x", "y"]
    assert frame["a"].dtype == object and frame["b"].dtype == object and frame["n"].dtype == np.float64


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
