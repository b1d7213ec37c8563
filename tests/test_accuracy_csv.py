import math
from pathlib import Path

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


UPSTREAM_DETAILS = (
    Path(__file__).parent
    / "data"
    / "compare"
    / "upstream_v811_cnn"
    / "accuracy_checking_details_20261201061155.csv"
)


def test_a_cut_details_file_is_refused_naming_the_line(tmp_path):
    cut = tmp_path / "t.csv"
    cut.write_bytes(UPSTREAM_DETAILS.read_bytes()[:3000])  # head -c 3000: the last row ends mid-cell
    rows, lines = ac.read_rows_with_lines(UPSTREAM_DETAILS, ac.RUN_UT_DETAILS_HEADER)
    assert all(len(r) == len(ac.RUN_UT_DETAILS_HEADER) for r in rows)
    with pytest.raises(MsprobeError) as exc:
        ac.read_rows(cut, ac.RUN_UT_DETAILS_HEADER)
    message = str(exc.value)
    assert "\n" not in message
    line = int(message.split(":")[1])
    assert message.startswith(f"{cut}:{line}: ") and "cells, the header has 23" in message
    assert line == max(i for i in lines if i <= cut.read_bytes().count(b"\n") + 1)


def test_a_short_compare_details_row_is_refused(tmp_path):
    path = tmp_path / "d.csv"
    ac.write_rows(path, ac.COMPARE_DETAILS_HEADER, [["Torch.add.0.forward.output.0", "1.0"]])
    with pytest.raises(MsprobeError, match=r"d\.csv:2: 2 cells, the header has 28"):
        ac.read_rows(path, ac.COMPARE_DETAILS_HEADER)


DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    ("header", "upstream"),
    [
        (
            ac.RUN_UT_RESULT_HEADER,
            "run_ut/upstream_run_ut_cpu_tensor_L1/accuracy_checking_result_20261201061155.csv",
        ),
        (ac.RUN_UT_DETAILS_HEADER, "compare/upstream_v811_cnn/accuracy_checking_details_20261201061155.csv"),
        (
            ac.COMPARE_RESULT_HEADER,
            "compare/upstream_v811_cnn/api_precision_compare_result_20261201061209.csv",
        ),
        (
            ac.COMPARE_DETAILS_HEADER,
            "compare/upstream_v811_cnn/api_precision_compare_details_20261201061209.csv",
        ),
    ],
)
def test_headers_are_upstreams_byte_for_byte(tmp_path, header, upstream):
    """Each header, built from the column constants, is written exactly as 8.1.1 writes its first line."""
    path = tmp_path / "h.csv"
    ac.write_rows(path, header, [])
    first_line = (DATA / upstream).read_bytes().split(b"\n", 1)[0] + b"\n"
    assert path.read_bytes() == first_line


def test_every_header_cell_has_one_named_constant():
    headers = (
        ac.RUN_UT_RESULT_HEADER,
        ac.RUN_UT_DETAILS_HEADER,
        ac.COMPARE_RESULT_HEADER,
        ac.COMPARE_DETAILS_HEADER,
    )
    constants = {k: v for k, v in vars(ac).items() if k.isupper() and isinstance(v, str)}
    for cell in {c for h in headers for c in h}:
        assert len([k for k, v in constants.items() if v == cell]) == 1, cell
    assert all(len(set(h)) == len(h) for h in headers)
    assert ac.RUN_UT_DETAILS_HEADER[4:21] == ac.RUN_UT_METRIC_COLUMNS
    assert (ac.COSINE, ac.RMSE_RATIO, ac.COMPARE_RESULT) == ("余弦相似度", "均方根误差比值", "比对结果")
