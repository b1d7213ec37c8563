"""Inputs that are not one run's pair of details files: different runs, a missing column, an empty file.

Each is said in one line naming the file and the problem (no traceback); different runs are compared
anyway, said first, fail ``--strict``, and outputs whose shapes differ get their own ``mismatch`` status.
"""

from __future__ import annotations

import csv

import pandas as pd
import pytest
from compare_rows import HEADER, detail, pair, result_list, row, write

from msprobe.compare import cli
from msprobe.compare.merge import different_runs, merge
from msprobe.compare.table import from_frame
from msprobe.compare.verdicts import MISMATCH
from msprobe.formats import accuracy_csv as ac

F, B = "forward.output", "backward.output"


def _model(prefix: str, n: int, shape: str) -> list[list[str]]:
    return [row(f"Functional.{prefix}.{i}.{F}.0", shape=shape) for i in range(n)]


def test_outputs_whose_shapes_differ_are_not_compared(tmp_path):
    npu = [row(f"Torch.a.0.{F}.0", shape="(2, 3)"), row(f"Torch.a.0.{B}.0")]
    gpu = [row(f"Torch.a.0.{F}.0", shape="(4,)", cells={"均方根误差": "1e-9"}), row(f"Torch.a.0.{B}.0")]
    a = pair(tmp_path, npu, gpu)
    d = detail(a, f"Torch.a.0.{F}.0")
    assert d["比对结果"] == MISMATCH and d["比对算法"] == " " and d["均方根误差比值"] == " "
    assert d["Message"].startswith("mismatch: shapes differ (NPU (2, 3), GPU (4,)), not compared")
    assert detail(a, f"Torch.a.0.{B}.0")["比对结果"] == "pass"
    assert result_list(a) == [
        [
            "Torch.a.0",
            MISMATCH,
            "pass",
            "1 output row(s) whose shapes differ between NPU and GPU (not compared).",
        ]
    ]
    assert a.different_runs == "1 of 2 paired outputs differ in shape"


def test_one_run_is_not_called_different(tmp_path):
    rows = _model("linear", 30, "(2, 3)")
    assert pair(tmp_path, rows, rows[:20]).warning() == ""  # the GPU run stopped early: still one run


