"""``msprobe run_ut``: upstream flags mapped onto the plugin's pytest options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from replay_dumps import csv_pair, forward, read_csv, tensor, write_dump

import msprobe.run_ut.collect
import msprobe.run_ut.replay
import msprobe.run_ut.session
from msprobe.cli import main as msprobe_main
from msprobe.formats import accuracy_csv
from msprobe.formats.accuracy_csv import RUN_UT_DETAILS_HEADER, RUN_UT_RESULT_HEADER
from msprobe.run_ut.cli import pytest_args


def test_flags_map_to_pytest_options(tmp_path: Path) -> None:
    dump = write_dump(
        tmp_path / "d", {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], 0.0, 1.0))}
    )
    args = pytest_args(
        [
            "-api_info",
            str(dump / "dump.json"),
            "-o",
            "out",
            "-save_error_data",
            "-f",
            "-n",
            "2",
            "-device_type",
            "cpu",
            "-d",
            "1",
            "0",
        ]
    )
    assert args[:4] == ["--msprobe-dump", str(dump / "dump.json"), "--msprobe-out", "out"]
    assert "--msprobe-jit-compile" in pytest_args(["-api_info", str(dump), "-j"])
    for flag in ("--msprobe-save-error-data", "--msprobe-filter-api"):
        assert flag in args
    assert args[args.index("-n") + 1] == "2" and args[args.index("--msprobe-device") + 1] == "cpu"
    assert args[args.index("--msprobe-device-ids") + 1] == "1,0"


def test_upstream_num_splits_spelling_is_the_worker_count(tmp_path: Path) -> None:
    # 8.1.1: `msprobe -f pytorch multi_run_ut ... -n 8` or `--num_splits 8`
    dump = write_dump(
        tmp_path / "d", {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], 0.0, 1.0))}
    )
    for spelling in (["--num_splits", "2"], ["--num_splits=2"], ["-n", "2"]):
        args = pytest_args(["-api_info", str(dump / "dump.json"), *spelling])
        assert args[args.index("-n") + 1] == "2"


def test_bad_resume_name_and_missing_dump_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert msprobe_main(["run_ut", "-api_info", str(tmp_path / "nope.json"), "-o", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"msprobe: error: -api_info {tmp_path / 'nope.json'}: no such file or folder"
    )
    dump = write_dump(
        tmp_path / "d", {"Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0))}
    )
    bad = tmp_path / "result.csv"
    bad.write_text("", encoding="utf-8")
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-csv_path", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"msprobe: error: -csv_path {bad}: a resume file must be named "
        "accuracy_checking_result_<14 digits>.csv"
    )


MODULE_ONLY = {"Module.fc.Linear.forward.0": forward(tensor("torch.float32", [8], -1.0, 1.0))}


@pytest.mark.parametrize(
    ("data", "level", "why"),
    [
        ({}, "L1", "its data is empty (did the dump's scope or list match nothing?)"),
        (
            {"Torch.tanh.0.backward": {"input": [tensor("torch.float32", [8], -1.0, 1.0)], "output": [None]}},
            "L1",
            'backward records only (dumped with data_mode ["backward"]?); dump with data_mode ["all"]',
        ),
        (MODULE_ONLY, "L0", "module records only (a level L0 dump); dump at level L1 or mix to replay APIs"),
        (
            MODULE_ONLY,
            "mix",
            "module records only (a level mix dump whose scope or list kept no API forward record)",
        ),
    ],
    ids=["empty", "backward only", "L0", "mix"],
)
def test_a_dump_with_nothing_to_replay_is_one_line_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], level: str, why: str
) -> None:
    """Before: pytest's "no tests ran", exit 5, and no word on the cause."""
    dump = write_dump(tmp_path / "d", data, level=level)
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(tmp_path / "out")]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"msprobe: error: -api_info {dump}: no API forward record to replay: {why}"
    )


def test_run_ut_writes_both_csvs_and_saves_error_data(tmp_path: Path) -> None:
    data = {
        "Torch.exp.0.forward": forward(tensor("torch.float16", [64], -1.0, 12.0)),
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
    }
    dump = write_dump(tmp_path / "d", data)
    out = tmp_path / "out"
    assert (
        msprobe_main(["run_ut", "-api_info", str(dump / "dump.json"), "-o", str(out), "-save_error_data"])
        == 1
    )
    result, _ = csv_pair(out)
    assert [r[:2] for r in read_csv(result)[1:]] == [["Torch.exp.0", "error"], ["Torch.tanh.0", "pass"]]
    saved = sorted(p.name for p in next(out.glob("ut_error_data*")).iterdir())
    assert saved == [
        "Torch.exp.0.forward.input.0.pt",
        "Torch.exp.0.forward.output.bench.0.pt",
        "Torch.exp.0.forward.output.device.0.pt",
    ]


