"""Resume: an interrupted run's CSVs, cut anywhere by a kill, resume to the rows of an uninterrupted run;
a result file of another dump or a damaged row is refused in one line."""

from __future__ import annotations

import itertools
import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_dumps import FAILS_THIRD, csv_pair, forward, read_csv, tensor, write_dump

import msprobe.run_ut.replay
import msprobe.run_ut.session  # noqa: F401
from msprobe.errors import MsprobeError
from msprobe.formats.accuracy_csv import RUN_UT_DETAILS_HEADER
from msprobe.formats.record_names import output_row_api
from msprobe.run_ut.results import CRASHED_MESSAGE, ResultWriter, find_resume_file, payload
from msprobe.run_ut.run_settings import settings_path_for

TS = "20260101000000"


def replay(dump: Path, out: Path, *extra: str) -> int:
    args = ["-q", "-p", "no:cacheprovider", "-W", "ignore", "--rootdir", str(dump.parent)]
    return int(pytest.main([*args, "--msprobe-dump", str(dump), "--msprobe-out", str(out), *extra]))


def rows_of(folder: Path) -> tuple[list[list[str]], list[list[str]]]:
    result, details = csv_pair(folder)
    return read_csv(result), read_csv(details)


def kill_states(
    snapshots: list[tuple[bytes, bytes]], details_first: bool = True
) -> Iterator[tuple[bytes, bytes]]:
    """Every (result, details) pair of file contents a kill can leave while APIs are appended.

    ``snapshots``: both files after the header and after each API; the writer appends an API's details
    rows, then its result row, so a kill cuts one of them anywhere while the other is as it was.
    """
    for (r0, d0), (r1, d1) in itertools.pairwise(snapshots):
        for cut in range(len(d0), len(d1)):
            yield r0, d1[:cut]
        for cut in range(len(r0), len(r1)):
            yield r1[:cut], d1


