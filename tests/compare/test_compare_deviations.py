"""What upstream 8.1.1 gets wrong, done right: missing rows, duplicates, dtype/shape mismatches, wrong files.

Each case has its exact outcome (docs/compare.md, "Deviations from 8.1.1").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from compare_rows import detail, pair, result_list, row, write

from msprobe.compare.run import analyse, run_compare
from msprobe.compare.table import load_details
from msprobe.errors import MsprobeError
from msprobe.formats import accuracy_csv as ac

F, B = "forward.output", "backward.output"
NPU_ONLY = "missing: only in the NPU details file, no GPU row has this name."
GPU_ONLY = "missing: only in the GPU details file, no NPU row has this name."


def test_rows_on_one_side_only_are_reported_and_counted(tmp_path):
    npu = [row(f"Torch.a.0.{F}.0"), row(f"Torch.b.0.{F}.0"), row(f"Torch.d.0.{F}.0"), row(f"Torch.d.0.{B}.0")]
    gpu = [row(f"Torch.a.0.{F}.0"), row(f"Torch.c.0.{F}.0"), row(f"Torch.d.0.{F}.0")]
    a = pair(tmp_path, npu, gpu)
    assert a.details["API Name"].tolist() == [
        f"Torch.a.0.{F}.0",
        f"Torch.b.0.{F}.0",
        f"Torch.d.0.{F}.0",
        f"Torch.d.0.{B}.0",
        f"Torch.c.0.{F}.0",
    ]
    b = detail(a, f"Torch.b.0.{F}.0")
    assert (b["比对结果"], b["Message"], b["比对算法"]) == ("missing", NPU_ONLY, " ")
    assert detail(a, f"Torch.c.0.{F}.0")["Message"] == GPU_ONLY
    assert result_list(a) == [
        ["Torch.a.0", "pass", " ", ""],
        ["Torch.b.0", "missing", " ", "1 output row(s) present on one side only."],
        ["Torch.d.0", "pass", "missing", "1 output row(s) present on one side only."],
        ["Torch.c.0", "missing", " ", "1 output row(s) present on one side only."],
    ]
    assert a.api_counts() == {"pass": 1, "missing": 3}
    assert a.row_counts() == {"pass": 2, "missing": 3}


def test_error_outranks_missing_in_the_api_verdict(tmp_path):
    npu = [row(f"Torch.e.0.{F}.0", cells={"均方根误差": "1"}), row(f"Torch.e.0.{F}.1")]
    gpu = [row(f"Torch.e.0.{F}.0")]
    assert result_list(pair(tmp_path, npu, gpu)) == [
        ["Torch.e.0", "error", " ", "1 output row(s) present on one side only."]
    ]


def test_duplicate_rows_are_a_clear_error_naming_them_and_their_lines(tmp_path):
    rows = [row(f"Torch.a.0.{F}.0", message="two\nlines"), row(f"Torch.b.0.{F}.0"), row(f"Torch.a.0.{F}.0")]
    npu = write(tmp_path / "npu.csv", rows)
    gpu = write(tmp_path / "gpu.csv", rows[:2])
    with pytest.raises(MsprobeError) as err:
        analyse(load_details(npu), load_details(gpu))
    assert str(err.value) == (
        f"{npu}: 1 API Name(s) occur more than once: Torch.a.0.forward.output.0 (lines 2, 5); "
        "each output must appear once (was the file appended twice?)"
    )
    with pytest.raises(MsprobeError, match=r"npu\.csv: 1 API Name\(s\) occur more than once"):
        analyse(load_details(gpu), load_details(npu))  # the duplicated file on the GPU side


def test_duplicates_refused_before_anything_is_written(tmp_path):
    rows = [row(f"Torch.a.0.{F}.0"), row(f"Torch.a.0.{F}.0")]
    npu = write(tmp_path / "npu.csv", rows)
    with pytest.raises(MsprobeError):
        run_compare(npu, npu, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_dtype_differences_are_flagged_without_changing_the_verdict(tmp_path):
    name = f"Torch.a.0.{F}.0"
    a = pair(tmp_path, [row(name, "torch.float16")], [row(name, "torch.float32")])
    d = detail(a, name)
    assert d["比对结果"] == "pass"
    assert d["Message"] == "NOTE: dtype differs: NPU torch.float16, GPU torch.float32\n"
    assert d["_flag"] == "dtype differs: NPU torch.float16, GPU torch.float32"
    assert result_list(a) == [["Torch.a.0", "pass", " ", ""]]


def test_shape_differences_are_flagged_and_not_compared(tmp_path):
    name = f"Torch.a.0.{F}.0"
    a = pair(
        tmp_path, [row(name, "torch.float16", shape="(2, 3)")], [row(name, "torch.float32", shape="(3, 2)")]
    )
    d = detail(a, name)
    assert d["比对结果"] == "mismatch"
    flag = "dtype differs: NPU torch.float16, GPU torch.float32; shape differs: NPU (2, 3), GPU (3, 2)"
    assert d["Message"].endswith(f"are both files from one run?\nNOTE: {flag}\n")
    assert d["_flag"] == flag
    assert result_list(a)[0][:3] == ["Torch.a.0", "mismatch", " "]


@pytest.mark.parametrize("separator", [";", "\t"])
def test_a_details_file_a_spreadsheet_saved_with_another_separator_is_said_so(tmp_path, separator):
    """A spreadsheet set to a ';' list separator saves the header as one cell: the message showed it."""
    path = tmp_path / "npu.csv"
    row_cells = row(f"Torch.a.0.{F}.0")
    path.write_text(
        separator.join(ac.RUN_UT_DETAILS_HEADER) + "\r\n" + separator.join(row_cells) + "\r\n",
        encoding="utf-8-sig",
    )
    with pytest.raises(MsprobeError) as err:
        load_details(path)
    assert str(err.value) == (
        f"{path}: not the expected CSV (its cells are separated by {separator!r}, not ','; save it "
        "comma-separated; expected header ('API Name', 'Bench Dtype', 'DEVICE Dtype')...)"
    )


def test_matching_rows_are_not_flagged(tmp_path):
    a = pair(tmp_path, [row(f"Torch.a.0.{F}.0")])
    assert (a.details["_flag"] == "").all()


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (ac.RUN_UT_RESULT_HEADER, "it is an accuracy_checking_result file"),
        (ac.COMPARE_DETAILS_HEADER, "it is an api_precision_compare_details file"),
        (("a", "b", "c"), "its header starts with ['a', 'b', 'c']"),
    ],
)
def test_a_file_that_is_not_a_details_file_is_refused_in_one_line(tmp_path, header, expected):
    path = tmp_path / "x.csv"
    ac.write_rows(path, header, [])
    with pytest.raises(MsprobeError) as err:
        load_details(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not the expected CSV ({expected}; expected header ")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "is a folder, expected a CSV file"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00\x01garbage"), "not a UTF-8 CSV file"),
        (lambda p: p.write_text(""), "empty file"),
    ],
)
def test_unreadable_inputs(tmp_path, make, expected):
    path = tmp_path / "x.csv"
    make(path)
    with pytest.raises(MsprobeError, match=expected):
        load_details(path)


def test_compares_started_in_one_second_never_share_their_files(tmp_path, monkeypatch):
    """The names were checked free, then written after the reports were built: two compares started
    together into one folder could both pick one second, and the later replaced the earlier's files.
    Each now creates its names exclusively; a taken second sends it to the next one."""
    npu = write(tmp_path / "npu.csv", [row(f"Torch.a.0.{F}.0")])
    gpu = write(tmp_path / "gpu.csv", [row(f"Torch.b.0.{F}.0")])
    first = run_compare(npu, npu, tmp_path / "out", ts="20260101000059")
    from msprobe.compare.run import output_paths as checked

    def late_rival(out_dir, ts):  # another compare creates this second's files between check and write
        paths = checked(out_dir, ts)
        if ts == "20260101000100" and not paths[0].exists():
            for p in paths:
                p.write_text("rival")
        return paths

    monkeypatch.setattr("msprobe.compare.run.output_paths", late_rival)
    second = run_compare(gpu, gpu, tmp_path / "out", ts="20260101000059")
    third = run_compare(gpu, gpu, tmp_path / "out", ts="20260101000059")
    assert first.result_csv.name == "api_precision_compare_result_20260101000059.csv"
    assert second.result_csv.name == "api_precision_compare_result_20260101000101.csv"
    assert third.result_csv.name == "api_precision_compare_result_20260101000102.csv"
    assert "Torch.a.0" in first.result_csv.read_text(encoding="utf-8-sig")  # never overwritten
    assert checked(tmp_path / "out", "20260101000100")[0].read_text() == "rival"


def test_short_and_long_rows_are_refused(tmp_path):
    # A details row always has all 23 cells: a short one is a file cut mid-row (head -c).
    header = ",".join(ac.RUN_UT_DETAILS_HEADER)
    short = tmp_path / "short.csv"
    short.write_text(f"{header}\nTorch.a.0.forward.output.0,torch.float64,torch.float32\n", encoding="utf-8")
    with pytest.raises(MsprobeError, match=r"short\.csv:2: 3 cells, the header has 23"):
        load_details(short)
    long = tmp_path / "long.csv"
    long.write_text(f"{header}\n" + ",".join(["x"] * 24) + "\n", encoding="utf-8")
    with pytest.raises(MsprobeError, match=r"long\.csv: malformed CSV \("):
        load_details(long)


def test_a_header_only_file_compares_to_nothing(tmp_path):
    empty = write(tmp_path / "empty.csv", [])
    a = analyse(load_details(empty), load_details(empty))
    assert len(a.details) == 0 and len(a.results) == 0


def test_a_file_of_invalid_names_only(tmp_path):
    a = pair(tmp_path, [row("bad"), row("also.bad")])
    assert result_list(a) == [
        ["bad", "SKIP", "SKIP", "The API name bad is invalid."],
        ["also.bad", "SKIP", "SKIP", "The API name also.bad is invalid."],
    ]


def test_an_output_path_that_is_a_file_is_refused(tmp_path):
    npu = write(tmp_path / "npu.csv", [row(f"Torch.a.0.{F}.0")])
    (tmp_path / "taken").write_text("x")
    with pytest.raises(MsprobeError, match=r"taken: not a folder"):
        run_compare(npu, npu, tmp_path / "taken")
    with pytest.raises(MsprobeError, match=r"cannot write"):
        run_compare(npu, npu, tmp_path / "taken" / "below")


@pytest.mark.parametrize(
    "failing",
    [
        "api_precision_compare_details_20260101000000.csv",
        "api_precision_compare_result_20260101000000.csv",
        "api_precision_compare_report_20260101000000.html",
        "api_precision_compare_report_20260101000000.md",
    ],
)
def test_a_full_disk_at_any_output_names_that_file_and_leaves_none(tmp_path, monkeypatch, failing):
    """A write that fails in ``write()`` (ENOSPC) has no file name on its error: the error named the
    folder (or the details CSV, written before the result CSV that failed), and the outputs written
    before it, or a report cut short, stayed behind."""
    npu = write(tmp_path / "npu.csv", [row(f"Torch.a.0.{F}.0")])
    original = ac.write_atomically

    def disk_full(path: Path, chunks: object) -> None:
        if path.name == failing:
            raise OSError(28, "No space left on device")
        original(path, chunks)  # type: ignore[arg-type]

    monkeypatch.setattr(ac, "write_atomically", disk_full)
    out = tmp_path / "out"
    with pytest.raises(MsprobeError) as exc:
        run_compare(npu, npu, out, ts="20260101000000")
    assert str(exc.value) == f"{out / failing}: cannot write (No space left on device)"
    assert list(out.iterdir()) == []


def test_a_result_row_keeps_its_reason_and_notes_apart(tmp_path):
    """A forward SKIP's reason, then the counts of one-sided and shape-differing rows: separate sentences."""
    skip = row("Torch.u.0.forward.output.0", " ", shape=" ", message="why.", bench=False)
    b0, b1 = "Torch.u.0.backward.output.0", "Torch.u.0.backward.output.1"
    npu = [skip, row(b0), row(b1, shape="(3, 2)")]
    gpu = [skip, row(b1)]
    (result,) = result_list(pair(tmp_path, npu, gpu))
    assert result[3] == (
        "why. 1 output row(s) present on one side only. "
        "1 output row(s) whose shapes differ between NPU and GPU (not compared)."
    )