def test_error_data_that_cannot_be_written_is_one_warning_line_and_the_verdict_stands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record name whose tensor file name passes 255 bytes (or a full disk): torch.save raised inside
    the item, pytest printed its whole traceback and the item failed, though the API's verdict in the
    CSVs was its own (here error: exit 1 either way, the verdict row written)."""
    name = "Torch.exp." + "0" * 240
    dump = write_dump(tmp_path / "d", {f"{name}.forward": forward(tensor("torch.float16", [64], -1.0, 12.0))})
    out = tmp_path / "out"
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(out), "-save_error_data"]) == 1
    printed = capsys.readouterr().out
    assert "Traceback" not in printed and "serialization.py" not in printed and "enforce fail" not in printed
    assert "-save_error_data: " in printed and "cannot save (File name too long)" in printed
    assert [r[:2] for r in read_csv(csv_pair(out)[0])[1:]] == [[name, "error"]]


def test_error_data_of_several_dump_files_goes_beside_each_ones_csvs(tmp_path: Path) -> None:
    """The same API name fails in two steps of a dump root: each step's tensors are kept, in its own
    ``OUT/<step>/<rank>/ut_error_data{ts}/`` beside its CSVs (one shared folder kept only the last)."""
    for step, low in (("step0", -1.0), ("step1", -2.0)):
        data = {"Torch.exp.0.forward": forward(tensor("torch.float16", [64], low, 12.0))}
        write_dump(tmp_path / "dump" / step / "rank", data)
    out = tmp_path / "out"
    args = ["run_ut", "-api_info", str(tmp_path / "dump"), "-o", str(out), "-save_error_data"]
    assert msprobe_main(args) == 1
    assert not list(out.glob("ut_error_data*"))
    inputs = []
    for step in ("step0", "step1"):
        folder = out / step / "rank"
        assert [r[:2] for r in read_csv(csv_pair(folder)[0])[1:]] == [["Torch.exp.0", "error"]]
        (saved,) = folder.glob("ut_error_data*")
        inputs.append(torch.load(saved / "Torch.exp.0.forward.input.0.pt", weights_only=True))
    assert inputs[0].min() == -1.0 and inputs[1].min() == -2.0


def test_a_resumed_runs_error_data_goes_beside_the_csvs_it_appends_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-csv_path`` without ``-o``: the resumed APIs' rows are appended to the earlier run's CSVs, and
    their error data goes beside them (it went into the current folder, ``-o``'s default)."""
    data = {f"Torch.exp.{i}.forward": forward(tensor("torch.float16", [64], -1.0, 12.0)) for i in (0, 1)}
    dump = write_dump(tmp_path / "dump", data)
    out = tmp_path / "out"
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(out), "-save_error_data"]) == 1
    result, details = csv_pair(out)
    for csv, header in ((result, RUN_UT_RESULT_HEADER), (details, RUN_UT_DETAILS_HEADER)):
        # the run 'was killed' before Torch.exp.1 ended
        rows = accuracy_csv.read_rows(csv, header)
        accuracy_csv.write_rows(csv, header, [r for r in rows if not r[0].startswith("Torch.exp.1")])
    (saved,) = out.glob("ut_error_data*")
    for f in saved.glob("Torch.exp.1.*"):
        f.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-csv_path", str(result), "-save_error_data"]) == 1
    assert list(elsewhere.iterdir()) == []
    assert (saved / "Torch.exp.1.forward.input.0.pt").is_file()


def test_quiet_still_shows_the_reason_of_a_broken_dump(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # refused before pytest starts: one line, usage status, no output folder
    bad = tmp_path / "d" / "dump.json"
    bad.parent.mkdir()
    bad.write_text('{"task": "statistics", "data": ', encoding="utf-8")
    code = msprobe_main(["run_ut", "-api_info", str(bad), "-o", str(tmp_path / "out"), "-q"])
    assert code == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"msprobe: error: -api_info {bad}: not a dump (invalid JSON") and err.count("\n") == 1
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rank_folder", ["step0/rank", ""])
def test_a_debug_level_dump_is_named_for_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rank_folder: str
) -> None:
    """A root holding only debugger.save's debug.json was "not a dump (no dump.json, step*/rank*/ ...)"
    although its step and rank folders are there."""
    rank = tmp_path / "dump" / rank_folder
    rank.mkdir(parents=True)
    (rank / "debug.json").write_text('{"task": "statistics", "level": "debug", "data": {}}')
    code = msprobe_main(["run_ut", "-api_info", str(tmp_path / "dump"), "-o", str(tmp_path / "out")])
    assert code == 2
    assert capsys.readouterr().err == (
        f"msprobe: error: -api_info {tmp_path / 'dump'}: a dump of level debug (debugger.save's debug.json), "
        "not an API dump: nothing to replay\n"
    )