def cut_copy(folder: Path, result: bytes, details: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"accuracy_checking_result_{TS}.csv"
    path.write_bytes(result)
    (folder / f"accuracy_checking_details_{TS}.csv").write_bytes(details)
    return path


# --------------------------------------------------------------------------- the writer alone
def _details(name: str, count: int, status: str, message: str) -> list[list[str]]:
    middle = [" "] * (len(RUN_UT_DETAILS_HEADER) - 3)
    return [[f"{name}.forward.output.{k}", *middle, status, message] for k in range(count)]


ITEMS = [
    payload("d", "A.a.0", 0, ["A.a.0", "pass", " "], _details("A.a.0", 1, "pass", "\nok, quoted\n")),
    payload("d", "A.dropout.0", 1, ["A.dropout.0", "pass", " "], []),  # no details row at all
    payload("d", "A.b.0", 2, ["A.b.0", "error", "pass"], _details("A.b.0", 2, "error", 'say "x"')),
    payload(
        "d",
        "A.c.0",
        3,
        ["A.c.0", "SKIP", "SKIP", "why, with a comma: naïve"],
        _details("A.c.0", 1, "SKIP", "é非"),
    ),  # a cut may split a character: a torn row, not a file that is not UTF-8
    payload("d", "A.d.0", 4, ["A.d.0", "Warning", " "], _details("A.d.0", 1, "Warning", "")),
]
ORDER = {item["api"]: item["index"] for item in ITEMS}


def _snapshots_of_a_whole_run(
    tmp_path: Path,
) -> tuple[Path, list[tuple[bytes, bytes]], tuple[list[list[str]], list[list[str]]]]:
    """(the dump, both files after the header and after each API, the finished run's rows)."""
    dump = tmp_path / "dump.json"
    writer = ResultWriter.create(dump, tmp_path / "whole", TS, ORDER)
    snapshots = [(writer.result_path.read_bytes(), writer.details_path.read_bytes())]
    for item in ITEMS:
        writer.add(item)
        snapshots.append((writer.result_path.read_bytes(), writer.details_path.read_bytes()))
    writer.finish()
    return dump, snapshots, rows_of(tmp_path / "whole")


def test_a_cut_anywhere_in_the_appended_files_resumes_to_the_whole_rows(tmp_path: Path) -> None:
    dump, snapshots, whole = _snapshots_of_a_whole_run(tmp_path)
    states = list(kill_states(snapshots))
    assert len(states) == sum(len(r) + len(d) for r, d in snapshots[-1:]) - sum(map(len, snapshots[0]))
    for n, (result, details) in enumerate(states):
        resumed = ResultWriter.resume(dump, cut_copy(tmp_path / "cut", result, details), ORDER)
        for item in ITEMS:
            if item["api"] not in resumed.done:
                resumed.add(item)
        resumed.finish()
        assert rows_of(tmp_path / "cut") == whole, (n, result[-40:], details[-40:])


def test_a_resumed_run_killed_again_resumes_to_the_whole_rows(tmp_path: Path) -> None:
    """A resume appends after the rows it keeps: a torn row (or the details of an unfinished API) left
    in the file would be glued to the next appended row, which a second kill then keeps, refused or
    read as a row of another API."""
    dump, snapshots, whole = _snapshots_of_a_whole_run(tmp_path)
    for n, (result, details) in enumerate(kill_states(snapshots)):
        path = cut_copy(tmp_path / "cut", result, details)
        first = ResultWriter.resume(dump, path, ORDER)
        for item in [item for item in ITEMS if item["api"] not in first.done][:1]:
            first.add(item)  # then killed again, between two APIs
        _resumed_whole(dump, path)
        assert rows_of(tmp_path / "cut") == whole, (n, result[-40:], details[-40:])


def test_a_details_file_cut_inside_a_quoted_message_runs_that_api_again(tmp_path: Path) -> None:
    """A result row written before its details (or a file cut by hand): the named API runs again."""
    dump = tmp_path / "dump.json"
    writer = ResultWriter.create(dump, tmp_path / "o", TS, ORDER)
    for item in ITEMS[:3]:
        writer.add(item)
    writer.finish()
    details = writer.details_path.read_bytes()
    cut = details.rindex(b'say "') + 3
    writer.details_path.write_bytes(details[:cut])
    resumed = ResultWriter.resume(dump, writer.result_path, ORDER)
    assert resumed.done == {"A.a.0", "A.dropout.0"}
    assert all(not row[0].startswith("A.b.0") for row in resumed.old_details)


def _finished_run(folder: Path, items: list[dict] = ITEMS) -> ResultWriter:
    """A run of ``items`` into ``folder``, finished (its files rewritten in dump order)."""
    writer = ResultWriter.create(folder.parent / "dump.json", folder, TS, ORDER)
    for item in items:
        writer.add(item)
    writer.finish()
    return writer


def _resumed_whole(dump: Path, result_path: Path) -> ResultWriter:
    """Resume from ``result_path``, replay (add) what it did not finish, finish; the writer."""
    resumed = ResultWriter.resume(dump, result_path, ORDER)
    for item in ITEMS:
        if item["api"] not in resumed.done:
            resumed.add(item)
    resumed.finish()
    return resumed


def test_an_api_whose_worker_crashed_runs_again_on_resume(tmp_path: Path) -> None:
    """A worker killed (the OOM killer) leaves its API a SKIP row saying so: no verdict, so a resume
    replays it, and the resumed files equal an uninterrupted run's."""
    dump = tmp_path / "dump.json"
    _finished_run(tmp_path / "whole")
    crashed = dict(ITEMS[2])
    crashed["result"] = ["A.b.0", "SKIP", "SKIP", CRASHED_MESSAGE]
    crashed["details"] = _details("A.b.0", 1, "SKIP", CRASHED_MESSAGE)
    writer = _finished_run(tmp_path / "o", [*ITEMS[:2], crashed, *ITEMS[3:]])
    assert "A.b.0" not in ResultWriter.resume(dump, writer.result_path, ORDER).done
    _resumed_whole(dump, writer.result_path)
    assert rows_of(tmp_path / "o") == rows_of(tmp_path / "whole")


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.9])
def test_a_finished_runs_details_file_cut_by_hand_resumes_to_the_whole_rows(
    tmp_path: Path, fraction: float
) -> None:
    """``head -c`` of a finished run's details file: the APIs after the cut kept their result rows and
    lost their details rows; only the torn row's API ran again."""
    dump = tmp_path / "dump.json"
    writer = _finished_run(tmp_path / "o")
    whole = rows_of(tmp_path / "o")
    details = writer.details_path.read_bytes()
    body = details.index(b"\r\n") + 2  # after the header
    cut = body + int((len(details) - body) * fraction)
    if details[cut - 2 : cut] == b"\r\n":
        cut += 1  # cut inside a row
    writer.details_path.write_bytes(details[:cut])
    _resumed_whole(dump, writer.result_path)
    assert rows_of(tmp_path / "o") == whole


