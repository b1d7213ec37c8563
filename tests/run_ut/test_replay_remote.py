"""Scale-out with xdist's remote execution (``--tx``): workers in another folder, as on another host.

A ``popen//chdir=`` worker runs in its own folder with the dump copied there by ``--rsyncdir``, which
is what an ``ssh=`` worker sees: no path of the controller's host is valid for it. The controller stays
the only writer, so the CSVs are byte-identical to a one-process run, and nothing lands in the
workers' folder but the copied dump.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay_dumps import FAILS_THIRD, copy_fixture, csv_pair, read_csv, write_dump

import msprobe.run_ut.replay
import msprobe.run_ut.session  # noqa: F401

pytestmark = pytest.mark.slow  # each run brings up two fresh interpreters

APIS = FAILS_THIRD  # the dump of the local runs' tests


def replay(dump: Path, out: Path, *extra: str) -> int:
    # xdist rewrites every separate argument that names an existing path into the rsync root holding
    # it (so the dump, given so, is the worker's copy) and refuses one outside them: other path
    # options go in the ``--opt=value`` form.
    args = ["-q", "-p", "no:cacheprovider", "-W", "ignore"]
    return int(pytest.main([*args, "--msprobe-dump", str(dump), f"--msprobe-out={out}", *extra]))


def remote(dump: Path, folder: Path) -> list[str]:
    """Two workers running in ``folder``, the dump copied there (the dump root named as a path)."""
    return ["-d", "--tx", f"2*popen//chdir={folder}", "--rsyncdir", str(dump)]


def assert_same_bytes(a: Path, b: Path) -> None:
    for x, y in zip(csv_pair(a), csv_pair(b), strict=True):
        assert x.read_bytes() == y.read_bytes(), (x, y)


def test_two_popen_workers_write_the_bytes_of_one_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = copy_fixture("cnn_statistics", tmp_path)
    assert replay(dump, tmp_path / "n0", "-n", "0") in (0, 1)
    assert replay(dump, tmp_path / "tx", "-d", "--tx", "2*popen") in (0, 1)
    out = capsys.readouterr().out
    assert "msprobe: gw0: " in out and "msprobe: gw1: " in out
    assert_same_bytes(tmp_path / "n0", tmp_path / "tx")


def test_workers_in_another_folder_write_nothing_and_the_controller_writes_each_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two ranks with the same API names: rows must reach their own rank's CSVs though the workers'
    # paths to the dump are not the controller's.
    root = tmp_path / "dump"
    write_dump(root / "rank0", APIS)
    write_dump(root / "rank1", dict(list(APIS.items())[1:]))
    assert replay(root, tmp_path / "n0", "-n", "0") in (0, 1)
    far = tmp_path / "far"
    far.mkdir()
    assert replay(root, tmp_path / "tx", *remote(root, far)) in (0, 1)
    out = capsys.readouterr().out
    assert "msprobe: gw0: " in out and "msprobe: gw1: " in out
    for rank in ("rank0", "rank1"):
        assert_same_bytes(tmp_path / "n0" / rank, tmp_path / "tx" / rank)
    assert (far / "dump" / "rank0" / "dump.json").is_file()  # the workers replayed their own copy
    assert not list(far.rglob("*.csv"))


def test_resume_deselects_the_same_apis_on_workers_in_another_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = write_dump(tmp_path / "d", APIS)
    assert replay(dump, tmp_path / "whole", "-n", "0") == 1
    assert replay(dump, tmp_path / "part", "-n", "0", "-x") == 1  # stops at the failing third API
    result, details = csv_pair(tmp_path / "part")
    assert len(read_csv(result)) == 1 + 3
    far = tmp_path / "far"
    far.mkdir()
    capsys.readouterr()
    code = replay(dump, tmp_path / "ignored", f"--msprobe-resume={result}", *remote(dump, far))
    assert code == 1  # the failing third API's row is kept: the whole run's exit status
    out = capsys.readouterr().out
    assert "2 passed" in out  # workers deselect; the controller only counts what ran
    assert sum(int(line.split()[2]) for line in out.splitlines() if line.startswith("msprobe: gw")) == 2
    whole = csv_pair(tmp_path / "whole")
    assert result.read_bytes() == whole[0].read_bytes()
    assert details.read_bytes() == whole[1].read_bytes()


def test_config_lists_reach_workers_that_cannot_read_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = write_dump(tmp_path / "d", APIS)
    monkeypatch.chdir(tmp_path)
    config = Path("controller_only") / "config.json"  # relative: not there in the workers' folder
    config.parent.mkdir()
    config.write_text(json.dumps({"run_ut": {"black_list": ["exp", "sin"]}}), encoding="utf-8")
    far = tmp_path / "far"
    far.mkdir()
    assert replay(dump, tmp_path / "n0", "-n", "0", f"--msprobe-config={config}") == 0
    assert replay(dump, tmp_path / "tx", f"--msprobe-config={config}", *remote(dump, far)) == 0
    rows = {r[0]: r[1] for r in read_csv(csv_pair(tmp_path / "tx")[0])[1:]}
    assert rows["Torch.exp.0"] == rows["Torch.sin.0"] == "SKIP"
    assert_same_bytes(tmp_path / "n0", tmp_path / "tx")
