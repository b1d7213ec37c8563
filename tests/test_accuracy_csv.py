import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from msprobe.errors import MsprobeError
from msprobe.formats import accuracy_csv as ac

cells = st.one_of(
    st.none(),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00\r"), max_size=30),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)


def test_float_formats_follow_upstream():
    assert ac.format_cell(7.169942e-08) == "0.00000007169942"
    assert ac.format_cell(np.float64(1.0)) == "1.00000000000000"
    assert ac.format_cell(np.float32(0.015625)) == "0.015625"
    assert ac.format_cell(0) == "0"
    assert ac.format_cell(None) == " "
    assert ac.format_cell(float("nan")) == "nan"
    assert ac.format_cell(math.inf) == "inf"


@given(st.lists(st.lists(cells, min_size=4, max_size=4), max_size=8))
def test_round_trip_keeps_every_cell(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("csv") / "r.csv"
    ac.write_rows(path, ac.RUN_UT_RESULT_HEADER, rows)
    back = ac.read_rows(path, ac.RUN_UT_RESULT_HEADER)
    assert back == [[ac.format_cell(c) for c in row] for row in rows]
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")


def test_wrong_file_is_refused_with_its_kind(tmp_path):
    path = tmp_path / "x.csv"
    ac.write_rows(path, ac.RUN_UT_DETAILS_HEADER, [])
    with pytest.raises(MsprobeError, match="accuracy_checking_details"):
        ac.read_rows(path, ac.COMPARE_DETAILS_HEADER)


def test_reads_upstream_short_result_rows(tmp_path):
    path = tmp_path / "r.csv"
    header = "API name,Forward Test Success,Backward Test Success,Message"
    path.write_bytes(f"\ufeff{header}\r\nTensor.add_.0,pass, \r\n".encode())
    assert ac.read_rows(path, ac.RUN_UT_RESULT_HEADER) == [["Tensor.add_.0", "pass", " ", ""]]
