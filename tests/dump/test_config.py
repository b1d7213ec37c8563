"""config.json and constructor validation: precedence, step/rank syntax, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from msprobe.dump.config import build_config, default_config_path
from msprobe.dump.exceptions import FileCheckException, MsprobeException, ScopeException
from msprobe.dump.steps import format_index_list, parse_index_list
from msprobe.errors import MsprobeError


def cfg_file(tmp_path: Path, data: object, name: str = "config.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(p)


def base(tmp_path: Path, **kw: object) -> dict[str, object]:
    d: dict[str, object] = {"task": "statistics", "dump_path": str(tmp_path / "out"), "level": "L1"}
    d.update(kw)
    return d


def test_packaged_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = build_config()
    assert (cfg.task, cfg.level, cfg.dump_path, cfg.step, cfg.rank) == (
        "statistics",
        "L1",
        "./dump_path",
        (),
        (),
    )
    assert os.path.isfile(default_config_path())


def test_precedence_argument_over_file(tmp_path: Path) -> None:
    path = cfg_file(tmp_path, base(tmp_path, step=[1], tensor={"list": ["relu"]}, statistics={"list": ["x"]}))
    cfg = build_config(path, task="tensor", dump_path=str(tmp_path / "arg"), level="L1", step=["2-3"])
    assert cfg.task == "tensor" and cfg.dump_path == str(tmp_path / "arg")
    assert cfg.step == (2, 3)
    assert cfg.list == ("relu",)  # the section named by the *argument* task is read


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"task": "bogus"}, ["task", "statistics", "tensor"]),
        ({"level": "L9"}, ["level", "L0", "L1", "mix"]),
        ({"task": ""}, ["task is invalid", "''"]),
        ({"task": None}, ["task is invalid", "None"]),
        ({"task": False}, ["task is invalid", "False"]),
        ({"task": {}}, ["task is invalid", "{}"]),
        ({"task": 0}, ["task is invalid", "0"]),
        ({"level": ""}, ["level is invalid", "''"]),
        ({"level": None}, ["level is invalid", "None"]),
        ({"level": False}, ["level is invalid", "False"]),
        ({"level": {}}, ["level is invalid", "{}"]),
        ({"level": 0}, ["level is invalid", "0"]),
        ({"step": "0"}, ["step", "list"]),
        ({"step": [-1]}, ["step", "between 0 and 1000000"]),
        ({"step": ["5-3"]}, ["step", "left boundary (5)", "right boundary (3)"]),
        ({"step": ["a-b"]}, ["step", "hyphen"]),
        ({"step": ["9" * 5000 + "-1"]}, ["step", "between 0 and 1000000", "5002 characters"]),
        ({"rank": [True]}, ["rank"]),
        ({"statistics": {"scope": ["Functional.relu.0.forward"]}}, ["scope", "length 2"]),
        ({"statistics": {"scope": ["relu", "gelu"]}}, ["scope", "relu"]),
        ({"statistics": {"list": "relu"}}, ["list", "list[str]"]),
        ({"statistics": {"data_mode": ["all", "input"]}}, ["data_mode", "'all' cannot be combined"]),
        ({"statistics": {"data_mode": ["sideways"]}}, ["data_mode", "sideways", "forward"]),
        ({"statistics": {"summary_mode": "sha"}}, ["summary_mode", "md5"]),
        ({"async_dump": "yes"}, ["async_dump", "boolean"]),
        ({"enable_dataloader": 1}, ["enable_dataloader"]),
        ({"task": "tensor", "async_dump": True}, ["async_dump", "list cannot be empty"]),
        ({"task": "tensor", "tensor": {"file_format": "pt"}}, ["file_format", "npy"]),
    ],
)
def test_bad_value_one_line_naming_field(tmp_path: Path, data: dict[str, object], words: list[str]) -> None:
    path = cfg_file(tmp_path, base(tmp_path, **data))
    with pytest.raises(MsprobeError) as info:
        build_config(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert path in msg
    for w in words:
        assert w in msg


def test_scope_is_scope_exception(tmp_path: Path) -> None:
    path = cfg_file(tmp_path, base(tmp_path, statistics={"scope": ["a", "b", "c"]}))
    with pytest.raises(ScopeException, match=r"^\[msprobe\] Invalid scope: .*length 3"):
        build_config(path)


def test_not_json(tmp_path: Path) -> None:
    path = cfg_file(tmp_path, "{task: statistics")
    with pytest.raises(MsprobeException) as info:
        build_config(path)
    assert "not valid JSON" in str(info.value) and "\n" not in str(info.value)


def test_missing_dump_path(tmp_path: Path) -> None:
    path = cfg_file(tmp_path, {"task": "statistics"})
    with pytest.raises(MsprobeException, match="dump_path not found"):
        build_config(path)


def test_unwritable_dump_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    path = cfg_file(tmp_path, base(tmp_path, dump_path=str(blocker / "sub")))
    with pytest.raises(MsprobeException, match=r"dump_path .* not writable"):
        build_config(path)


def test_dump_path_bad_characters(tmp_path: Path) -> None:
    path = cfg_file(tmp_path, base(tmp_path, dump_path=str(tmp_path / "a b")))
    with pytest.raises(MsprobeException, match=r"dump_path .*characters"):
        build_config(path)


def test_a_relative_dump_path_refused_for_its_folder_names_the_resolved_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused for a space in the folder it is run from, './dump' was said to hold the bad character."""
    here = tmp_path / "a b"
    here.mkdir()
    monkeypatch.chdir(here)
    resolved = r"'\./dump' \(resolved to '.*/a b/dump'\) contains characters"
    with pytest.raises(MsprobeException, match=resolved):
        build_config(task="statistics", dump_path="./dump")


