"""Every entry point answers a user's path mistake in one line, in the terms the user typed.

The entry points: ``msprobe run_ut``, ``msprobe demo``, ``pytest --msprobe-dump/--msprobe-out``,
``msprobe-compare`` and ``msprobe rebuild``. The mistakes: an output path that is a file or cannot be
created, a missing dump, a wrong rank folder (the ones that exist are suggested), a crashed dump
(``msprobe rebuild`` is suggested). Missing extras are simulated with ``None`` in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe.cli import main as msprobe_main
from msprobe.compare import cli as compare_cli
from msprobe.dump.journal import JOURNAL_NAME, data_line
from msprobe.errors import MsprobeError
from msprobe.extras import NEEDS, require
from msprobe.paths import dump_input, missing, output_dir

FIXTURE = Path(__file__).parent / "data" / "compare" / "upstream_v811_cnn"
DETAILS = next(FIXTURE.glob("accuracy_checking_details_*.csv"))


def write_dump(folder: Path, *, crashed: bool = False) -> Path:
    """A rank folder holding a dump.json of one record; with ``crashed``, also a journal, as a killed
    dump leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    x = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": 1.0, "Min": -1.0}
    data = {"Torch.tanh.0.forward": {"input_args": [x], "input_kwargs": {}, "output": [x]}}
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    (folder / "dump.json").write_text(json.dumps(doc), encoding="utf-8")
    if crashed:  # the journal was written after dump.json's skeleton
        (folder / JOURNAL_NAME).write_text("", encoding="utf-8")
        stamp = (folder / JOURNAL_NAME).stat().st_mtime_ns
        os.utime(folder / "dump.json", ns=(stamp - 10**9, stamp - 10**9))
    return folder


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "INTERNALERROR" not in err
    return lines[0]


@pytest.fixture
def afile(tmp_path: Path) -> Path:
    path = tmp_path / "out.txt"
    path.write_text("not a folder", encoding="utf-8")
    return path


# ---------------------------------------------------------------- an output path that is a file
def test_run_ut_output_is_a_file(tmp_path: Path, afile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = write_dump(tmp_path / "dump_path" / "step0" / "rank")
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(afile)]) == 2
    assert one_line(capsys.readouterr().err) == f"msprobe: error: -o {afile}: an existing file, not a folder"