@pytest.mark.parametrize(
    ("npu_cosine", "gpu_cosine", "verdict"),
    [
        ("nan", "0.99999", "error"),  # inf/NaN where the NPU alone has it
        ("nan", "nan", "pass"),  # both devices differ from the bench alike: the ratios judge
        ("0.99999", "nan", "SKIP"),  # the GPU alone: not the NPU's failure, and no baseline for it
        (" ", "0.99999", "pass"),  # one element: no cosine
        ("nan", " ", "error"),  # one element (or an all-zero bench): the GPU's cell is blank
    ],
)
def test_an_inf_or_nan_only_the_npu_produces_fails_a_benchmark_row(
    tmp_path: Path, npu_cosine: str, gpu_cosine: str, verdict: str
) -> None:
    """Every benchmark metric leaves inf/NaN positions out, so their ratios pass an NPU that returns NaN
    where the bench and the GPU have numbers (8.1.1 passes it). The replay's NaN cosine says so."""
    name = "Functional.gelu.0.forward.output.0"
    npu = [row(name, cells={"余弦相似度": npu_cosine})]
    gpu = [row(name, cells={"余弦相似度": gpu_cosine})]
    d = detail(pair(tmp_path, npu, gpu), name)
    assert (d["比对算法"], d["比对结果"]) == ("标杆比对法", verdict)
    assert ("ERROR: inf/nan on the NPU only" in d["Message"]) == (verdict == "error")
    assert detail(pair(tmp_path, npu, gpu, npu_alone=True), name)["比对结果"] == "pass"  # 8.1.1


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("bench", "npu_out", "shape"),
    [
        ([3.0], [NAN], ()),  # a loss: 0-dim
        ([3.0], [INF], ()),
        ([3.0], [NAN], (1,)),
        ([0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, NAN], (4,)),  # an all-zero bench
        ([1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, NAN], (4,)),
    ],
)
def test_an_inf_or_nan_only_the_npu_produces_fails_from_replay_to_compare(
    tmp_path: Path, bench: list[float], npu_out: list[float], shape: tuple[int, ...]
) -> None:
    """The replay's rows as written, the NPU's with inf/NaN where the bench and the GPU have numbers:
    for any output size, an all-zero bench included, the replay says error and so does compare."""
    torch = pytest.importorskip("torch")
    from msprobe.run_ut.standards import compare_outputs

    name = "Torch.sum.0"
    b = torch.tensor(bench, dtype=torch.float64).reshape(shape)
    rows = {}
    for side, values in (("npu", npu_out), ("gpu", bench)):
        out = torch.tensor(values, dtype=torch.float16).reshape(shape)
        (judged,) = compare_outputs(name, "forward", b, out)
        assert judged.status == ("error" if side == "npu" else "pass")
        rows[side] = write(tmp_path / f"{side}.csv", [[ac.format_cell(c) for c in judged.cells()]])
    a = analyse(load_details(rows["npu"]), load_details(rows["gpu"]))
    d = detail(a, f"{name}.forward.output.0")
    assert (d["比对算法"], d["比对结果"]) == ("标杆比对法", "error")
    assert "ERROR: inf/nan on the NPU only" in d["Message"]