def test_rows_appended_twice_are_kept_once(tmp_path: Path) -> None:
    """Two resumes of one folder at once append an API twice: compare refused the resumed files."""
    dump = tmp_path / "dump.json"
    writer = _finished_run(tmp_path / "o")
    whole = rows_of(tmp_path / "o")
    result, details = writer.result_path.read_bytes(), writer.details_path.read_bytes()
    writer.result_path.write_bytes(result + result.split(b"\r\n", 1)[1])
    writer.details_path.write_bytes(details + details.split(b"\r\n", 1)[1])
    _resumed_whole(dump, writer.result_path)
    assert rows_of(tmp_path / "o") == whole


def test_a_damaged_row_before_the_last_is_refused_naming_its_line(tmp_path: Path) -> None:
    writer = ResultWriter.create(tmp_path / "dump.json", tmp_path / "o", TS, ORDER)
    for item in ITEMS[:3]:
        writer.add(item)
    result, details = writer.result_path.read_bytes(), writer.details_path.read_bytes()
    for damaged, line, what in (
        (result.replace(b"A.dropout.0,pass,", b"A.dropout.0,pas,"), 3, "'Forward Test Success' is 'pas'"),
        (result.replace(b"A.dropout.0,pass, \r\n", b"A.dropout.0\r\n"), 3, "'Forward Test Success' is ''"),
        (result.replace(b"A.a.0,pass, ", b"A.a.0,pass,-"), 2, "'Backward Test Success' is '-'"),
    ):
        writer.result_path.write_bytes(damaged)
        with pytest.raises(MsprobeError) as exc:
            ResultWriter.resume(tmp_path / "dump.json", writer.result_path, ORDER)
        assert str(exc.value).startswith(f"{writer.result_path}:{line}: {what}, not one of "), exc.value
    writer.result_path.write_bytes(result)
    writer.details_path.write_bytes(details.replace(b',pass,"', b',pas,"'))
    with pytest.raises(MsprobeError, match=r"details_\d+\.csv:2: 'Status' is 'pas', not one of"):
        ResultWriter.resume(tmp_path / "dump.json", writer.result_path, ORDER)


# --------------------------------------------------------------------------- a real interrupted run
@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[bytes, bytes]], tuple]:
    """FAILS_THIRD's dump, its run stopped (-x) after three APIs as file snapshots, the whole run's rows."""
    base = tmp_path_factory.mktemp("interrupted")
    dump = write_dump(base / "d", FAILS_THIRD)
    assert replay(dump, base / "whole") == 1
    assert replay(dump, base / "part", "-x") == 1  # -n 0: rows arrive, and stay, in dump order
    result, details = (p.read_bytes() for p in csv_pair(base / "part"))
    result_rows, details_rows = result.split(b"\r\n"), details.split(b"\r\n")  # line breaks in cells are \n
    assert len(result_rows) == 5 and len(details_rows) == 5, "one line per row, three APIs, one row each"
    snapshots = [
        (b"\r\n".join(result_rows[: k + 1]) + b"\r\n", b"\r\n".join(details_rows[: k + 1]) + b"\r\n")
        for k in range(4)
    ]
    assert [output_row_api(r.split(b",")[0].decode()) for r in details_rows[1:4]] == [
        r.split(b",")[0].decode() for r in result_rows[1:4]
    ]
    return dump, snapshots, rows_of(base / "whole")


@settings(max_examples=20)
@given(st.data())
def test_a_killed_run_cut_anywhere_resumes_to_the_uninterrupted_rows(
    interrupted: tuple[Path, list[tuple[bytes, bytes]], tuple], data: st.DataObject
) -> None:
    dump, snapshots, whole = interrupted
    states = list(kill_states(snapshots))
    result, details = states[data.draw(st.integers(0, len(states) - 1), label="cut")]
    with tempfile.TemporaryDirectory() as folder:
        path = cut_copy(Path(folder) / "out", result, details)
        assert replay(dump, Path(folder) / "ignored", "--msprobe-resume", str(path)) in (0, 1)
        assert rows_of(Path(folder) / "out") == whole


def test_the_tail_cut_by_ten_bytes_runs_that_api_again(
    interrupted: tuple[Path, list[tuple[bytes, bytes]], tuple], tmp_path: Path
) -> None:
    """``truncate -s -10`` of the result file: its torn last row was read as an API of that prefix."""
    dump, snapshots, whole = interrupted
    result, details = snapshots[-1]
    path = cut_copy(tmp_path / "out", result[:-10], details)
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(path)) == 1  # exp.0 ran again
    assert rows_of(tmp_path / "out") == whole


