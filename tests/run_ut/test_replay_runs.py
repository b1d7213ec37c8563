"""Run-level guarantees: order/worker independence, -n 0 == -n 2 bytes, resume, nothing lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from replay_dumps import FAILS_THIRD, copy_fixture, csv_pair, forward, read_csv, tensor, write_dump

import msprobe.run_ut.replay
import msprobe.run_ut.session
import msprobe.timestamps
from msprobe.formats.accuracy_csv import RUN_UT_DETAILS_HEADER, RUN_UT_RESULT_HEADER
from msprobe.run_ut.results import ResultWriter, payload, summary_label
from msprobe.run_ut.run_settings import settings_path_for


def replay(dump: Path, out: Path, *extra: str) -> int:
    args = ["-q", "-p", "no:cacheprovider", "-W", "ignore", "--rootdir", str(dump.parent)]
    return int(pytest.main([*args, "--msprobe-dump", str(dump), "--msprobe-out", str(out), *extra]))


def test_subset_gives_the_same_rows_as_full_run(tmp_path: Path) -> None:
    """Random inputs are seeded per API name: running fewer APIs changes none of the others."""
    dump = copy_fixture("cnn_statistics", tmp_path)
    assert replay(dump, tmp_path / "full") in (0, 1)
    assert replay(dump, tmp_path / "some", "-k", "relu or linear or add_") in (0, 1)
    full = {r[0]: r for r in read_csv(csv_pair(tmp_path / "full")[1])[1:]}
    some = read_csv(csv_pair(tmp_path / "some")[1])[1:]
    assert len(some) >= 5
    for row in some:
        assert row == full[row[0]]


@pytest.mark.slow
def test_one_worker_and_two_workers_write_identical_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = copy_fixture("cnn_statistics", tmp_path)
    assert replay(dump, tmp_path / "n0") in (0, 1)
    assert replay(dump, tmp_path / "n2", "-n", "2") in (0, 1)
    out = capsys.readouterr().out
    assert "msprobe: this process: 27 APIs on cpu" in out
    assert "msprobe: gw0: " in out and "msprobe: gw1: " in out  # worker facts came back
    for a, b in zip(csv_pair(tmp_path / "n0"), csv_pair(tmp_path / "n2")):
        assert a.read_bytes() == b.read_bytes()


def test_interrupted_run_resumes_without_redoing_finished_apis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = write_dump(tmp_path / "d", FAILS_THIRD)
    assert replay(dump, tmp_path / "whole") == 1
    # -x stops the run at the failing third API, as an interruption would.
    assert replay(dump, tmp_path / "part", "-x") == 1
    result, details = csv_pair(tmp_path / "part")
    assert [r[0] for r in read_csv(result)[1:]] == ["Torch.tanh.0", "Torch.sigmoid.0", "Torch.exp.0"]
    capsys.readouterr()
    # only sin and cos run, and pass; the exp row kept from before is an error: exit 1, as the whole run
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result)) == 1
    assert "2 passed, 3 deselected" in capsys.readouterr().out
    assert [r[0] for r in read_csv(result)[1:]] == list(n.rsplit(".", 1)[0] for n in FAILS_THIRD)
    whole = csv_pair(tmp_path / "whole")
    assert result.read_bytes() == whole[0].read_bytes()
    assert details.read_bytes() == whole[1].read_bytes()


def test_resume_file_must_have_upstream_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = write_dump(tmp_path / "d", FAILS_THIRD)
    bogus = tmp_path / "results.csv"
    bogus.write_text("x", encoding="utf-8")
    assert replay(dump, tmp_path / "o", "--msprobe-resume", str(bogus)) == pytest.ExitCode.USAGE_ERROR
    assert "accuracy_checking_result_<14 digits>.csv" in capsys.readouterr().err


def test_writer_appends_each_api_at_once_and_sorts_at_the_end(tmp_path: Path) -> None:
    order = {"A.x.0": 0, "A.y.0": 1}
    writer = ResultWriter.create(tmp_path / "dump.json", tmp_path, "20260101000000", order)
    row = [" "] * (len(RUN_UT_DETAILS_HEADER) - 2)
    writer.add(
        payload("d", "A.y.0", 1, ["A.y.0", "pass", " "], [["A.y.0.forward.output.0", *row, "pass", ""]])
    )
    # Before the session ends the row is already on disk (a killed run keeps it).
    assert [r[0] for r in read_csv(writer.result_path)] == [RUN_UT_RESULT_HEADER[0], "A.y.0"]
    writer.add(
        payload("d", "A.x.0", 0, ["A.x.0", "error", " "], [["A.x.0.forward.output.0", *row, "error", ""]])
    )
    writer.finish()
    assert [r[0] for r in read_csv(writer.result_path)[1:]] == ["A.x.0", "A.y.0"]
    assert [r[0] for r in read_csv(writer.details_path)[1:]] == [
        "A.x.0.forward.output.0",
        "A.y.0.forward.output.0",
    ]
    assert writer.result_path.read_bytes().startswith(b"\xef\xbb\xbf")


def test_plugin_module_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, msprobe.run_ut.plugin; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_filter_api_replays_the_first_of_identical_calls(tmp_path: Path) -> None:
    data = {
        "Tensor.add.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0), {"type": "int", "value": 1}),
        "Tensor.add.1.forward": forward(tensor("torch.float32", [8], -2.0, 2.0), {"type": "int", "value": 1}),
        "Tensor.add.2.forward": forward(tensor("torch.float32", [9], -1.0, 1.0), {"type": "int", "value": 1}),
    }
    dump = write_dump(tmp_path / "d", data)
    assert replay(dump, tmp_path / "o", "--msprobe-filter-api") == 0
    assert [r[0] for r in read_csv(csv_pair(tmp_path / "o")[0])[1:]] == ["Tensor.add.0", "Tensor.add.2"]


def test_dump_root_with_rank_folders_gets_one_csv_pair_each_and_resumes_by_folder(tmp_path: Path) -> None:
    root = tmp_path / "dump"
    for step in ("step0", "step1"):
        write_dump(root / step / "rank0", dict(list(FAILS_THIRD.items())[:2]))
    assert replay(root, tmp_path / "out") == 0
    for step in ("step0", "step1"):
        result, _ = csv_pair(tmp_path / "out" / step / "rank0")
        assert [r[0] for r in read_csv(result)[1:]] == ["Torch.tanh.0", "Torch.sigmoid.0"]
    # every API already has its row: nothing runs, the results stand
    assert replay(root, tmp_path / "out", "--msprobe-resume", str(tmp_path / "out")) == pytest.ExitCode.OK


CRASH_CONFTEST = """
import os
import msprobe.run_ut.collect as collect

