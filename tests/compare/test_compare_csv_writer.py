"""The fast CSV writers give exactly the bytes of Python's ``csv.writer`` (UTF-8 with BOM, ``\\r\\n``)."""

from __future__ import annotations

import csv
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.formats import accuracy_csv as ac

cells = st.one_of(
    st.sampled_from(
        ["", " ", "nan", "0.50000000000000", "a,b", 'say "x"', "two\nlines", "cr\r", "ERROR: x\n"]
    ),
    st.text(max_size=8),
)


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    width = draw(st.integers(1, 5))
    header = draw(st.lists(cells, min_size=width, max_size=width))
    rows = draw(st.lists(st.lists(cells, min_size=width, max_size=width), max_size=8))
    return header, rows


def _reference(header: list[str], rows: list[list[str]]) -> bytes:
    buf = io.StringIO(newline="")
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8-sig")


@settings(max_examples=300)
@given(table=tables())
def test_fast_writers_equal_the_csv_module(tmp_path_factory, table):
    header, rows = table
    tmp = tmp_path_factory.mktemp("csv")
    ac.write_text_rows(tmp / "rows.csv", header, rows)
    columns = [[r[i] for r in rows] for i in range(len(header))]
    ac.write_text_columns(tmp / "columns.csv", header, columns)
    expected = _reference(header, rows)
    assert (tmp / "rows.csv").read_bytes() == expected
    assert (tmp / "columns.csv").read_bytes() == expected
    if rows:
        assert ac.read_rows(tmp / "rows.csv", header) == rows or len(header) == 1