# --------------------------------------------------------------------------- another dump's file
def test_a_result_file_of_another_dump_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = write_dump(tmp_path / "ours", FAILS_THIRD)
    other = {"Torch.tanh.0.forward": forward(tensor("torch.float32", [32], -1.0, 1.0))}
    other |= {f"Torch.relu.{i}.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)) for i in range(5)}
    theirs = write_dump(tmp_path / "theirs", other)
    assert replay(theirs, tmp_path / "theirs_out") == 0
    result, details = csv_pair(tmp_path / "theirs_out")
    before = result.read_bytes(), details.read_bytes()
    capsys.readouterr()
    code = replay(ours, tmp_path / "ignored", "--msprobe-resume", str(result))
    assert code == pytest.ExitCode.USAGE_ERROR
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [
        f"ERROR: {result}: lists APIs that {ours / 'dump.json'} does not hold (Torch.relu.0, "
        "Torch.relu.1, Torch.relu.2 and 2 more); it was written for another dump, resume only from a "
        "result file of this one"
    ]
    assert (result.read_bytes(), details.read_bytes()) == before


def test_a_result_file_of_a_run_restricted_with_k_resumes(tmp_path: Path) -> None:
    dump = write_dump(tmp_path / "d", FAILS_THIRD)
    assert replay(dump, tmp_path / "whole") == 1
    assert replay(dump, tmp_path / "some", "-k", "tanh or sin") == 0
    result, _ = csv_pair(tmp_path / "some")
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result)) == 1
    assert rows_of(tmp_path / "some") == rows_of(tmp_path / "whole")


def test_a_resume_with_other_options_is_refused_naming_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows scored one way must not be finished another way: the run's settings stand beside its files."""
    dump = write_dump(tmp_path / "d", FAILS_THIRD)
    assert replay(dump, tmp_path / "some", "-k", "tanh") == 0
    result, details = csv_pair(tmp_path / "some")
    before = (result.read_bytes(), details.read_bytes())
    config = tmp_path / "config.json"
    config.write_text('{"run_ut": {"white_list": ["sin", "tanh"]}}', encoding="utf-8")
    capsys.readouterr()
    extra = ("--msprobe-resume", str(result), "--msprobe-routing", "26.x", "--msprobe-config", str(config))
    assert replay(dump, tmp_path / "ignored", *extra) == pytest.ExitCode.USAGE_ERROR
    said = f"{result} was replayed with routing (--msprobe-routing) 8.1.1 (now 26.x); "
    said += "white list (--msprobe-config, -config) none (now [sin, tanh]): resume it with the same options"
    assert said in capsys.readouterr().err
    assert (result.read_bytes(), details.read_bytes()) == before
    # a result file without its settings (older, or copied alone) resumes, saying it is not checked
    settings_path_for(result).unlink()
    assert (
        replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result), "--msprobe-routing", "26.x") == 1
    )
    assert "no settings file beside it" in capsys.readouterr().out
    assert settings_path_for(result).exists()  # written now: the next resume is checked


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_resuming_a_finished_run_succeeds_and_keeps_its_rows(tmp_path: Path, workers: list[str]) -> None:
    """Nothing is left to run: the results stand (exit 0, rows unchanged), not pytest's "no tests
    ran" (exit 5), which a script resuming until done would take for a failure."""
    dump = write_dump(
        tmp_path / "d",
        {
            "Torch.exp.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
            "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
        },
    )
    assert replay(dump, tmp_path / "out") == 0
    result, _ = csv_pair(tmp_path / "out")
    before = rows_of(tmp_path / "out")
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result), *workers) == 0
    assert rows_of(tmp_path / "out") == before
    # a resume file of a run cut short still runs what is left
    with open(result, encoding="utf-8") as fh:
        kept = fh.readlines()[:2]
    result.write_text("".join(kept), encoding="utf-8")
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result), *workers) == 0
    assert rows_of(tmp_path / "out")[0] == before[0]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_resumed_run_exits_as_the_uninterrupted_run_would(
    tmp_path: Path, workers: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``error`` row kept from before the interruption made no failure: the resumed run exited 0
    and counted only the APIs it ran, so a CI job that resumes went green on a failing dump."""
    dump = write_dump(
        tmp_path / "d",
        {
            "Torch.exp.0.forward": forward(tensor("torch.float16", [64], -1.0, 12.0)),  # error
            "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
        },
    )
    assert replay(dump, tmp_path / "out") == 1
    result, _ = csv_pair(tmp_path / "out")
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result), *workers) == 1  # finished
    with open(result, encoding="utf-8") as fh:
        kept = fh.readlines()[:2]  # the header and the exp row
    result.write_text("".join(kept), encoding="utf-8")
    capsys.readouterr()
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result), *workers) == 1
    assert f"msprobe: {result} (1 pass; kept from the resumed run: 1 error)" in capsys.readouterr().out


def test_resuming_a_finished_run_of_a_root_with_an_empty_rank_exits_as_the_run(tmp_path: Path) -> None:
    """A rank with no API record (its scope matched nothing) made a finished run's resume pytest's
    "no tests ran", exit 5."""
    root = tmp_path / "root"
    write_dump(root / "rank0", {})
    write_dump(root / "rank1", {"Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0))})
    write_dump(root / "rank2", {"Torch.exp.0.forward": forward(tensor("torch.float16", [64], -1.0, 12.0))})
    assert replay(root, tmp_path / "out") == 1
    assert replay(root, tmp_path / "ignored", "--msprobe-resume", str(tmp_path / "out")) == 1


def test_replays_started_together_into_one_folder_claim_different_timestamps(tmp_path: Path) -> None:
    """The timestamp was checked free, then the files were created after every dump.json was parsed:
    two runs started together could pick one pair of files and erase each other's rows."""
    from msprobe.run_ut.results import claim_timestamp

    folders = [tmp_path / "out", tmp_path / "out" / "step0" / "rank1"]
    first = claim_timestamp(folders, "20261207022359")
    second = claim_timestamp(folders, "20261207022359")
    assert (first, second) == ("20261207022359", "20261207022400")  # a real time, not second 60
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "accuracy_checking_result_20261207022401.csv").touch()
    third = claim_timestamp([tmp_path / "other", folders[0]], "20261207022400")
    assert third == "20261207022402"  # free in every folder
    assert not (tmp_path / "other" / "accuracy_checking_result_20261207022400.csv").exists()  # given back
    for folder in folders:
        assert sorted(p.name for p in folder.glob("accuracy_checking_result_*")) == [
            f"accuracy_checking_result_{ts}.csv"
            for ts in (first, second) + ((third,) if folder == folders[0] else ())
        ]