_original = collect.ApiItem.runtest


def runtest(self):
    if self.record.name == "Torch.exp.0":
        os._exit(3)  # the worker dies mid-item, as with a segfault in a kernel
    return _original(self)


collect.ApiItem.runtest = runtest
"""


@pytest.mark.slow
def test_worker_crash_becomes_a_row_and_nothing_is_lost(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CRASH_CONFTEST)
    dump = write_dump(pytester.path / "d", FAILS_THIRD)
    out = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--msprobe-dump", str(dump), "--msprobe-out", str(out), "-n", "2"
    )
    assert result.ret == 1
    rows = {r[0]: r for r in read_csv(csv_pair(out)[0])[1:]}
    assert list(rows) == [n.rsplit(".", 1)[0] for n in FAILS_THIRD]
    assert rows["Torch.exp.0"] == ["Torch.exp.0", "SKIP", "SKIP", "worker crashed while replaying this API"]
    result.stdout.fnmatch_lines(["msprobe: *accuracy_checking_result_*.csv (1 crashed, 4 pass)"])


@pytest.mark.slow
def test_benchmark_dump_of_a_real_model_replays_cleanly(tmp_path: Path) -> None:
    """Dump stage -> replay stage: our dump of a real model's training step replays with no skip."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "replay_speed", Path(__file__).resolve().parents[2] / "benchmarks" / "replay_speed.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    dump = bench.make_dump(tmp_path / "dump", 50)
    assert replay(dump, tmp_path / "out") in (0, 1)
    rows = read_csv(csv_pair(tmp_path / "out")[0])[1:]
    assert len(rows) == 50
    assert not [r for r in rows if r[1] == "SKIP"], [r for r in rows if r[1] == "SKIP"]
    assert any(r[2] not in (" ", "SKIP") for r in rows)  # backward records were replayed too