def test_quiet_has_no_accuracy_warning_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a device one bf16 ulp off everywhere: a Warning verdict on any CPU (see test_replay_plugin)
    def one_ulp_high(item: Any, function: Any) -> Any:
        def device(*args: Any, **kwargs: Any) -> Any:
            out = function(*args, **kwargs)
            return torch.nextafter(out, torch.tensor(float("inf"), dtype=out.dtype))

        return device

    monkeypatch.setattr(msprobe.run_ut.collect.ApiItem, "_device_function", one_ulp_high)
    data = {"Torch.erf.0.forward": forward(tensor("torch.bfloat16", [4096], 0.33, 0.47))}
    dump = write_dump(tmp_path / "d", data)
    out = tmp_path / "out"
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert read_csv(csv_pair(out)[0])[1][1] == "Warning"
    assert "(1 Warning)" in text  # the result line of the terminal summary counts it
    assert "AccuracyWarning" not in text and "warnings summary" not in text


def test_quiet_prints_one_line_per_failing_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = {
        "Torch.exp.0.forward": forward(tensor("torch.float16", [64], -1.0, 12.0)),
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
    }
    dump = write_dump(tmp_path / "d", data)
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(tmp_path / "out"), "-q"]) == 1
    lines = capsys.readouterr().out.splitlines()
    failing = [line for line in lines if "Torch.exp.0" in line]
    assert len(failing) == 1, lines
    assert failing[0].startswith("dump.json:0: Torch.exp.0.forward.output.0: cosine similarity")
    assert "Torch.tanh.0" not in "\n".join(lines)


def test_folder_without_a_dump_names_the_option_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code = msprobe_main(["run_ut", "-api_info", str(empty), "-o", str(tmp_path / "out"), "-q"])
    assert code == 2
    captured = capsys.readouterr()
    lines = [line for line in (captured.err + captured.out).splitlines() if line.strip()]
    assert lines == [
        f"msprobe: error: -api_info {empty}: not a dump (no dump.json, step*/rank*/ or proc*/ folders)"
    ]
    assert not (tmp_path / "out").exists()


def test_quiet_summary_counts_broken_records_as_pytest_fails_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {
        "Torch.exp.0.forward": {"input_args": {"not": "a list"}, "input_kwargs": {}, "output": []},
        "=HYPERLINK.x.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
        "Torch.cos.0.forward": forward(tensor("torch.float8_e4m3fn", [8], -1.0, 1.0)),
        "Torch.exp.1.forward": forward(tensor("torch.float16", [64], -1.0, 12.0)),
    }
    dump = write_dump(tmp_path / "d", data)
    out = tmp_path / "out"
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(out), "-q"]) == 1
    lines = capsys.readouterr().out.splitlines()
    result, _ = csv_pair(out)
    assert f"msprobe: {result} (1 SKIP, 2 broken record, 1 error, 1 pass)" in lines, lines
    assert lines[0].split()[0] == "FF.sF"  # pytest: 3 failed = 1 error + 2 broken records
    assert [r[:2] for r in read_csv(result)[1:]] == [
        ["Torch.exp.0", "SKIP"],
        ["Torch.tanh.0", "pass"],
        ["Torch.cos.0", "SKIP"],
        ["Torch.exp.1", "error"],
    ]


def test_csv_path_takes_the_output_folder_of_a_multi_folder_dump(tmp_path: Path) -> None:
    """A dump of several steps or ranks writes one CSV pair per rank folder: ``-csv_path`` names the
    earlier ``-o`` folder to resume them all (the plugin's ``--msprobe-resume`` takes either)."""
    spec = forward(tensor("torch.float32", [4], 0.0, 1.0))
    for step in ("step0", "step1"):
        write_dump(tmp_path / "dump" / step / "rank", {"Torch.exp.0.forward": spec})
    out = tmp_path / "out"
    out.mkdir()  # the earlier run's
    args = pytest_args(["-api_info", str(tmp_path / "dump"), "-o", str(out), "-csv_path", str(out)])
    assert args[args.index("--msprobe-resume") + 1] == str(out)