def test_a_file_where_an_output_folder_goes_is_one_line_not_a_hang(tmp_path: Path) -> None:
    """``mkdir(exist_ok=True)`` raises FileExistsError for a file in the folder's place: it was taken
    for a claimed timestamp and every later second was tried, forever."""
    from msprobe.run_ut.results import claim_timestamp

    (tmp_path / "step0").mkdir()
    (tmp_path / "step0" / "rank1").touch()
    with pytest.raises(MsprobeError, match=r"step0/rank1: cannot write \(File exists\)"):
        claim_timestamp([tmp_path / "step0" / "rank0", tmp_path / "step0" / "rank1"], "20261207022359")
    assert list((tmp_path / "step0" / "rank0").iterdir()) == []


def test_a_folder_resume_passes_over_a_run_killed_before_its_headers(tmp_path: Path) -> None:
    """A kill between claiming a timestamp and writing the headers leaves an empty result file without
    details: it finished nothing, and resuming the folder takes the run before it (or starts anew)."""
    folder = tmp_path / "o"
    earlier = _finished_run(folder)
    claim = folder / "accuracy_checking_result_20260101000001.csv"
    claim.write_bytes(b"")
    assert find_resume_file(folder) == earlier.result_path
    earlier.result_path.unlink()
    earlier.details_path.unlink()
    assert find_resume_file(folder) is None