@pytest.mark.parametrize(
    ("api", "dtype", "bench", "gpu_out", "npu_out"),
    [
        # binary: the GPU one ulp off at element 1 (rate 0.5), the NPU NaN there (rate 0.5 too)
        ("Functional.relu.0", "float16", [1.0, 0.3], [1.0, 0.30029296875], [1.0, NAN]),
        # thousandth: bf16 holds 257 as 256 (双千 0.5 on the GPU), the NPU overflows there (0.5 too)
        ("Functional.conv2d.0", "bfloat16", [1.0, 257.0], [1.0, 256.0], [1.0, INF]),
    ],
)
def test_an_npu_only_inf_or_nan_is_not_excused_by_an_equally_saturated_gpu_metric(
    tmp_path: Path, api: str, dtype: str, bench: list[float], gpu_out: list[float], npu_out: list[float]
) -> None:
    """The "GPU no better" excuse of an NPU-alone metric must not pass an inf/NaN the NPU alone
    produces: binary rate and 双千 count it like any wrong element, so a GPU already off there
    scores the same."""
    torch = pytest.importorskip("torch")
    from msprobe.run_ut.standards import compare_outputs

    b = torch.tensor(bench, dtype=torch.float32)
    rows = {}
    for side, values in (("npu", npu_out), ("gpu", gpu_out)):
        out = torch.tensor(values, dtype=getattr(torch, dtype))
        (judged,) = compare_outputs(api, "forward", b, out)
        rows[side] = write(tmp_path / f"{side}.csv", [[ac.format_cell(c) for c in judged.cells()]])
    a = analyse(load_details(rows["npu"]), load_details(rows["gpu"]))
    d = detail(a, f"{api}.forward.output.0")
    assert d["比对结果"] == "error", d["Message"]
    assert "past its bound on the GPU too" not in d["Message"]