def test_odd_paths_replay_or_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dump.json reached through a symlinked folder was 'not found' by pytest (the collector named it
    by its resolved path); a quoted ``~/out`` was checked as $HOME/out but written to ./~/out; a path
    component over 255 bytes was a traceback."""
    dump = write_dump(
        tmp_path / "real", {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], 0.0, 1.0))}
    )
    (tmp_path / "link").symlink_to(dump, target_is_directory=True)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert (
        msprobe_main(["run_ut", "-api_info", str(tmp_path / "link" / "dump.json"), "-o", "~/out", "-q"]) == 0
    )
    assert not (tmp_path / "~").exists()
    result, _ = csv_pair(home / "out")
    assert [row[0] for row in read_csv(result)[1:]] == ["Torch.exp.0"]
    capsys.readouterr()
    too_long = tmp_path / ("x" * 300) / "dump.json"
    assert msprobe_main(["run_ut", "-api_info", str(too_long)]) == 2
    assert capsys.readouterr().err.startswith(f"msprobe: error: -api_info {too_long}: ")
    long_resume = tmp_path / ("x" * 300) / "accuracy_checking_result_20260101000000.csv"
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-csv_path", str(long_resume)]) == 2
    assert capsys.readouterr().err.startswith(f"msprobe: error: -csv_path {long_resume}: ")


def test_rank_folders_linked_from_elsewhere_replay_into_their_place(tmp_path: Path) -> None:
    """A dump root whose rank folders are links to folders elsewhere was an INTERNALERROR (the output
    folder was computed from the resolved path, outside the root)."""
    root = tmp_path / "root"
    root.mkdir()
    for rank in ("rank0", "rank1"):
        real = write_dump(
            tmp_path / "elsewhere" / rank,
            {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], 0.0, 1.0))},
        )
        (root / rank).symlink_to(real, target_is_directory=True)
    out = tmp_path / "out"
    assert msprobe_main(["run_ut", "-api_info", str(root), "-o", str(out), "-q"]) == 0
    assert sorted(str(p.parent.relative_to(out)) for p in out.rglob("accuracy_checking_result_*")) == [
        "rank0",
        "rank1",
    ]


def test_each_dump_json_is_decoded_once_checked_and_once_collected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start-up decoded every dump.json up to four times (the command line's check, the session's
    check, the writers' order, the collection): seconds each for a big dump."""
    from msprobe.formats import dump_json

    decoded: list[Path] = []
    read = dump_json.read_dump_json

    def counting(path: Path) -> Any:
        decoded.append(Path(path).resolve())
        return read(path)

    monkeypatch.setattr(dump_json, "read_dump_json", counting)
    root = tmp_path / "root"
    for rank in ("rank0", "rank1"):
        write_dump(root / rank, {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], 0.0, 1.0))})
    assert msprobe_main(["run_ut", "-api_info", str(root), "-o", str(tmp_path / "out"), "-q"]) == 0
    files = sorted((root / rank / "dump.json").resolve() for rank in ("rank0", "rank1"))
    assert sorted(decoded) == sorted(files * 2)