def test_dump_path_with_a_nul_byte_is_one_line(tmp_path: Path) -> None:
    path = cfg_file(tmp_path, base(tmp_path, dump_path=str(tmp_path) + "/a\x00b"))
    with pytest.raises(MsprobeException, match=r"dump_path .*characters"):
        build_config(path)
    with pytest.raises(MsprobeException, match=r"dump_path .*characters"):
        build_config(task="statistics", dump_path=str(tmp_path) + "/a\x00b")


def test_constructor_argument_checks(tmp_path: Path) -> None:
    with pytest.raises(MsprobeException, match="config_path must be a string"):
        build_config(123)  # type: ignore[arg-type]
    only_ours = r"task must be one of \['statistics', 'tensor', 'structure'\] \("
    with pytest.raises(MsprobeException, match=only_ours):
        build_config(task="nope")
    with pytest.raises(MsprobeException, match=r"level must be one of"):
        build_config(level="L7")
    with pytest.raises(MsprobeException, match="dump_path must be a string"):
        build_config(dump_path=5)  # type: ignore[arg-type]


def test_config_file_checks(tmp_path: Path) -> None:
    with pytest.raises(FileCheckException, match="does not exist"):
        build_config(str(tmp_path / "missing.json"))
    txt = cfg_file(tmp_path, base(tmp_path), name="config.txt")
    with pytest.raises(FileCheckException, match=r"\.json"):
        build_config(txt)
    real = cfg_file(tmp_path, base(tmp_path))
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with pytest.raises(FileCheckException, match="symbolic link"):
        build_config(str(link))


def _uncaught(script: str) -> str:
    """The last stderr line of ``script`` dying of an uncaught msprobe error, whose traceback shows
    the user's line and the entry point they called, none of the checks behind it (no excepthook)."""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith("Traceback"), res.stderr
    frames = [ln for ln in lines if ln.lstrip().startswith('File "')]
    assert frames[0].lstrip().startswith('File "<string>", line 2'), res.stderr  # the user's call
    assert len([f for f in frames if "msprobe" in f]) == 1, res.stderr  # then only the entry point
    assert lines[-1].startswith("msprobe.dump.exceptions."), res.stderr
    return lines[-1]


def test_uncaught_config_error_is_one_line_at_the_users_call(tmp_path: Path) -> None:
    path = cfg_file(tmp_path, base(tmp_path, task="bogus"))
    script = f"from msprobe.pytorch import PrecisionDebugger\nPrecisionDebugger(config_path={path!r})\n"
    line = _uncaught(script)
    assert "task" in line and "bogus" in line, line


@given(
    st.lists(st.one_of(st.integers(0, 300), st.tuples(st.integers(0, 300), st.integers(0, 300))), max_size=8)
)
def test_step_syntax_law(items: list[object]) -> None:
    raw: list[int | str] = []
    expect: set[int] = set()
    for it in items:
        if isinstance(it, tuple):
            lo, hi = sorted(it)
            raw.append(f"{lo}-{hi}")
            expect.update(range(lo, hi + 1))
        else:
            raw.append(it)  # type: ignore[arg-type]
            expect.add(it)  # type: ignore[arg-type]
    got = parse_index_list(raw, "step")
    assert got == tuple(sorted(expect))
    assert parse_index_list(list(got), "step") == got  # idempotent
    text = format_index_list(got)  # "[0, 2-5]": every part parses back to the same set
    parts = [int(p) if p.isdigit() else p for p in text[1:-1].split(", ") if p]
    assert parse_index_list(parts, "step") == got


