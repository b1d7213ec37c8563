"""``msprobe-compare`` / ``msprobe compare`` / ``msprobe api_precision_compare`` command lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe import cli as msprobe_cli
from msprobe.compare import cli
from msprobe.formats import accuracy_csv as ac

DATA = Path(__file__).parents[1] / "data" / "compare" / "upstream_v811_cnn"
DETAILS = DATA / "accuracy_checking_details_20261201061155.csv"


def test_compare_prints_counts_and_every_path_written(tmp_path, capsys):
    rc = cli.main(["-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", str(tmp_path / "out")])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert lines[0] == "compared 41 output rows of 20 APIs: 20 pass"  # a file against itself
    written = [Path(x.removeprefix("wrote ")) for x in lines[1:]]
    assert len(written) == 4 and all(p.is_file() for p in written)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in written)


def _exact_gpu(tmp_path: Path) -> Path:
    """The fixture with the GPU exact where the NPU's absolute-threshold rates are not 0."""
    rows = ac.read_rows(DETAILS, ac.RUN_UT_DETAILS_HEADER)
    rates = [ac.RUN_UT_DETAILS_HEADER.index(c) for c in ("inf/nan错误率", "相对误差错误率", "绝对误差错误率")]
    for r in rows:
        if r[0].startswith("Tensor.add_."):
            for i in rates:
                r[i] = "0"
    gpu = tmp_path / "gpu.csv"
    ac.write_text_rows(gpu, ac.RUN_UT_DETAILS_HEADER, rows)
    return gpu


def test_strict_exits_1_when_an_api_fails(tmp_path, capsys):
    argv = ["-npu", str(DETAILS), "-gpu", str(_exact_gpu(tmp_path)), "-o", str(tmp_path / "out")]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0] == "compared 41 output rows of 20 APIs: 2 error, 18 pass"
    assert cli.main([*argv[:-1], str(tmp_path / "strict"), "--strict"]) == 1


@pytest.mark.parametrize("name", ["compare", "api_precision_compare"])
def test_msprobe_subcommands_take_upstreams_long_flags(tmp_path, name):
    argv = [name, "--npu_csv_path", str(DETAILS), "--gpu_csv_path", str(DETAILS), "--out_path", str(tmp_path)]
    assert msprobe_cli.main(argv) == 0
    assert len(list(tmp_path.glob("api_precision_compare_result_*.csv"))) == 1