def _replay_output(folder: Path, details: list[list[str]], results: list[list[str]]) -> Path:
    """A replay's output folder: its details CSV and, beside it, its result CSV."""
    folder.mkdir()
    ac.write_rows(folder / "accuracy_checking_result_20260101000000.csv", ac.RUN_UT_RESULT_HEADER, results)
    return write(folder / "accuracy_checking_details_20260101000000.csv", details)


def test_a_result_row_a_killed_replay_cut_short_is_no_verdict(tmp_path):
    """``Functional.dropout.0,er`` (from ``error``) at the end of the NPU replay's result CSV was read
    as the verdict ``pass``."""
    details = [row(f"Torch.a.0.{F}.0")]
    results = [["Torch.a.0", "pass", " ", ""], ["Functional.dropout.0", "error", "pass", ""]]
    npu = _replay_output(tmp_path / "npu", details, results[:1])
    with open(npu.with_name("accuracy_checking_result_20260101000000.csv"), "ab") as fh:
        fh.write(b"Functional.dropout.0,er")
    gpu = _replay_output(tmp_path / "gpu", details, results)
    a = analyse(load_details(npu), load_details(gpu))
    assert result_list(a)[1] == [
        "Functional.dropout.0",
        "missing",
        "missing",
        "in the GPU replay only, with no output rows (GPU error/pass).",
    ]
    assert a.warning() == ""


