"""Acceptance: on upstream 8.1.1's own output our CSVs equal upstream's, row for row and byte for byte.

Fixture: upstream 8.1.1's run_ut details of a small CNN compared against
themselves by upstream's api_precision_compare (copied into ``tests/data/compare/upstream_v811_cnn``).
"""

from __future__ import annotations

from pathlib import Path

from msprobe.compare.run import analyse, run_compare, write_csvs
from msprobe.compare.table import load_details
from msprobe.formats import accuracy_csv as ac

DATA = Path(__file__).parents[1] / "data" / "compare" / "upstream_v811_cnn"
DETAILS_IN = DATA / "accuracy_checking_details_20261201061155.csv"
RESULT_OUT = DATA / "api_precision_compare_result_20261201061209.csv"
DETAILS_OUT = DATA / "api_precision_compare_details_20261201061209.csv"


def test_verdicts_equal_upstream_row_for_row(tmp_path):
    table = load_details(DETAILS_IN)
    a = analyse(table, table, npu_alone=True)
    theirs = ac.read_rows(RESULT_OUT, ac.COMPARE_RESULT_HEADER)
    ours = a.results[list(ac.COMPARE_RESULT_HEADER)].to_numpy(dtype=object).tolist()
    assert [r[:3] for r in ours] == [r[:3] for r in theirs]
    assert any(r[1] == "error" for r in theirs)  # the fixture has failing rows (absolute threshold)
    theirs_d = ac.read_rows(DETAILS_OUT, ac.COMPARE_DETAILS_HEADER)
    ours_d = a.details[list(ac.COMPARE_DETAILS_HEADER)].to_numpy(dtype=object).tolist()
    status = ac.COMPARE_DETAILS_HEADER.index("比对结果")
    assert [(r[0], r[status]) for r in ours_d] == [(r[0], r[status]) for r in theirs_d]
    assert ours_d == theirs_d


def test_written_files_are_byte_identical(tmp_path):
    table = load_details(DETAILS_IN)
    write_csvs(analyse(table, table, npu_alone=True), tmp_path / "r.csv", tmp_path / "d.csv")
    assert (tmp_path / "r.csv").read_bytes() == RESULT_OUT.read_bytes()
    assert (tmp_path / "d.csv").read_bytes() == DETAILS_OUT.read_bytes()


def test_run_compare_writes_four_timestamped_files(tmp_path):
    out = run_compare(DETAILS_IN, DETAILS_IN, tmp_path / "out", dump_dir=DATA, ts="20260101000000")
    assert out.result_csv.name == "api_precision_compare_result_20260101000000.csv"
    assert out.details_csv.name == "api_precision_compare_details_20260101000000.csv"
    assert {p.name for p in (tmp_path / "out").iterdir()} == {p.name for p in out.paths}
    # the fixture compares a file with itself: upstream's two absolute-threshold errors (NPU rates that
    # the GPU row has just the same) pass here, and nothing else changes
    ours = ac.read_rows(out.result_csv, ac.COMPARE_RESULT_HEADER)
    theirs = ac.read_rows(RESULT_OUT, ac.COMPARE_RESULT_HEADER)
    changed = [(t[0], t[1], o[1]) for o, t in zip(ours, theirs) if o != t]
    assert changed == [("Tensor.add_.5", "error", "pass"), ("Tensor.add_.7", "error", "pass")]
    assert out.api_counts == out.counts == {"pass": 20}
    assert out.row_counts == {"pass": 37, "SKIP": 4}
    assert not out.failed and out.flagged == 0
    details = ac.read_rows(out.details_csv, ac.COMPARE_DETAILS_HEADER)
    upstream = ac.read_rows(DETAILS_OUT, ac.COMPARE_DETAILS_HEADER)
    status = ac.COMPARE_DETAILS_HEADER.index("比对结果")
    differ = [(o[0], t[status], o[status], o[-1]) for o, t in zip(details, upstream) if o != t]
    assert [d[:3] for d in differ] == [
        ("Tensor.add_.5.forward.output.0", "error", "pass"),
        ("Tensor.add_.7.forward.output.0", "error", "pass"),
    ]
    assert all("on the GPU too, NPU no worse" in d[3] for d in differ)