def test_dump_folder_the_os_refuses_is_one_line_at_start(tmp_path: Path) -> None:
    # /proc passes every static check (it exists, is a directory, root may "write" to it), yet
    # creating a folder there fails: start() must say so in one line, and exit must not crash.
    cfg = cfg_file(tmp_path, {"task": "statistics", "dump_path": "/proc/msprobe_x", "level": "L1"})
    script = (
        f"from msprobe.pytorch import PrecisionDebugger\nPrecisionDebugger(config_path={cfg!r}).start()\n"
    )
    line = _uncaught(script)
    assert "/proc/msprobe_x" in line, line


FULL_811 = {
    "task": "statistics",
    "dump_path": "OUT",
    "rank": [],
    "step": [0, "2-3"],
    "level": "mix",
    "enable_dataloader": False,
    "async_dump": False,
    "statistics": {
        "scope": [],
        "list": [],
        "tensor_list": ["relu"],
        "data_mode": ["all"],
        "summary_mode": "md5",
        "device": "host",
        "precision": "high",
    },
    "tensor": {
        "scope": [],
        "list": [],
        "data_mode": ["forward", "input"],
        "summary_mode": "statistics",
        "file_format": "npy",
        "online_run_ut": False,
        "nfs_path": "",
        "host": "",
        "port": -1,
        "tls_path": "",
        "online_run_ut_recompute": False,
    },
    "overflow_check": {"overflow_nums": 1, "check_mode": "all"},
    "free_benchmark": {
        "scope": [],
        "list": [],
        "fuzz_device": "npu",
        "pert_mode": "improve_precision",
        "handler_type": "check",
        "fuzz_level": "L1",
        "fuzz_stage": "forward",
        "if_preheat": False,
        "preheat_step": 15,
        "max_sample": 20,
    },
    "run_ut": {"white_list": [], "black_list": [], "error_data_path": "./", "is_online": False},
    "grad_probe": {"grad_level": "L1", "param_list": [], "bounds": [-1, 0, 1]},
}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_every_811_key_is_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = cfg_file(tmp_path, {**FULL_811, "dump_path": str(tmp_path / "out")})
    with caplog.at_level("WARNING", logger="msprobe"):
        build_config(path)
    assert _warnings(caplog) == []


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"taks": "tensor"}, ["'taks'", "top-level", "did you mean 'task'"]),
        ({"levle": "L0"}, ["'levle'", "did you mean 'level'"]),
        ({"statistics": {"scopes": []}}, ["'scopes'", "'statistics' section", "did you mean 'scope'"]),
        ({"statistics": {"data_modes": ["forward"]}}, ["'data_modes'", "did you mean 'data_mode'"]),
        ({"list": ["linear"]}, ["'list'", "top-level", "belongs in the 'statistics' section"]),
        ({"task": "tensor", "scope": []}, ["'scope'", "belongs in the 'tensor' section"]),
        ({"file_format": "npy"}, ["'file_format'", "belongs in the 'tensor' section"]),
        ({"zzzz": 1}, ["'zzzz'", "is ignored"]),
    ],
)
def test_unknown_key_is_one_warning_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, extra: dict[str, object], words: list[str]
) -> None:
    path = cfg_file(tmp_path, base(tmp_path, **extra))
    with caplog.at_level("WARNING", logger="msprobe"):
        build_config(path)
    (line,) = _warnings(caplog)
    assert "\n" not in line
    assert path in line
    for w in words:
        assert w in line


@pytest.mark.parametrize(
    ("data", "words", "check"),
    [
        ({"task": "structure", "level": "L1"}, ["level 'L1'", "structure", "mix is used"], ("level", "mix")),
        (
            {"async_dump": True, "statistics": {"summary_mode": "md5"}},
            ["async_dump", "md5", "ignored"],
            ("md5", False),
        ),
    ],
)
def test_value_changed_by_a_rule_is_one_warning(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    data: dict[str, object],
    words: list[str],
    check: tuple[str, object],
) -> None:
    path = cfg_file(tmp_path, base(tmp_path, **data))
    with caplog.at_level("WARNING", logger="msprobe"):
        cfg = build_config(path)
    assert getattr(cfg, check[0]) == check[1]  # the documented behaviour is kept
    (line,) = _warnings(caplog)
    assert path in line
    for w in words:
        assert w in line


def test_step_argument_error_names_the_argument(tmp_path: Path) -> None:
    path = cfg_file(tmp_path, base(tmp_path, step=[0]))
    with pytest.raises(MsprobeException) as info:
        build_config(path, step=["x"])
    assert "PrecisionDebugger(step=...)" in str(info.value) and "'x'" in str(info.value)


def test_dump_path_through_a_dangling_symlink_is_refused_at_construction(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "missing" / "target")
    path = cfg_file(tmp_path, base(tmp_path, dump_path=str(tmp_path / "link" / "sub")))
    with pytest.raises(MsprobeException) as info:
        build_config(path)
    assert "symbolic link to a missing target" in str(info.value) and "config.json" in str(info.value)