def test_a_damaged_replay_result_csv_is_said_and_its_details_still_compared(tmp_path):
    """An unreadable result CSV beside a details file was ignored without a word: the APIs only it
    lists (a dropout judged error) vanished from the compare."""
    details = [row(f"Torch.a.0.{F}.0")]
    results = [["Torch.a.0", "pass", " ", ""], ["Functional.dropout.0", "error", "pass", ""]]
    npu = _replay_output(tmp_path / "npu", details, results)
    gpu = _replay_output(tmp_path / "gpu", details, results)
    damaged = gpu.with_name("accuracy_checking_result_20260101000000.csv")
    damaged.write_text(damaged.read_text(encoding="utf-8-sig").replace("error,pass", "error,pass,,x"))
    a = analyse(load_details(npu), load_details(gpu))
    assert [r[:2] for r in result_list(a)] == [["Torch.a.0", "pass"], ["Functional.dropout.0", "error"]]
    assert a.warning().startswith(f"{damaged}:3: ")
    assert a.warning().endswith(
        "the APIs it alone lists (judged without output rows: a dropout, a skipped API) are not in "
        "this compare"
    )


def test_an_api_both_replays_judged_error_without_details_rows_stays_an_error(tmp_path):
    """A dropout judged ``error`` by both replays (its zero-fraction check writes no details row): no
    number says the NPU is no worse (one zeroing everything and one a little off are both ``error``),
    so the NPU replay's verdict stands."""
    details = [row(f"Torch.a.0.{F}.0")]
    results = [["Torch.a.0", "pass", " ", ""], ["Functional.dropout.0", "error", "error", ""]]
    npu = _replay_output(tmp_path / "npu", details, results)
    gpu = _replay_output(tmp_path / "gpu", details, results)
    verdicts = {r[0]: r[1:3] for r in result_list(analyse(load_details(npu), load_details(gpu)))}
    assert verdicts["Functional.dropout.0"] == ["error", "error"]