def test_a_wrong_file_is_one_line_on_stderr_and_exit_2(tmp_path, capsys):
    result = next(DATA.glob("api_precision_compare_result_*.csv"))
    rc = cli.main(["-npu", str(result), "-gpu", str(DETAILS), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith(f"msprobe: error: {result}: not the expected CSV (")
    assert not (tmp_path / "out").exists()


def test_missing_flag_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        cli.main(["-npu", str(DETAILS)])
    assert exc.value.code == 2


@pytest.mark.slow
def test_console_script_runs(tmp_path):
    exe = Path(sys.executable).with_name("msprobe-compare")
    if not exe.exists():
        pytest.skip("console script not installed in this environment")
    proc = subprocess.run(
        [str(exe), "-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert proc.returncode == 0, proc.stderr
    result = next(tmp_path.glob("api_precision_compare_result_*.csv"))
    upstream = ac.read_rows(next(DATA.glob("api_precision_compare_result_*.csv")), ac.COMPARE_RESULT_HEADER)
    changed = {"Tensor.add_.5", "Tensor.add_.7"}  # upstream's compare(X, X) errors: pass here
    ours = ac.read_rows(result, ac.COMPARE_RESULT_HEADER)
    assert [r for r in ours if r[0] not in changed] == [r for r in upstream if r[0] not in changed]
    assert ac.read_rows(result, ac.COMPARE_RESULT_HEADER)[0][0] == "Functional.conv2d.0"


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "msprobe.compare.cli", "-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", "OUT"],
        ["-m", "msprobe.compare.cli", "--help"],
        ["-m", "msprobe", "compare", "-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", "OUT"],
        ["-m", "msprobe", "--help"],
    ],
)
def test_a_closed_stdout_ends_quietly(tmp_path, argv):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # like `| head -0`: the reader is gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141), err  # argparse's --help ignores a failed write itself
    assert err == ""


def test_a_cut_details_file_is_one_line_error(tmp_path, capsys):
    cut = tmp_path / "t.csv"
    cut.write_bytes(DETAILS.read_bytes()[:3000])  # head -c 3000 details.csv > t.csv
    assert cli.main(["-npu", str(cut), "-gpu", str(DETAILS), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"msprobe: error: {cut}:") and "cells, the header has 23" in err
    assert "\n" not in err and not (tmp_path / "out").exists()


def test_a_dump_that_is_a_file_or_missing_names_the_option(tmp_path, capsys):
    afile = tmp_path / "afile.txt"
    afile.write_text("x", encoding="utf-8")
    argv = ["-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", str(tmp_path / "out"), "--dump"]
    assert cli.main([*argv, str(afile)]) == 2
    assert capsys.readouterr().err == f"msprobe: error: --dump {afile}: not a folder\n"
    nowhere = tmp_path / "nowhere"
    assert cli.main([*argv, str(nowhere)]) == 2
    assert capsys.readouterr().err == f"msprobe: error: --dump {nowhere}: no such file or folder\n"
    assert not (tmp_path / "out").exists()


def test_a_replay_output_folder_stands_for_its_newest_details_file(tmp_path, capsys):
    """A rerun into one folder adds a details CSV per run (a shell glob then names several files):
    the folder names its newest, said on stderr; a folder without one is a one-line error."""
    import shutil

    npu = tmp_path / "npu_out"
    npu.mkdir()
    shutil.copy(DETAILS, npu / "accuracy_checking_details_20260101000000.csv")
    (npu / "accuracy_checking_details_20260202000000.csv").write_text(
        "not the newest run's", encoding="utf-8"
    )
    shutil.copy(DETAILS, npu / "accuracy_checking_details_20270101000000.csv")
    (npu / "accuracy_checking_result_20270101000000.csv").write_text("", encoding="utf-8")
    rc = cli.main(["-npu", str(npu), "-gpu", str(DETAILS), "-o", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert f"-npu {npu}: accuracy_checking_details_20270101000000.csv, the newest of 3" in captured.err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["-npu", str(empty), "-gpu", str(DETAILS), "-o", str(tmp_path / "out2")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith("no accuracy_checking_details_<14 digits>.csv in this folder")


def test_a_replay_root_folder_points_at_its_step_and_rank_folders(tmp_path, capsys):
    """A replay of a dump root writes one pair per dump file in OUT/<step>/<rank>/: given OUT, compare
    said only that OUT holds no details file."""
    import shutil

    out = tmp_path / "npu_out"
    for sub in ("step0/rank10", "step0/rank2", "step1/rank0", "step0/rank0"):
        (out / sub).mkdir(parents=True)
        shutil.copy(DETAILS, out / sub / "accuracy_checking_details_20260101000000.csv")
    assert cli.main(["-npu", str(out), "-gpu", str(DETAILS), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith(
        "no accuracy_checking_details_<14 digits>.csv in this folder; a replay of a dump root writes one "
        "pair per dump file, here in step0/rank0, step0/rank2, step0/rank10 (and 1 more): compare one of "
        "those folders at a time"
    ), err


def test_a_quoted_tilde_and_a_too_long_name(tmp_path, monkeypatch, capsys):
    """``-o '~/c'`` was checked as $HOME/c (created, empty) and written to ./~/c; a path component over
    255 bytes was a traceback."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", "~/c"]) == 0
    assert not (tmp_path / "~").exists() and len(list((home / "c").glob("api_precision_compare_*"))) == 4
    capsys.readouterr()
    too_long = tmp_path / ("x" * 300) / "d.csv"
    assert cli.main(["-npu", str(too_long), "-gpu", str(DETAILS), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"msprobe: error: -npu {too_long}: ") and "Traceback" not in err


def test_replays_of_different_step_or_rank_folders_are_said_first(tmp_path, capsys):
    """run_ut writes ``OUT/<step>/<rank>/`` for a dump root; every rank's APIs have the same names, so
    ``-npu npu_out/step0/rank0 -gpu gpu_out/step1/rank1`` compared different inputs without a word."""
    for side, folder in (("npu", "step0/rank0"), ("gpu", "step1/rank1"), ("gpu", "step0/rank0")):
        (tmp_path / side / folder).mkdir(parents=True)
        (tmp_path / side / folder / DETAILS.name).write_bytes(DETAILS.read_bytes())
    argv = ["-npu", str(tmp_path / "npu/step0/rank0"), "-o", str(tmp_path / "out"), "--strict"]
    assert cli.main([*argv, "-gpu", str(tmp_path / "gpu/step1/rank1")]) == 1
    err = capsys.readouterr().err
    assert "is the replay of step0/rank0" in err and "of step1/rank1: different dump files" in err
    assert cli.main([*argv, "-gpu", str(tmp_path / "gpu/step0/rank0")]) == 0
    assert capsys.readouterr().err == ""
    assert cli.main([*argv, "-gpu", str(DETAILS)]) == 0  # a CSV outside any step/rank folder: not checked


def test_replays_of_one_dump_file_from_a_root_and_a_step_folder_are_not_said_different(tmp_path, capsys):
    """``-api_info dump`` writes OUT/step0/rank0/, ``-api_info dump/step0`` OUT/rank0/ and a user's own
    ``-o out/step0`` (one rank folder replayed) OUT/step0/: the same dump file, yet said to be different
    ones (and --strict exited 1)."""
    for side, folder in (("npu", "step0/rank0"), ("gpu", "rank0"), ("own", "step0"), ("far", "rank1")):
        (tmp_path / side / folder).mkdir(parents=True)
        (tmp_path / side / folder / DETAILS.name).write_bytes(DETAILS.read_bytes())
    argv = ["-npu", str(tmp_path / "npu/step0/rank0"), "-o", str(tmp_path / "out"), "--strict"]
    for gpu in ("gpu/rank0", "own/step0"):
        assert cli.main([*argv, "-gpu", str(tmp_path / gpu)]) == 0
        assert capsys.readouterr().err == ""
    assert cli.main([*argv, "-gpu", str(tmp_path / "far/rank1")]) == 1  # another rank: still said
    assert "different dump files" in capsys.readouterr().err


def test_strict_exits_1_when_an_api_was_compared_on_one_side_only(tmp_path, capsys):
    """A replay cut short or run with -k leaves the other side's APIs ``missing``: nothing was compared
    for them, yet --strict passed the gate."""
    rows = ac.read_rows(DETAILS, ac.RUN_UT_DETAILS_HEADER)
    cut = tmp_path / "npu.csv"
    kept = [r for r in rows if not r[0].startswith("Tensor.add_.")]
    ac.write_text_rows(cut, ac.RUN_UT_DETAILS_HEADER, kept)
    gpu = _exact_gpu(tmp_path)
    argv = ["-npu", str(cut), "-gpu", str(gpu), "--strict"]
    assert cli.main([*argv, "-o", str(tmp_path / "cut")]) == 1
    assert " missing" in capsys.readouterr().out.splitlines()[0]
    assert cli.main(["-npu", str(gpu), "-gpu", str(gpu), "--strict", "-o", str(tmp_path / "whole")]) == 0


@pytest.mark.parametrize(
    "flag", [["-i", "compare.json"], ["--input_path", "compare.json"], ["--input_path=c.json"]]
)
def test_upstream_dump_compare_spelling_is_named_in_one_line(flag, tmp_path, capsys):
    # 8.1.1's `msprobe -f pytorch compare -i compare.json -o out` is its dump compare, not this one
    rc = msprobe_cli.main(["-f", "pytorch", "compare", *flag, "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"msprobe: error: {flag[0].split('=')[0]}: 8.1.1's dump compare")
    assert err.count("\n") == 1 and "-npu NPU_DETAILS -gpu GPU_DETAILS" in err