@pytest.mark.slow
def test_resume_under_xdist_deselects_the_same_items_on_every_worker(tmp_path: Path) -> None:
    dump = write_dump(tmp_path / "d", FAILS_THIRD)
    assert replay(dump, tmp_path / "whole") == 1
    assert replay(dump, tmp_path / "part", "-x") == 1
    result, details = csv_pair(tmp_path / "part")
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result), "-n", "2") == 1  # as whole
    whole = csv_pair(tmp_path / "whole")
    assert result.read_bytes() == whole[0].read_bytes()
    assert details.read_bytes() == whole[1].read_bytes()


def test_summary_labels_what_pytest_fails_without_an_error_verdict() -> None:
    assert summary_label(True, True, ["A.x.0", "SKIP", "SKIP", "why"]) == "broken record"
    assert summary_label(True, False, None) == "failed"
    assert summary_label(True, False, ["A.x.0", "Warning", " "]) == "failed"  # e.g. -W error
    assert summary_label(True, False, ["A.x.0", "pass", "error"]) is None  # counted as its verdict
    assert summary_label(False, False, ["A.x.0", "pass", " "]) is None


def test_an_unwritable_output_is_one_error_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(msprobe.timestamps, "now", lambda: "20260101000000")
    out = pytester.path / "out"
    # the CSV cannot be made: a folder where this process writes it first
    (out / f"accuracy_checking_result_20260101000000.csv.{os.getpid()}.tmp").mkdir(parents=True)
    dump = write_dump(pytester.path / "d", FAILS_THIRD)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--msprobe-dump", str(dump), "--msprobe-out", str(out)
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in result.errlines + result.outlines if line.strip()]
    assert lines == [
        f"ERROR: {out / 'accuracy_checking_result_20260101000000.csv'}: cannot write (Is a directory)"
    ]


def test_a_details_file_that_cannot_be_made_leaves_no_result_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The result file (claimed, its header written) stayed without its details: a later
    ``-csv_path`` of the folder picked it and was refused, its details file missing."""
    monkeypatch.setattr(msprobe.timestamps, "now", lambda: "20260101000000")
    out = pytester.path / "out"
    (out / "accuracy_checking_details_20260101000000.csv").mkdir(parents=True)  # cannot be made
    dump = write_dump(pytester.path / "d", FAILS_THIRD)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--msprobe-dump", str(dump), "--msprobe-out", str(out)
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [p.name for p in out.iterdir()] == ["accuracy_checking_details_20260101000000.csv"]  # the folder


@pytest.mark.slow
def test_a_full_disk_mid_run_is_one_error_line_and_the_run_resumes(tmp_path: Path) -> None:
    import resource
    import subprocess
    import sys

    data = {f"Torch.tanh.{i}.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)) for i in range(40)}
    dump = write_dump(tmp_path / "d", data)
    assert replay(dump, tmp_path / "whole") == 0
    out = tmp_path / "out"
    limit = 4096  # bytes per file: the header fits, the tenth API or so does not

    def full_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"]
    command += ["--rootdir", str(tmp_path), "--msprobe-dump", str(dump), "--msprobe-out", str(out)]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=full_disk,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:] + done.stderr[-2000:]
    result, details = csv_pair(out)
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        f"ERROR: {details}: cannot write (File too large)"
    ]
    assert "Traceback" not in done.stdout + done.stderr and "INTERNALERROR" not in done.stdout
    files = [details.name, result.name, settings_path_for(result).name]
    assert sorted(p.name for p in out.iterdir()) == sorted(files)  # no .tmp left
    assert details.stat().st_size == limit and 2 < len(read_csv(result)) < 40
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result)) == 0
    whole = csv_pair(tmp_path / "whole")
    assert (result.read_bytes(), details.read_bytes()) == (whole[0].read_bytes(), whole[1].read_bytes())


def test_a_rank_whose_files_cannot_be_made_leaves_no_empty_claim_in_another(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rank folder's result file is claimed first: when the first rank's files could not be made,
    the second kept an empty result file without details, which a later resume picked and refused."""
    import msprobe.run_ut.results as results

    root = pytester.path / "dump"
    for rank in ("rank0", "rank1"):
        write_dump(root / "step0" / rank, FAILS_THIRD)
    original = results.write_rows

    def disk_full(path, header, rows):  # type: ignore[no-untyped-def]
        if "rank0" in str(path) and "details" in path.name:
            raise OSError(28, "No space left on device")
        return original(path, header, rows)

    monkeypatch.setattr(results, "write_rows", disk_full)
    out = pytester.path / "out"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--msprobe-dump", str(root), "--msprobe-out", str(out)
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert sorted(p.name for p in out.rglob("*.csv")) == []