def test_an_api_judged_without_details_rows_keeps_its_replay_verdict_in_place(tmp_path):
    """8.1.1 drops an API whose replay wrote no details row (every dropout) from the compare."""
    details = [row(f"Torch.a.0.{F}.0"), row(f"Torch.c.0.{F}.0")]
    npu = _replay_output(
        tmp_path / "npu",
        details,
        [
            ["Torch.a.0", "pass", " ", ""],
            ["Functional.dropout.0", "error", "pass", ""],
            ["Functional.dropout.1", "Warning", " ", ""],
            ["Torch.c.0", "pass", " ", ""],
            ["Distributed.all_reduce.0", "SKIP", "SKIP", "API all_reduce not support for run ut. SKIP."],
        ],
    )
    gpu = _replay_output(
        tmp_path / "gpu",
        details,
        [
            ["Torch.a.0", "pass", " ", ""],
            ["Functional.dropout.0", "pass", "pass", ""],
            ["Torch.c.0", "pass", " ", ""],
            ["Distributed.all_reduce.0", "SKIP", "SKIP", "API all_reduce not support for run ut. SKIP."],
            ["Functional.dropout.2", "pass", " ", ""],
        ],
    )
    a = analyse(load_details(npu), load_details(gpu))
    assert result_list(a) == [
        ["Torch.a.0", "pass", " ", ""],
        [
            "Functional.dropout.0",
            "error",
            "pass",
            "no output rows to compare: the replay's own verdict (NPU error/pass, GPU pass/pass).",
        ],
        [
            "Functional.dropout.1",
            "missing",
            " ",
            "in the NPU replay only, with no output rows (NPU Warning/-).",
        ],
        ["Torch.c.0", "pass", " ", ""],
        [
            "Distributed.all_reduce.0",
            "SKIP",
            "SKIP",
            "no output rows to compare: the replay's own verdict (NPU SKIP/SKIP, GPU SKIP/SKIP). "
            "API all_reduce not support for run ut. SKIP.",
        ],
        ["Functional.dropout.2", "missing", " ", "in the GPU replay only, with no output rows (GPU pass/-)."],
    ]
    assert a.api_counts() == {"pass": 2, "error": 1, "missing": 2, "SKIP": 1}
    alone = write(tmp_path / "copied.csv", details)  # a details file without its result file
    unknown = "no output rows to compare, and no NPU result CSV to give its verdict"
    assert result_list(analyse(load_details(alone), load_details(gpu))) == [
        ["Torch.a.0", "pass", " ", ""],
        ["Functional.dropout.0", "SKIP", "SKIP", f"{unknown} (GPU pass/pass)."],
        ["Torch.c.0", "pass", " ", ""],
        [
            "Distributed.all_reduce.0",
            "SKIP",
            "SKIP",
            f"{unknown} (GPU SKIP/SKIP). API all_reduce not support for run ut. SKIP.",
        ],
        ["Functional.dropout.2", "SKIP", " ", f"{unknown} (GPU pass/-)."],
    ]


def test_an_interrupted_compare_leaves_no_empty_outputs(tmp_path, monkeypatch):
    """The four names are claimed (created empty) before they are written: a Ctrl-C while a report
    renders left the unwritten ones behind as empty files."""
    import msprobe.compare.report as report

    npu = write(tmp_path / "npu.csv", [row(f"Torch.a.0.{F}.0")])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "render_markdown", interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_compare(npu, npu, out, ts="20260101000000")
    assert list(out.iterdir()) == []


def test_a_one_sided_row_is_not_hidden_by_the_last_row_dtype_rule(tmp_path):
    """8.1.1's "last judged row float64 -> the API is SKIP" must not swallow a row present on one side
    only (ours; 8.1.1 drops it): the API stays missing, its Message counts the row, --strict fails."""
    from msprobe.compare.cli import main

    npu = [row("Torch.sum.0.forward.output.0"), row("Torch.sum.0.backward.output.0", "torch.float64")]
    gpu = [row("Torch.sum.0.backward.output.0", "torch.float64")]
    a = pair(tmp_path, npu, gpu)
    assert result_list(a) == [["Torch.sum.0", "missing", " ", "1 output row(s) present on one side only."]]
    n, g = write(tmp_path / "n.csv", npu), write(tmp_path / "g.csv", gpu)
    assert main(["-npu", str(n), "-gpu", str(g), "-o", str(tmp_path / "o"), "--strict"]) == 1