def test_demo_output_is_a_file_or_cannot_be_created(afile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert msprobe_main(["demo", "--out", str(afile)]) == 2
    assert (
        one_line(capsys.readouterr().err) == f"msprobe: error: --out {afile}: an existing file, not a folder"
    )
    assert msprobe_main(["demo", f"--out={afile}/sub"]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"msprobe: error: --out {afile}/sub: cannot create the folder ("), line


def test_compare_output_is_a_file(afile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare_cli.main(["-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", str(afile)]) == 2
    assert one_line(capsys.readouterr().err) == f"msprobe: error: -o {afile}: an existing file, not a folder"


def test_compare_output_check_creates_nothing(tmp_path: Path) -> None:
    # the folder is proved creatable and removed again: the inputs are checked before anything is made
    assert output_dir(tmp_path / "a" / "b", "-o", keep=False) == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()
    assert output_dir(tmp_path / "a" / "b", "-o").is_dir()


def run_pytest(*args: str, cwd: Path, missing: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """pytest in a fresh process (a usage error must not be an INTERNALERROR), with the ``missing``
    modules made unimportable."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]))
    script = f"import sys, pytest; sys.modules.update(dict.fromkeys({list(missing)!r})); "
    script += "raise SystemExit(pytest.main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", script, "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_pytest_output_is_a_file_and_the_rank_folder_is_wrong(tmp_path: Path, afile: Path) -> None:
    write_dump(tmp_path / "dump_path" / "step0" / "rank0")
    write_dump(tmp_path / "dump_path" / "step0" / "rank1")
    proc = run_pytest("--msprobe-dump=dump_path/step0/rank0", f"--msprobe-out={afile.name}", cwd=tmp_path)
    assert proc.returncode == 4
    assert one_line(proc.stderr) == "ERROR: --msprobe-out=out.txt: an existing file, not a folder"
    proc = run_pytest("--msprobe-dump=dump_path/step0/rank3", cwd=tmp_path)
    assert proc.returncode == 4
    assert one_line(proc.stderr) == (
        "ERROR: --msprobe-dump=dump_path/step0/rank3: no such rank folder; found: rank0, rank1"
    )


# ---------------------------------------------------------------- missing dumps, wrong rank folders
def test_a_wrong_rank_or_step_folder_names_the_ones_that_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for rank in ("rank10", "rank2", "rank0"):
        write_dump(tmp_path / "dump_path" / "step0" / rank)
    monkeypatch.chdir(tmp_path)  # the path is reported as typed, relative
    with pytest.raises(MsprobeError) as exc:
        dump_input("dump_path/step0/rank3", "-api_info")
    assert (
        str(exc.value) == "-api_info dump_path/step0/rank3: no such rank folder; found: rank0, rank2, rank10"
    )
    with pytest.raises(MsprobeError) as exc:
        dump_input("dump_path/step0/rank/dump.json", "-api_info")
    assert str(exc.value).endswith(
        "dump_path/step0/rank/dump.json: no such rank folder; found: rank0, rank2, rank10"
    )
    with pytest.raises(MsprobeError) as exc:
        dump_input("dump_path/step4/rank0", "--msprobe-dump=")
    assert str(exc.value) == "--msprobe-dump=dump_path/step4/rank0: no such step folder; found: step0"
    assert str(missing("nowhere/at/all", "")) == "nowhere/at/all: no such file or folder"


def test_every_entry_point_names_the_existing_rank_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dump(tmp_path / "dump_path" / "step0" / "rank0")
    write_dump(tmp_path / "dump_path" / "step0" / "rank1")
    monkeypatch.chdir(tmp_path)
    wrong = "dump_path/step0/rank3"
    found = "no such rank folder; found: rank0, rank1"
    assert msprobe_main(["run_ut", "-api_info", wrong, "-o", "out"]) == 2
    assert one_line(capsys.readouterr().err) == f"msprobe: error: -api_info {wrong}: {found}"
    assert msprobe_main(["rebuild", wrong]) == 2
    assert one_line(capsys.readouterr().err) == f"msprobe: error: {wrong}: {found}"
    assert compare_cli.main(["-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", "out", "--dump", wrong]) == 2
    assert one_line(capsys.readouterr().err) == f"msprobe: error: --dump {wrong}: {found}"
    assert compare_cli.main(["-npu", "npu/details.csv", "-gpu", str(DETAILS)]) == 2
    assert one_line(capsys.readouterr().err) == "msprobe: error: -npu npu/details.csv: no such file or folder"
    assert not Path("out").exists()


def test_a_crashed_dump_points_to_msprobe_rebuild(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dump(tmp_path / "dump_path" / "step0" / "rank", crashed=True)
    monkeypatch.chdir(tmp_path)
    for given, folder in (
        ("dump_path", "dump_path"),
        ("dump_path/step0/rank", "dump_path/step0/rank"),
        ("dump_path/step0/rank/dump.json", "dump_path/step0/rank"),
    ):
        assert msprobe_main(["run_ut", "-api_info", given, "-o", "out"]) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"msprobe: error: -api_info {given}: the dump did not finish"), line
        assert line.endswith(f"run `msprobe rebuild {folder}` first"), line
    proc = run_pytest("--msprobe-dump=dump_path", cwd=tmp_path)
    assert proc.returncode == 4 and "run `msprobe rebuild dump_path` first" in one_line(proc.stderr)
    assert msprobe_main(["rebuild", "dump_path"]) == 0  # rewrites dump.json, keeps the journal
    assert (tmp_path / "dump_path" / "step0" / "rank" / JOURNAL_NAME).exists()
    assert dump_input("dump_path", "-api_info") == Path("dump_path")


def test_a_crashed_dump_copied_with_new_file_times_points_to_msprobe_rebuild(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cp -r`` gives dump.json (the empty one a window writes as it opens) a time after its journal's:
    the journal's records still say the dump did not finish."""
    rank = write_dump(tmp_path / "dump_path" / "step0" / "rank")
    doc = json.loads((rank / "dump.json").read_text(encoding="utf-8"))
    record = json.dumps(doc["data"]["Torch.tanh.0.forward"])
    (rank / JOURNAL_NAME).write_text(data_line("Torch.tanh.0.forward", record) + "\n", encoding="utf-8")
    doc["data"] = {}
    (rank / "dump.json").write_text(json.dumps(doc), encoding="utf-8")
    stamp = (rank / JOURNAL_NAME).stat().st_mtime_ns
    os.utime(rank / "dump.json", ns=(stamp + 10**9, stamp + 10**9))
    monkeypatch.chdir(tmp_path)
    assert msprobe_main(["run_ut", "-api_info", "dump_path", "-o", "out"]) == 2
    assert one_line(capsys.readouterr().err).endswith("run `msprobe rebuild dump_path` first")
    assert msprobe_main(["rebuild", "dump_path"]) == 0
    assert dump_input("dump_path", "-api_info") == Path("dump_path")


# ---------------------------------------------------------------- missing extras, version, config errors
def test_missing_extras_are_named_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    assert compare_cli.main(["-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", str(tmp_path / "c")]) == 2
    assert one_line(capsys.readouterr().err) == (
        "msprobe: error: the compare stage needs pandas: pip install pandas (msprobe's 'compare' extra)"
    )
    assert not (tmp_path / "c").exists()
    assert msprobe_main(["demo", "--out", str(tmp_path / "demo")]) == 2
    assert "pip install pandas (msprobe's 'all' extra)" in one_line(capsys.readouterr().err)
    monkeypatch.setitem(sys.modules, "xdist", None)
    dump = write_dump(tmp_path / "d")
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(tmp_path / "o"), "-n", "2"]) == 2
    assert one_line(capsys.readouterr().err) == (
        "msprobe: error: replay with -n (worker processes) needs pytest-xdist: pip install pytest-xdist "
        "(msprobe's 'replay' extra)"
    )
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MsprobeError, match=r"^the replay stage needs torch and pytest \(torch missing\)"):
        require("replay")
    proc = run_pytest(f"--msprobe-dump={dump}", cwd=tmp_path, missing=("torch",))
    assert proc.returncode == 4
    assert one_line(proc.stderr) == (
        "ERROR: the replay stage needs torch and pytest (torch missing): pip install torch "
        "(msprobe's 'replay' "
        "extra)"
    )


