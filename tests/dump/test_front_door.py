"""PrecisionDebugger front door: singleton, precedence, set_init_step, seed_all, custom-API errors."""

from __future__ import annotations

import random
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from msprobe.dump.exceptions import MsprobeException
from msprobe.pytorch import PrecisionDebugger, seed_all
from tests.dump.conftest import load_dump, write_config


def test_singleton_ignores_second_arguments(tmp_path: Path, debugger: Any) -> None:
    first = debugger()
    second = PrecisionDebugger(dump_path=str(tmp_path / "elsewhere"))
    assert second is first
    assert first.config.dump_path == str(tmp_path / "dump")


def test_second_construction_with_other_arguments_warns(
    tmp_path: Path, debugger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    first = debugger()
    with caplog.at_level("WARNING", logger="msprobe"):
        assert PrecisionDebugger(config_path=str(tmp_path / "config.json")) is first  # same: quiet
        same = PrecisionDebugger(task="tensor", model=torch.nn.Sequential(torch.nn.Linear(2, 2)))
    assert same is first and first.config.task == "statistics"
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "\n" not in line
    for w in ("task='tensor'", "model=<Sequential>", "ignored", "task statistics", "level L1", "dump_path"):
        assert w in line


def test_rank_list_excluding_this_process_warns_once(
    tmp_path: Path, debugger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    dbg = debugger(rank=[3, 5])
    with caplog.at_level("WARNING", logger="msprobe"):
        for _ in range(3):
            dbg.start()
            torch.relu(torch.ones(2))
            dbg.stop()
            dbg.step()
    assert not (tmp_path / "dump").exists() or not any((tmp_path / "dump").iterdir())
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    for w in ("config.json", "rank list [3, 5]", "dumps nothing", '"rank": []'):
        assert w in line


def test_save_below_debug_warns_once(debugger: Any, caplog: pytest.LogCaptureFixture) -> None:
    dbg = debugger()  # level L1
    with caplog.at_level("WARNING", logger="msprobe"):
        dbg.save(torch.ones(2), "x")
        dbg.save(torch.ones(2), "y")
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    for w in ("save()", "level L1", "level debug"):
        assert w in line


def _restore_dropout() -> None:
    for name in ("dropout", "dropout2d", "dropout3d"):
        fn = getattr(F, name)
        setattr(F, name, getattr(fn, "_msprobe_original", fn))


@pytest.mark.parametrize("seed_first", [True, False])
def test_dropout_is_functional_whether_seed_all_comes_before_or_after_the_debugger(
    tmp_path: Path, debugger: Any, seed_first: bool
) -> None:
    try:
        if seed_first:
            seed_all()
        dbg = debugger(level="L1")
        if not seed_first:
            seed_all()  # replaces F.dropout after the debugger knows its API functions
        x = torch.ones(4, 4)
        dbg.start()
        torch.nn.Dropout(0.5)(x)
        F.dropout2d(x.view(1, 1, 4, 4), 0.5)
        dbg.stop()
    finally:
        _restore_dropout()
    names = sorted(k.rsplit(".", 2)[0] for k in load_dump(tmp_path / "dump" / "step0" / "rank")["data"])
    assert names == ["Functional.dropout", "Functional.dropout2d"]


def test_no_instance_errors() -> None:
    PrecisionDebugger._shutdown()
    with pytest.raises(Exception, match="PrecisionDebugger instance is not created"):
        PrecisionDebugger.start()
    with pytest.raises(Exception, match="PrecisionDebugger instance is not created"):
        PrecisionDebugger.set_init_step(1)


@pytest.mark.parametrize("call", ["start", "stop", "step", "save", "forward_backward_dump_end"])
def test_no_instance_is_one_line_cut_at_the_users_call(call: str) -> None:
    PrecisionDebugger._shutdown()
    args = (torch.ones(1), "x") if call == "save" else ()
    with pytest.raises(MsprobeException) as info:
        getattr(PrecisionDebugger, call)(*args)
    assert "PrecisionDebugger instance is not created" in str(info.value)
    assert "\n" not in str(info.value)
    frames = traceback.extract_tb(info.value.__traceback__)
    # this test's line, then the front door's entry point: no frame of the checks behind it
    assert [f.filename.rsplit("/", 1)[-1] for f in frames] == ["test_front_door.py", "frontdoor.py"]
    assert frames[-1].name == "entry"


def test_constructor_arguments_win(tmp_path: Path) -> None:
    PrecisionDebugger._shutdown()
    try:
        dbg = PrecisionDebugger(config_path=write_config(tmp_path), task="tensor", level="L1", step=[3])
        assert (dbg.config.task, dbg.config.step, dbg.config.saves_tensors) == ("tensor", (3,), True)
    finally:
        PrecisionDebugger._shutdown()


def test_set_init_step(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(step=[5, 6])
    with pytest.raises(MsprobeException, match="must be an integer"):
        dbg.set_init_step("1")
    with pytest.raises(MsprobeException, match="greater than or equal to 0"):
        dbg.set_init_step(-1)
    dbg.set_init_step(5)
    x = torch.ones(2)
    for _ in range(3):
        dbg.start()
        torch.relu(x)
        dbg.stop()
        dbg.step()
    assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == ["step5", "step6"]
    assert dbg.service.session.finished


def test_forward_backward_dump_end_is_stop(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger()
    dbg.start()
    torch.relu(torch.ones(1))
    dbg.forward_backward_dump_end()
    torch.tanh(torch.ones(1))  # off now
    assert list(load_dump(tmp_path / "dump" / "step0" / "rank")["data"]) == ["Torch.relu.0.forward"]


def test_custom_api_errors(debugger: Any) -> None:
    import types

    dbg = debugger()
    mod = types.ModuleType("m")
    with pytest.raises(MsprobeException, match="does not have nope"):
        dbg.register_custom_api(mod, "nope")
    mod.f = lambda x: x  # type: ignore[attr-defined]
    with pytest.raises(MsprobeException, match="api_prefix must be string"):
        dbg.register_custom_api(mod, "f", api_prefix=3)  # type: ignore[arg-type]


def test_seed_all_reproduces_and_removes_dropout() -> None:
    original = F.dropout
    try:
        seed_all(7)
        a = (random.random(), np.random.rand(), torch.rand(1).item())
        seed_all(7)
        b = (random.random(), np.random.rand(), torch.rand(1).item())
        assert a == b
        x = torch.ones(100)
        assert torch.equal(torch.nn.Dropout(0.5)(x), x)  # rm_dropout=True: p forced to 0
        with pytest.raises(MsprobeException, match="Seed must be between"):
            seed_all(-1)
        with pytest.raises(MsprobeException, match="Seed must be integer"):
            seed_all(1.5)  # type: ignore[arg-type]
        with pytest.raises(MsprobeException, match="mode must be bool"):
            seed_all(1, mode=1)  # type: ignore[arg-type]
    finally:
        torch.nn.functional.dropout = original
        torch.nn.functional.dropout2d = getattr(F.dropout2d, "_msprobe_original", F.dropout2d)
        torch.nn.functional.dropout3d = getattr(F.dropout3d, "_msprobe_original", F.dropout3d)
        torch.use_deterministic_algorithms(False)


def test_deprecated_model_argument(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    PrecisionDebugger._shutdown()
    net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    try:
        with caplog.at_level("WARNING", logger="msprobe"):
            dbg = PrecisionDebugger(config_path=write_config(tmp_path, level="L0"), model=net)
        assert any("deprecated" in r.message and "start(model=" in r.message for r in caplog.records)
        dbg.start()  # uses the constructor's model
        net(torch.ones(1, 2))
        dbg.stop()
        assert "Module.0.Linear.forward.0" in load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    finally:
        PrecisionDebugger._shutdown()


def test_rank_list_without_distributed_dumps_nothing(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(rank=[0])
    dbg.start()
    torch.relu(torch.ones(1))
    dbg.stop()
    assert not (tmp_path / "dump").exists()


def test_start_at_debug_level_records_nothing(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(level="debug")
    dbg.start()
    torch.relu(torch.ones(1))
    dbg.stop()
    dbg.save(torch.ones(2), "only_me")
    dbg.step()
    data = load_dump_debug(tmp_path / "dump" / "step0" / "rank")
    assert list(data) == ["only_me.0.debug"]


def load_dump_debug(rank: Path) -> dict[str, Any]:
    import json

    return json.loads((rank / "debug.json").read_text())["data"]


@pytest.mark.parametrize(("level", "token_range"), [("L0", None), ("mix", None), ("L1", [0, 1])])
@pytest.mark.parametrize("empty", [[], ()])
def test_start_with_an_empty_model_list_is_one_line(
    debugger: Any, level: str, token_range: list[int] | None, empty: list[Any] | tuple[Any, ...]
) -> None:
    """An empty list is no model: where one is needed it is the one-line error (not an IndexError
    from the token counter, nor a dump that records nothing and ignores the next start's model)."""
    dbg = debugger(level=level)
    with pytest.raises(MsprobeException, match="empty") as info:
        dbg.start(model=empty, token_range=token_range)
    assert "\n" not in str(info.value)


def test_start_with_an_empty_model_list_at_l1_leaves_the_model_open(
    debugger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    dbg = debugger(level="L1")
    net = torch.nn.Linear(2, 2)
    dbg.start(model=[])
    dbg.stop()
    dbg.step()
    with caplog.at_level("WARNING", logger="msprobe"):
        dbg.start(model=net)
        dbg.stop()
    assert "another model" not in caplog.text