def test_a_rank_whose_dump_json_links_to_a_file_elsewhere_is_replayed(tmp_path: Path) -> None:
    """The rank was found and given a result file, but its dump.json (a link leading out of the root)
    was never collected: "(no APIs run)", exit 0."""
    record = {"Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0))}
    write_dump(tmp_path / "elsewhere", record)
    write_dump(tmp_path / "root" / "rank1", record)
    (tmp_path / "root" / "rank0").mkdir()
    (tmp_path / "root" / "rank0" / "dump.json").symlink_to(tmp_path / "elsewhere" / "dump.json")
    out = tmp_path / "out"
    assert msprobe_main(["run_ut", "-api_info", str(tmp_path / "root"), "-o", str(out), "-q"]) == 0
    for rank in ("rank0", "rank1"):
        result, _ = csv_pair(out / rank)
        assert [r[:2] for r in read_csv(result)[1:]] == [["Torch.tanh.0", "pass"]]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_rank_whose_dump_json_is_not_a_dump_fails_alone_and_the_others_replay(
    tmp_path: Path, workers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken rank before the first good one refused the whole run, one after it stopped the run at
    collection without -n (exit 2, nothing replayed) and not with -n 2: now each is one collection
    error, the other ranks replay, and the run exits 1 whatever -n."""
    record = {"Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0))}
    root = tmp_path / "root"
    for rank in ("rank0", "rank2"):
        (root / rank).mkdir(parents=True)
        (root / rank / "dump.json").write_text("{ not json", encoding="utf-8")
    write_dump(root / "rank1", record)
    out = tmp_path / "out"
    code = msprobe_main(["run_ut", "-api_info", str(root), "-o", str(out), "-q", "-n", workers])
    assert code == 1
    result, _ = csv_pair(out / "rank1")
    assert [r[:2] for r in read_csv(result)[1:]] == [["Torch.tanh.0", "pass"]]
    printed = capsys.readouterr().out
    assert "rank0/dump.json" in printed and "rank2/dump.json" in printed


def _run_ut(dump: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "msprobe", "run_ut", "-api_info", str(dump), "-o", "out"]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


PLANTED_FAULT = (
    "import pathlib\n"
    "pathlib.Path(__file__).with_name('imported').touch()\n"
    "def pytest_msprobe_device_function(api_type, bare_name, function):\n"
    "    if (api_type, bare_name) == ('Torch', 'exp'):\n"
    "        return lambda x: function(x) * 1.5\n"
)


@pytest.mark.parametrize("conftest_in", ["project", "."], ids=["current folder", "folder above it"])
def test_run_ut_loads_the_projects_conftest_as_the_pytest_form_does(tmp_path: Path, conftest_in: str) -> None:
    """``msprobe run_ut`` set the dump as pytest's rootdir, and with no ini file that is also where
    pytest stops looking for conftest.py files: the project's own conftest (its
    ``pytest_msprobe_device_function`` or ``pytest_msprobe_api_info``) was silently not loaded."""
    project = tmp_path / "project"
    dump = write_dump(
        project / "d", {"Torch.exp.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0))}
    )
    (tmp_path / conftest_in / "conftest.py").write_text(PLANTED_FAULT, encoding="utf-8")
    done = _run_ut(dump, project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert read_csv(csv_pair(project / "out")[0])[1][:2] == ["Torch.exp.0", "error"]


def test_run_ut_never_loads_a_conftest_above_a_dump_outside_the_current_folder(tmp_path: Path) -> None:
    """The folders above a dump elsewhere (``/data/dumps/...``) are not the project's: no conftest.py
    of theirs is imported."""
    dump = write_dump(
        tmp_path / "data" / "d", {"Torch.exp.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0))}
    )
    (tmp_path / "data" / "conftest.py").write_text(PLANTED_FAULT, encoding="utf-8")
    (tmp_path / "project").mkdir()
    done = _run_ut(dump, tmp_path / "project")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "data" / "imported").exists()


def test_csv_path_of_one_result_file_with_a_multi_folder_dump_names_the_flags_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal came from the plugin, naming ``--msprobe-resume=`` and ``--msprobe-out`` (flags the
    user never typed), as ``ERROR:`` with exit status 4."""
    spec = forward(tensor("torch.float32", [4], 0.0, 1.0))
    for step in ("step0", "step1"):
        write_dump(tmp_path / "dump" / step / "rank", {"Torch.exp.0.forward": spec})
    out = tmp_path / "out"
    argv = ["run_ut", "-api_info", str(tmp_path / "dump"), "-o", str(out), "-device_type", "cpu", "-q"]
    assert msprobe_main(argv) == 0
    result = next((out / "step0" / "rank").glob("accuracy_checking_result_*.csv"))
    capsys.readouterr()
    assert msprobe_main([*argv, "-csv_path", str(result)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"msprobe: error: -csv_path {result}: a result file resumes one dump.json, but -api_info "
        f"{tmp_path / 'dump'} holds 2; pass the earlier -o folder instead"
    )


def test_a_node_id_into_a_dump_elsewhere_says_the_current_folders_conftest_is_not_loaded(
    tmp_path: Path,
) -> None:
    """pytest anchors its conftest search at the paths given: a node id into a dump outside the current
    folder leaves the project's conftest.py unloaded, and a planted fault (or the project's own kernel)
    silently unused."""
    dump = write_dump(
        tmp_path / "data" / "d", {"Torch.exp.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0))}
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(PLANTED_FAULT, encoding="utf-8")
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    base += [f"--msprobe-dump={dump}", "--msprobe-out=out"]

    def run(*select: str) -> str:
        done = subprocess.run([*base, *select], cwd=project, capture_output=True, text=True)
        return done.stdout + done.stderr

    said = f"msprobe: warning: {project / 'conftest.py'} was not loaded"
    assert said in run(f"{dump / 'dump.json'}::Torch.exp.0")
    assert said not in run("-k", "exp")  # anchored at the current folder: loaded, and it answers