def test_every_need_is_installed_here() -> None:
    for stage in NEEDS:
        require(stage)  # the dev environment has every extra


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    assert msprobe_main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"msprobe {metadata.version('msprobe')}"
    with pytest.raises(SystemExit) as exc:
        compare_cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"msprobe {metadata.version('msprobe')}"


def test_config_errors_have_one_prefix_and_blame_the_users_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from msprobe.cli import user_error
    from msprobe.dump.config import build_config, default_config_path
    from msprobe.dump.exceptions import MsprobeException

    with pytest.raises(MsprobeException) as exc:
        build_config(task="overflow_check", dump_path=str(tmp_path / "d"))
    assert default_config_path() not in str(exc.value)
    assert str(exc.value).startswith("[msprobe] 无效参数：PrecisionDebugger(task=...): task 'overflow_check'")
    user_error(exc.value)
    assert one_line(capsys.readouterr().err).startswith(
        "msprobe: error: 无效参数：PrecisionDebugger(task=...)"
    )
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"task": "free_benchmark", "dump_path": str(tmp_path / "d")}), encoding="utf-8"
    )
    with pytest.raises(MsprobeException, match=rf"^\[msprobe\] 无效参数：{config}: task 'free_benchmark'"):
        build_config(str(config))


def test_demo_refuses_a_bad_argument_before_creating_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo" / "sub"
    with pytest.raises(SystemExit) as exc:
        msprobe_main(["demo", "--out", str(out), "-n", "abc"])
    assert exc.value.code == 2
    assert "argument -n/--workers: invalid int value: 'abc'" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()


# ---------------------------------------------------------------- a file that is not a replayable dump
NOT_DUMPS = {
    "config.json": ('{"task": "statistics", "step": [0, 1]}', "not a dump (no 'data' object)"),
    "afile.txt": ("x", "not a dump (invalid JSON: "),
    "trailing.json": ('{"data": {}},', "not a dump (invalid JSON: "),
    "ms.json": ('{"framework": "mindspore", "data": {}}', "framework 'mindspore' is not replayed here"),
    "debug.json": (
        '{"task": "statistics", "level": "debug", "framework": "pytorch", "data": {"x.0.debug": {}}}',
        "a debugger.save file (level debug), not an API dump",
    ),
}