@pytest.mark.parametrize(
    ("gpu", "reason"),
    [
        (_model("conv2d", 30, "(2, 3)") + _model("linear", 3, "(2, 3)"),
         "only 3 of 30 NPU and 33 GPU output names are in both files"),
        (_model("linear", 30, "(8, 3)"), "30 of 30 paired outputs differ in shape"),
    ],
)  # fmt: skip
def test_different_runs_are_said_first_and_fail_strict(tmp_path, capsys, gpu, reason):
    npu_csv = write(tmp_path / "npu.csv", _model("linear", 30, "(2, 3)"))
    gpu_csv = write(tmp_path / "gpu.csv", gpu)
    out = tmp_path / "out"
    assert cli.main(["-npu", str(npu_csv), "-gpu", str(gpu_csv), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    warning = f"msprobe: warning: {npu_csv} and {gpu_csv} look like details of different runs: {reason}"
    assert captured.err == warning + "\n"
    assert captured.out.startswith("compared ")
    html = next(out.glob("*.html")).read_text(encoding="utf-8")
    md = next(out.glob("*.md")).read_text(encoding="utf-8")
    assert html.index(reason) < html.index("<h2>Summary</h2>")
    assert (
        md.splitlines()[2]
        == f"**Warning: {npu_csv} and {gpu_csv} look like details of different runs: {reason}**"
    )
    assert (
        cli.main(["-npu", str(npu_csv), "-gpu", str(gpu_csv), "-o", str(tmp_path / "strict"), "--strict"])
        == 1
    )


def test_merged_table_of_a_file_with_itself_is_one_run():
    t = from_frame(pd.DataFrame(_model("linear", 5, "(2, 3)"), columns=list(HEADER), dtype=object))
    assert different_runs(merge(t, t)) == ""


def _one_line_error(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize(
    ("drop", "add", "problem"),
    [
        (("Shape",), (), "missing column(s) 'Shape'"),
        (("双千指标", "Message"), (), "missing column(s) '双千指标', 'Message'"),
        ((), ("extra",), "unexpected column(s) 'extra'"),
        (("Status",), ("status",), "missing column(s) 'Status'; unexpected column(s) 'status'"),
    ],
)
def test_a_missing_column_is_named(tmp_path, capsys, drop, add, problem):
    good = write(tmp_path / "good.csv", [row(f"Torch.a.0.{F}.0")])
    columns = [c for c in HEADER if c not in drop] + list(add)
    bad = tmp_path / "bad.csv"
    with open(bad, "w", encoding="utf-8-sig", newline="") as fh:
        csv.writer(fh).writerow(columns)
        csv.writer(fh).writerow(["x"] * len(columns))
    err = _one_line_error(capsys, ["-npu", str(good), "-gpu", str(bad), "-o", str(tmp_path / "out")])
    assert err == f"msprobe: error: {bad}: not a complete accuracy_checking_details CSV: {problem}"
    assert not (tmp_path / "out").exists()


def test_columns_in_another_order_are_said(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    ac.write_rows(bad, [HEADER[0], *reversed(HEADER[1:])], [])
    err = _one_line_error(capsys, ["-npu", str(bad), "-gpu", str(bad), "-o", str(tmp_path / "out")])
    assert err.endswith(
        f"{bad}: not a complete accuracy_checking_details CSV: its columns are in another order"
    )


def test_an_empty_file_is_one_line(tmp_path, capsys):
    good = write(tmp_path / "good.csv", [row(f"Torch.a.0.{F}.0")])
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    err = _one_line_error(capsys, ["-npu", str(empty), "-gpu", str(good), "-o", str(tmp_path / "out")])
    assert err.startswith(f"msprobe: error: {empty}: empty file, expected a CSV with header 'API Name'")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("empty_side", ["npu", "gpu"])
def test_a_header_only_file_is_said_first_and_fails_strict(tmp_path, capsys, empty_side):
    """A details file with no rows (replay stopped before its first API, or a -k that matched nothing)."""
    full = write(tmp_path / "full.csv", _model("linear", 30, "(2, 3)"))
    empty = write(tmp_path / "header_only.csv", [])
    npu_csv, gpu_csv = (empty, full) if empty_side == "npu" else (full, empty)
    other = "GPU" if empty_side == "npu" else "NPU"
    out = tmp_path / "out"
    assert cli.main(["-npu", str(npu_csv), "-gpu", str(gpu_csv), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    warning = (
        f"msprobe: warning: {empty}: no output rows, only the header (was run_ut stopped before its "
        f"first API, or did -k match nothing?): nothing to pair with, all 30 {other} output rows are missing"
    )
    assert captured.err == warning + "\n"
    assert captured.out.startswith("compared 30 output rows of 30 APIs: 30 missing\n")
    md = next(out.glob("*.md")).read_text(encoding="utf-8")
    assert md.splitlines()[2] == f"**Warning: {warning.removeprefix('msprobe: warning: ')}**"
    argv = ["-npu", str(npu_csv), "-gpu", str(gpu_csv), "-o", str(tmp_path / "strict"), "--strict"]
    assert cli.main(argv) == 1


def test_two_header_only_files_are_said_and_fail_strict(tmp_path, capsys):
    npu_csv = write(tmp_path / "npu.csv", [])
    gpu_csv = write(tmp_path / "gpu.csv", [])
    argv = ["-npu", str(npu_csv), "-gpu", str(gpu_csv), "-o", str(tmp_path / "out")]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"msprobe: warning: {npu_csv} and {gpu_csv}: no output rows, only the header (was run_ut stopped "
        "before its first API, or did -k match nothing?): nothing compared\n"
    )
    assert captured.out.splitlines()[0] == "compared 0 output rows of 0 APIs"
    assert cli.main([*argv[:-1], str(tmp_path / "strict"), "--strict"]) == 1


@pytest.mark.parametrize("side", ["-npu", "-gpu"])
@pytest.mark.parametrize(
    "name",
    [
        '=HYPERLINK("http://x")',
        "+cmd|' /C calc'!A0",
        "-2+3",
        "@SUM(A1)",
        "%0A",
        "＝1+1",
        "\t=1+1",
        "\r=1+1",
        f"Torch.a;=1+1.0.{F}.0",
        f"Torch.a;\t=1+1.0.{F}.0",  # a cell after ';' (a ';'-separated locale) starting with a TAB
        f"Torch.a;\r=1+1.0.{F}.0",
    ],
)
def test_a_formula_api_name_is_refused_naming_file_and_line(tmp_path, capsys, side, name):
    """run_ut never writes such a name (it refuses to replay it); compare never copies one into its CSVs."""
    rows = [row(f"Torch.a.0.{F}.0", message="\nspans\nlines\n"), row(name), row(f"Torch.b.0.{F}.0")]
    good = write(tmp_path / "good.csv", rows[:1])
    bad = write(tmp_path / "bad.csv", rows)
    argv = {"-npu": str(good), "-gpu": str(good), side: str(bad)}
    out = tmp_path / "out"
    err = _one_line_error(capsys, [*(x for kv in argv.items() for x in kv), "-o", str(out)])
    assert err == (
        f"msprobe: error: {bad}:6: API Name {name!r} looks like a spreadsheet formula; "
        "refusing to compare it or write it into a CSV"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "name", [f"Torch.exp\x1b[2J.0.{F}.0", f"Torch.exp\n5 passed\n.0.{F}.0", f"Torch.a\x00.0.{F}.0"]
)
def test_an_api_name_with_a_control_character_is_refused(tmp_path, capsys, name):
    """No dump makes such a name; printed raw it would drive the terminal or split a row."""
    bad = write(tmp_path / "bad.csv", [row(f"Torch.a.0.{F}.0"), row(name)])
    err = _one_line_error(capsys, ["-npu", str(bad), "-gpu", str(bad), "-o", str(tmp_path / "out")])
    assert err.endswith(
        f"API Name {name!r} holds a control character; refusing to compare it or write it into a CSV"
    )
    assert "\x1b" not in err


def test_every_formula_row_is_counted(tmp_path, capsys):
    bad = write(tmp_path / "bad.csv", [row(f"Torch.a.0.{F}.0"), row("=1"), row("=2"), row("@3")])
    err = _one_line_error(capsys, ["-npu", str(bad), "-gpu", str(bad), "-o", str(tmp_path / "out")])
    assert err.endswith(f"{bad}:3: API Name '=1' looks like a spreadsheet formula; refusing to compare it or "
                        "write it into a CSV (and 2 more such rows)")  # fmt: skip


def test_real_names_and_negative_numbers_are_not_formulas(tmp_path):
    """Names as dumps make them (a prefix first), '-' inside a name, and negative metric values."""
    names = [
        f"Tensor.__neg__.0.{F}.0",
        f"Tensor.__rsub__.0.{B}.0",
        f"Torch.sub.0.{F}.0",
        f"Functional.my-op+1.0.{F}.0",
        f"NPU.npu_fusion_attention.0.{F}.0",
    ]
    rows = [row(n, cells={"误差均衡性": "-0.5", "ULP误差平均值": "-inf"}) for n in names]
    a = pair(tmp_path, rows)
    assert a.details["API Name"].tolist() == names
    assert a.warning() == ""