@pytest.mark.parametrize("text", ['{"device": "cpu"}', "[1]", "{not json", '{"filter_api": "false"}'])
def test_a_damaged_settings_file_is_refused_naming_it(tmp_path: Path, text: str) -> None:
    from msprobe.run_ut.run_settings import RunSettings, check_same_settings

    result = tmp_path / f"accuracy_checking_result_{TS}.csv"
    path = settings_path_for(result)
    full = {"device": "cpu", "routing": "8.1.1", "white_list": [], "black_list": []}
    path.write_text(
        text
        if "filter_api" not in text
        else json.dumps({**full, "filter_api": "false", "jit_compile": False})
    )
    now = RunSettings("cpu", "8.1.1", (), (), False, False)
    with pytest.raises(
        MsprobeError, match=f"^{re.escape(str(path))}: .*delete it to resume without the check$"
    ):
        check_same_settings(result, now)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_resume_runs_a_broken_record_again_and_fails_as_the_run_did(
    tmp_path: Path, workers: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken record's SKIP row was kept as a verdict: resuming a run that failed on it exited 0."""
    dump = write_dump(
        tmp_path / "d",
        {
            "Torch.exp.0.forward": {"input_args": {"not": "a list"}, "input_kwargs": {}, "output": []},
            "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
        },
    )
    assert replay(dump, tmp_path / "out") == 1
    result, _ = csv_pair(tmp_path / "out")
    before = rows_of(tmp_path / "out")
    capsys.readouterr()
    assert replay(dump, tmp_path / "ignored", "--msprobe-resume", str(result), *workers) == 1
    summary = f"msprobe: {result} (1 broken record; kept from the resumed run: 1 pass)"
    assert summary in capsys.readouterr().out
    assert rows_of(tmp_path / "out") == before  # its row written again, once, in its place


@pytest.mark.parametrize("which", ["csv", "settings"])
def test_two_processes_rewriting_one_file_at_once_both_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """Two resumes of one folder at once (supported: a row appended twice is kept once) rewrite the
    same files as they start. Both wrote through one temporary name, ``<file>.tmp``: the second
    rename found it gone and that run stopped with ``cannot write (No such file or directory)``."""
    import os

    from msprobe.formats import accuracy_csv
    from msprobe.run_ut.run_settings import RunSettings, read_settings, write_settings

    result = tmp_path / f"accuracy_checking_result_{TS}.csv"
    mine = RunSettings("cpu", "8.1.1", (), (), False, False)
    theirs = RunSettings("cpu", "8.1.1", (), (), True, False)
    real_replace, real_getpid = os.replace, os.getpid
    interleaved: list[bool] = []

    def other_process_writes_now() -> None:
        # the other process, between this one's write of its temporary file and its rename
        monkeypatch.setattr(os, "getpid", lambda: real_getpid() + 1)
        try:
            if which == "csv":
                accuracy_csv.write_rows(result, RUN_UT_DETAILS_HEADER[:2], [["their", "row"]])
            else:
                write_settings(result, theirs)
        finally:
            monkeypatch.setattr(os, "getpid", real_getpid)

    def replace(src: object, dst: object) -> None:
        if not interleaved:
            interleaved.append(True)
            other_process_writes_now()
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", replace)
    if which == "csv":
        accuracy_csv.write_rows(result, RUN_UT_DETAILS_HEADER[:2], [["my", "row"]])
        assert accuracy_csv.read_rows(result, RUN_UT_DETAILS_HEADER[:2]) == [["my", "row"]]
    else:
        write_settings(result, mine)
        assert read_settings(result) == mine
    assert interleaved and sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_a_resume_from_the_replay_of_another_dump_with_the_same_apis_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two dumps of one model (step0 and step1, two ranks, the statistics and the tensor dump of one
    step) hold the same API names: resuming one's replay from the other's result file was accepted,
    and one file held rows of two dumps."""
    step0 = write_dump(tmp_path / "step0", FAILS_THIRD)
    step1 = write_dump(
        tmp_path / "step1",
        {**FAILS_THIRD, "Torch.cos.0.forward": forward(tensor("torch.float32", [32], -2.0, 2.0))},
    )
    assert replay(step0, tmp_path / "out", "-k", "tanh") == 0
    result, details = csv_pair(tmp_path / "out")
    before = (result.read_bytes(), details.read_bytes())
    capsys.readouterr()
    assert replay(step1, tmp_path / "out", "--msprobe-resume", str(result)) == pytest.ExitCode.USAGE_ERROR
    said = capsys.readouterr().err
    assert f"{result} was replayed with dump (--msprobe-dump, -api_info) dump.json of " in said
    assert (result.read_bytes(), details.read_bytes()) == before
    # a settings file written without the dump's fingerprint resumes as before
    settings = settings_path_for(result)
    doc = json.loads(settings.read_text(encoding="utf-8"))
    del doc["dump"]
    settings.write_text(json.dumps(doc), encoding="utf-8")
    assert replay(step0, tmp_path / "out", "--msprobe-resume", str(result)) == 1  # exp fails, as before
    assert json.loads(settings.read_text(encoding="utf-8"))["dump"].startswith("dump.json of ")