@pytest.mark.parametrize("name", sorted(NOT_DUMPS))
def test_run_ut_refuses_a_file_that_is_not_a_dump_before_pytest(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, reason = NOT_DUMPS[name]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert msprobe_main(["run_ut", "-api_info", str(path), "-o", str(tmp_path / "out")]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"msprobe: error: -api_info {path}: {reason}"), line
    assert not (tmp_path / "out").exists()
    # a rank folder holding it as dump.json: the file at fault is named after the option
    (tmp_path / "rank").mkdir()
    (tmp_path / "rank" / "dump.json").write_text(text, encoding="utf-8")
    assert msprobe_main(["run_ut", "-api_info", str(tmp_path / "rank"), "-o", str(tmp_path / "out")]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(
        f"msprobe: error: -api_info {tmp_path / 'rank'}: {tmp_path / 'rank' / 'dump.json'}: "
    )
    assert not (tmp_path / "out").exists()


def test_pytest_refuses_a_debug_json_as_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "debug.json"
    path.write_text(NOT_DUMPS["debug.json"][0], encoding="utf-8")
    proc = run_pytest(f"--msprobe-dump={path}", f"--msprobe-out={tmp_path / 'out'}", cwd=tmp_path)
    assert proc.returncode == 4
    assert one_line(proc.stderr + proc.stdout) == (
        f"ERROR: --msprobe-dump={path}: a debugger.save file (level debug), not an API dump"
    )
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- files that decode to no document
@pytest.mark.parametrize(
    ("text", "why"),
    [("[" * 100_000 + "]" * 100_000, "nested too deeply"), ("[" + "9" * 5000 + "]", "integer string")],
)
def test_json_nested_too_deeply_or_with_a_giant_number_is_one_line_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, why: str
) -> None:
    from msprobe.dump.config import build_config
    from msprobe.dump.exceptions import MsprobeException

    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump.json").write_text('{"data": ' + text + "}", encoding="utf-8")
    assert msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(tmp_path / "o")]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{dump / 'dump.json'}: not a dump (invalid JSON" in line and why in line
    config = tmp_path / "config.json"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(MsprobeException, match=why) as exc:
        build_config(str(config))
    assert "\n" not in str(exc.value)
    (dump / "stack.json").write_text(text, encoding="utf-8")
    code = compare_cli.main(
        ["-npu", str(DETAILS), "-gpu", str(DETAILS), "-o", str(tmp_path / "c"), "--dump", str(dump)]
    )
    assert code == 2
    line = one_line(capsys.readouterr().err)
    assert "stack.json: unreadable stack.json" in line and why in line


def test_run_ut_config_that_is_a_folder_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = write_dump(tmp_path / "dump_path" / "step0" / "rank")
    folder = tmp_path / "cfgdir"
    folder.mkdir()
    code = msprobe_main(["run_ut", "-api_info", str(dump), "-o", str(tmp_path / "o"), "-config", str(folder)])
    assert code != 0
    assert one_line(capsys.readouterr().err) == (
        f"msprobe: error: -config {folder}: a folder, expected a config.json file"  # the flag typed
    )


@pytest.mark.parametrize("threads", ["-3", "100000"])
def test_replay_threads_out_of_range_are_a_usage_error(tmp_path: Path, threads: str) -> None:
    write_dump(tmp_path / "dump_path" / "step0" / "rank")
    proc = run_pytest("--msprobe-dump=dump_path/step0/rank", f"--msprobe-threads={threads}", cwd=tmp_path)
    assert proc.returncode == 4
    said = f"ERROR: --msprobe-threads={threads}: must be between 0 (the default: 1) and 1024"
    assert one_line(proc.stderr) == said


def test_a_config_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows editors save UTF-8 with a BOM: the config is the same JSON."""
    from msprobe.dump.config import build_config
    from msprobe.run_ut.config import load_config

    config = tmp_path / "config.json"
    body = {"task": "statistics", "dump_path": str(tmp_path / "d"), "level": "L1"}
    config.write_bytes(b"\xef\xbb\xbf" + json.dumps(body).encode())
    assert build_config(str(config)).level == "L1"
    replay_config = tmp_path / "run_ut.json"
    replay_config.write_bytes(b"\xef\xbb\xbf" + json.dumps({"run_ut": {}}).encode())
    load_config(replay_config)


@pytest.mark.parametrize("workers", ["-1", "abc", "1.5"])
def test_run_ut_workers_must_be_a_count_or_auto(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    dump = write_dump(tmp_path / "dump_path" / "step0" / "rank")
    with pytest.raises(SystemExit) as exc:
        msprobe_main(["run_ut", "-api_info", str(dump), "-n", workers])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert (
        f"argument -n/--num_workers/--num_splits: {workers!r}: a number of workers (0: in process) or 'auto'"
        in err
    )
    assert "Traceback" not in err and "pytest" not in err
