"""Bad input is an error whose message is one line naming the problem, with a traceback of the
user's own call only; static graph fails at start()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import mindspore as ms
import pytest
from nets import data, write_config

from msprobe.dump.exceptions import MsprobeException
from msprobe.mindspore import PrecisionDebugger


def _script_error(tmp_path, body: str) -> str:
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(body))
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"GLOG_v": "3", "PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
    assert lines[-1].startswith("msprobe.dump.exceptions."), proc.stderr
    frames = [ln for ln in lines if ln.lstrip().startswith('File "')]
    assert 'user.py"' in frames[0], proc.stderr  # the user's line, then only the entry point
    assert len([f for f in frames if "msprobe" in f]) == 1, proc.stderr
    return lines[-1]


def test_unknown_level_is_one_line(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d"), "level": "L9"}))
    line = _script_error(
        tmp_path,
        f"""
        from msprobe.mindspore import PrecisionDebugger
        PrecisionDebugger(config_path={str(cfg)!r})
    """,
    )
    assert "L9" in line and "cfg.json" in line


def test_model_that_is_not_a_cell_is_one_line(tmp_path):
    line = _script_error(
        tmp_path,
        f"""
        from msprobe.mindspore import PrecisionDebugger
        d = PrecisionDebugger(dump_path={str(tmp_path / "d")!r}, level="L0")
        d.start("net")
    """,
    )
    assert "mindspore.nn.Cell" in line and "str" in line


def test_static_graph_l2_on_cpu_is_one_line(tmp_path):
    line = _script_error(
        tmp_path,
        f"""
        import mindspore as ms
        ms.set_context(mode=ms.GRAPH_MODE)
        from msprobe.mindspore import PrecisionDebugger
        PrecisionDebugger(dump_path={str(tmp_path / "d")!r}, task="tensor", level="L2")
    """,
    )
    assert "L2" in line and "Ascend" in line


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_graph_mode_fails_at_start(tmp_path, level):
    cfg = write_config(str(tmp_path / "cfg.json"), "statistics", level, str(tmp_path / "d"))
    dbg = PrecisionDebugger(config_path=cfg)
    ms.set_context(mode=ms.GRAPH_MODE)
    from nets import Net

    with pytest.raises(MsprobeException, match="PYNATIVE_MODE") as info:
        dbg.start(Net())
    if level == "L0":
        assert "Ascend" in str(info.value)


def test_l0_without_model_and_token_range_without_model(tmp_path):
    cfg = write_config(str(tmp_path / "cfg.json"), "statistics", "L0", str(tmp_path / "d"))
    dbg = PrecisionDebugger(config_path=cfg)
    with pytest.raises(MsprobeException, match="model cannot be None"):
        dbg.start()
    with pytest.raises(MsprobeException, match="token_range"):
        dbg.start(token_range=[0, 1])
    with pytest.raises(MsprobeException, match="integer"):
        dbg.start(token_range=[0, 1.5])


def test_start_before_construction_is_a_plain_exception():
    with pytest.raises(Exception, match="PrecisionDebugger instance is not created"):
        PrecisionDebugger.start()


def test_singleton_ignores_second_arguments(tmp_path):
    first = PrecisionDebugger(dump_path=str(tmp_path / "a"))
    second = PrecisionDebugger(dump_path=str(tmp_path / "b"))
    assert first is second and first.config.dump_path == str(tmp_path / "a")
    assert (tmp_path / "a").is_dir()  # created at construction, absolute
    first.start()
    data(0, (2,)) * 2.0
    first.stop()
    assert (tmp_path / "a" / "step0" / "rank" / "dump.json").is_file()


@pytest.mark.parametrize(("batch", "survivors"), [("1", 3), ("64", 0)])
def test_records_survive_sigkill_and_rebuild(tmp_path, batch, survivors):
    """With MSPROBE_MS_STAT_BATCH=1 every finished record is in the journal; rebuild writes dump.json."""
    from msprobe.dump.cli import main as rebuild_main

    out = tmp_path / "d"
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, signal
        import numpy as np
        from mindspore import Tensor, ops
        from msprobe.mindspore import PrecisionDebugger
        d = PrecisionDebugger(dump_path={str(out)!r})
        x = Tensor(np.ones((2, 2), np.float32))
        d.start()
        ops.neg(ops.exp(ops.abs(x)))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    )
    env = dict(os.environ, MSPROBE_MS_STAT_BATCH=batch, GLOG_v="3")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9
    assert rebuild_main([str(out)]) == 0
    with open(out / "step0" / "rank" / "dump.json") as fh:
        names = list(json.load(fh)["data"])
    assert len(names) == survivors
    if survivors:
        assert names == ["Functional.abs.0.forward", "Functional.exp.0.forward", "Functional.neg.0.forward"]
        # each record's call stack with it, the last one's too (stored after its record, it waited
        # for a next record that never came)
        with open(out / "step0" / "rank" / "stack.json") as fh:
            stacked = {n for entry in json.load(fh).values() for n in entry[0]}
        assert stacked == set(names)


@pytest.mark.parametrize(
    ("token_range", "match"),
    [((1,), "2 items"), ([1.0, 2], "integer"), ([3, 1], "less than the end"), ("1-2", "list or tuple")],
)
def test_token_range_checked_as_in_pytorch(tmp_path, token_range, match):
    """As upstream 8.1.1: the same checks and messages as the PyTorch front door."""
    from nets import Net

    cfg = write_config(str(tmp_path / "cfg.json"), "statistics", "L1", str(tmp_path / "d"))
    dbg = PrecisionDebugger(config_path=cfg)
    with pytest.raises(MsprobeException, match=match):
        dbg.start(Net(), token_range=token_range)


def test_static_graph_config_keys_are_checked_as_upstream(tmp_path, caplog):
    """MindSpore's config.json may hold a summary_mode list and the KBK device/precision keys: a user's
    8.1.1 config with a list stopped at construction; a bad device passed without a word."""
    listed = write_config(
        str(tmp_path / "a.json"), "statistics", "L1", str(tmp_path / "d"), summary_mode=["max", "min"]
    )
    with caplog.at_level("WARNING", logger="msprobe"):
        debugger = PrecisionDebugger(config_path=listed)
    assert debugger.config.summary_mode == "statistics"
    assert "summary_mode: a list selects the statistics of MindSpore's static-graph dump" in caplog.text
    PrecisionDebugger._shutdown()
    for name, value, match in (
        ("summary_mode", ["max", "median"], r"summary_mode is invalid"),
        ("summary_mode", [], r"summary_mode is invalid"),
        ("device", "gpu", r"statistics\.device: Config param \[device\] is invalid, 'gpu'"),
        ("precision", "fp16", r"Config param \[precision\] is invalid"),
    ):
        bad = write_config(
            str(tmp_path / f"{name}.json"), "statistics", "L1", str(tmp_path / "d"), **{name: value}
        )
        with pytest.raises(MsprobeException, match=match):
            PrecisionDebugger(config_path=bad)
        PrecisionDebugger._shutdown()


@pytest.mark.parametrize(("level", "token_range"), [("L0", None), ("L1", [0, 1])])
def test_start_with_an_empty_model_list_is_one_line(tmp_path, level, token_range):
    """An empty list is no model: the one-line error, not an IndexError from the token counter."""
    d = PrecisionDebugger(dump_path=str(tmp_path / "d"), level=level)
    with pytest.raises(MsprobeException, match="empty list") as info:
        d.start([], token_range=token_range)
    assert "\n" not in str(info.value)


def test_dump_folder_that_cannot_be_created_is_one_line(tmp_path, monkeypatch):
    import errno

    import msprobe.dump.mindspore.debugger as msdbg
    from msprobe.dump.exceptions import FileCheckException

    def refuse(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(msdbg, "make_dirs", refuse)
    with pytest.raises(FileCheckException, match="cannot create the dump folder") as info:
        PrecisionDebugger(dump_path=str(tmp_path / "d"))
    assert "\n" not in str(info.value)