def test_analysis_frames_are_the_callers_to_write_to():
    table = load_details(DETAILS_IN)
    before = table.frame.copy()
    a = analyse(table, table)
    for frame in (a.details, a.results):
        for col in frame.columns:
            others = frame.drop(columns=[col]).copy()
            value = "written" if frame[col].dtype == object else 7.0
            frame.loc[0, col] = value  # no column is a read-only view
            assert frame[col].iloc[0] == value
            assert frame.drop(columns=[col]).equals(others)  # nor shares its cells with another column
    assert table.frame.equals(before)


V26 = Path(__file__).parents[1] / "data" / "compare" / "upstream_v26_cnn"
V26_DETAILS_IN = (
    Path(__file__).parents[1]
    / "data"
    / "run_ut"
    / "upstream_v26_acc_check_cpu_tensor_L1"
    / "accuracy_checking_details_20261201055320.csv"
)


def test_a_26x_replays_files_are_judged_as_26x_judges_them(tmp_path):
    """26.x scores every float output by the benchmark standard (the replay's ``--msprobe-routing=26.x``
    too): read with 8.1.1's routing, a linear or add_ row had none of its standard's metrics and became
    a SKIP row of its own. The routing is read off the files."""
    table = load_details(V26_DETAILS_IN)
    a = analyse(table, table, npu_alone=True)
    assert a.routing == "26.x" and a.warning() == ""
    theirs = ac.read_rows(V26 / "api_precision_compare_result_20261201055354.csv", ac.COMPARE_RESULT_HEADER)
    ours = a.results[list(ac.COMPARE_RESULT_HEADER)].to_numpy(dtype=object).tolist()
    assert [r[:3] for r in ours] == [r[:3] for r in theirs]
    theirs_d = ac.read_rows(
        V26 / "api_precision_compare_details_20261201055354.csv", ac.COMPARE_DETAILS_HEADER
    )
    ours_d = a.details[list(ac.COMPARE_DETAILS_HEADER)].to_numpy(dtype=object).tolist()
    status = ac.COMPARE_DETAILS_HEADER.index("比对结果")
    assert [(r[0], r[status]) for r in ours_d] == [(r[0], r[status]) for r in theirs_d]
    assert ours_d == theirs_d
    assert analyse(load_details(DETAILS_IN), load_details(DETAILS_IN)).routing == "8.1.1"


def test_files_scored_with_different_routings_are_said_to_be(tmp_path):
    v811, v26 = load_details(DETAILS_IN), load_details(V26_DETAILS_IN)
    a = analyse(v811, v26)
    assert a.warning() == (
        f"{DETAILS_IN} was scored with 8.1.1's routing and {V26_DETAILS_IN} with 26.x's routing (every "
        "float output by the benchmark standard): an API the two route differently is SKIP, or judged on "
        "the NPU's values alone (absolute threshold, binary, thousandth); replay both with one "
        "--msprobe-routing"
    )
    # what the line says: add_ (absolute threshold) is judged, and fails, on the NPU's rate alone
    verdicts = dict(zip(a.results["API Name"], a.results["Forward Test Success"]))
    assert verdicts["Tensor.add_.5"] == "error"
    b = analyse(v26, v811)  # the 26.x file as NPU: the same line, the files named the other way
    assert b.warning().endswith("thousandth); replay both with one --msprobe-routing")


def test_an_8_1_1_file_with_one_api_rerouted_by_a_hook_keeps_8_1_1s_routing(tmp_path):
    """A ``pytest_msprobe_api_info`` answer scoring ``linear`` by the benchmark standard: its rows held
    the benchmark columns, the file was taken for a 26.x file and every other API's rows (conv2d's
    双千指标, add_'s absolute-threshold rates, relu's binary rate) had no metric: SKIP, no verdict."""
    from msprobe.compare.routing import routing_of

    frame = load_details(DETAILS_IN).frame.copy()
    v26 = load_details(V26_DETAILS_IN).frame.set_index("API Name")
    linear = frame["API Name"].str.startswith("Functional.linear.")
    benchmark = ("均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值", "误差均衡性")
    for col in (*benchmark, "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比"):
        frame.loc[linear, col] = v26.loc[frame.loc[linear, "API Name"], col].to_numpy()
    assert routing_of(frame) == "8.1.1"
    assert routing_of(load_details(V26_DETAILS_IN).frame) == "26.x"
