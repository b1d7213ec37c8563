"""config.json's filters and entry points as 8.1.1 applies them to modules: a module record judged when
the module ends, a listed module dumped whole at mix, construct.json kept whole, and the config corners
(``enable_dataloader`` without a model, ``forward_backward_dump_end``, ``tensor_list`` at debug, an empty
``dump_path`` argument)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from msprobe.dump.exceptions import MsprobeException
from tests.dump.conftest import load_dump, write_config

RANK = Path("dump") / "step0" / "rank"


class Sub(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class Net(nn.Module):
    """linear_1 (Functional.linear.0) -> block = Sub(fc (Functional.linear.1), Torch.relu.0) ->
    linear_2 (Functional.linear.2) -> Functional.relu.0"""

    def __init__(self) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(8, 4)
        self.block = Sub()
        self.linear_2 = nn.Linear(4, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.linear_2(self.block(self.linear_1(x))))


def _dump(tmp_path: Path, debugger: Any, **fields: Any) -> tuple[list[str], dict[str, Any]]:
    """Record names (file order) and construct.json of one forward + backward of Net."""
    torch.manual_seed(0)
    net = Net()
    dbg = debugger(**fields)
    dbg.start(model=net)
    net(torch.randn(3, 8)).sum().backward()
    dbg.stop()
    dbg.step()
    construct = json.loads((tmp_path / RANK / "construct.json").read_text())
    return list(load_dump(tmp_path / RANK)["data"]), construct


def _section(**fields: Any) -> dict[str, Any]:
    return {"statistics": {"scope": [], "list": [], "data_mode": ["all"], **fields}}


def _forward_records(names: list[str]) -> list[str]:
    return [n for n in names if ".forward" in n]


@pytest.mark.parametrize(
    ("scope", "recorded", "left_out"),
    [
        # Sub begins before the window opens at fc and ends inside it: recorded
        (
            ["Module.block.fc.Linear.forward.0", "Module.linear_2.Linear.forward.0"],
            "Module.block.Sub.forward.0",
            None,
        ),
        # the window closes when fc ends, before Sub ends: Sub is not recorded
        (
            ["Module.linear_1.Linear.forward.0", "Module.block.fc.Linear.forward.0"],
            None,
            "Module.block.Sub.forward.0",
        ),
    ],
)
def test_l0_scope_judges_a_module_when_it_ends(
    tmp_path: Path, debugger: Any, scope: list[str], recorded: str | None, left_out: str | None
) -> None:
    names, _ = _dump(tmp_path, debugger, level="L0", **_section(scope=scope))
    forward = _forward_records(names)
    assert scope[0] in forward and scope[1] in forward  # the end module is fully included
    assert recorded is None or recorded in forward
    assert left_out is None or left_out not in forward


def test_mix_api_scope_takes_the_modules_that_end_inside_it(tmp_path: Path, debugger: Any) -> None:
    scope = ["Functional.linear.1.forward", "Functional.linear.2.forward"]
    names, _ = _dump(tmp_path, debugger, level="mix", **_section(scope=scope))
    assert _forward_records(names) == [
        "Functional.linear.1.forward",
        "Module.block.fc.Linear.forward.0",
        "Torch.relu.0.forward",
        "Module.block.Sub.forward.0",
        "Functional.linear.2.forward",  # the end API: its inputs (the window closes at its output)
    ]


@pytest.mark.parametrize("listed", ["Module.block.Sub.forward.0", "block"])
def test_mix_list_naming_a_module_dumps_every_call_inside_it(
    tmp_path: Path, debugger: Any, listed: str
) -> None:
    names, _ = _dump(tmp_path, debugger, level="mix", **_section(list=[listed]))
    assert _forward_records(names) == [
        "Functional.linear.1.forward",
        "Module.block.fc.Linear.forward.0",
        "Torch.relu.0.forward",
        "Module.block.Sub.forward.0",
    ]
    # whole-module mode runs from the module's begin to its end: no API backward inside it
    assert not [n for n in names if n.endswith(".backward") and not n.startswith("Module")]


def test_l1_list_naming_a_module_dumps_no_api(tmp_path: Path, debugger: Any) -> None:
    """Whole-module mode is mix's: at L1 the list is a substring match on API names only."""
    names, _ = _dump(tmp_path, debugger, level="L1", **_section(list=["block"]))
    assert names == []


@pytest.mark.parametrize(
    "section",
    [
        _section(data_mode=["backward"]),
        _section(list=["relu"]),
        _section(scope=["Functional.linear.1.forward", "Functional.linear.2.forward"]),
    ],
)
def test_mix_construct_json_holds_every_call_whatever_is_recorded(
    tmp_path: Path, debugger: Any, section: dict[str, Any]
) -> None:
    _, construct = _dump(tmp_path, debugger, level="mix", **section)
    full = tmp_path / "full"
    full.mkdir()
    _, everything = _dump(full, debugger_at(full), level="mix", **_section())
    assert construct == everything


def debugger_at(path: Path) -> Any:
    from msprobe.pytorch import PrecisionDebugger

    def make(**fields: Any) -> Any:
        PrecisionDebugger._shutdown()
        return PrecisionDebugger(config_path=write_config(path, **fields))

    return make


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_enable_dataloader_at_a_module_level_needs_the_model(debugger: Any, level: str) -> None:
    with pytest.raises(MsprobeException, match=r"config\.json: enable_dataloader at level .*'model'"):
        debugger(level=level, enable_dataloader=True)


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_the_deprecated_model_argument_is_not_moved_where_enable_dataloader_needs_it(
    tmp_path: Path, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning said to pass the model to start() instead, which enable_dataloader then refused."""
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()
    path = write_config(tmp_path, level=level, enable_dataloader=True)
    with caplog.at_level("WARNING", logger="msprobe"):
        PrecisionDebugger(config_path=path, model=torch.nn.Linear(2, 2))
    PrecisionDebugger._shutdown()
    assert "deprecated, as is enable_dataloader, which needs it" in caplog.text


def test_forward_backward_dump_end_is_skipped_like_stop_under_enable_dataloader(
    tmp_path: Path, debugger: Any
) -> None:
    dbg = debugger(enable_dataloader=True)
    for batch in torch.utils.data.DataLoader(torch.randn(4, 8), batch_size=2):
        torch.relu(batch)
        dbg.forward_backward_dump_end()
        torch.sigmoid(batch)
    dbg.service.stop()
    for step in ("step0", "step1"):
        assert list(load_dump(tmp_path / "dump" / step / "rank")["data"]) == [
            "Torch.relu.0.forward",
            "Torch.sigmoid.0.forward",
        ]


def test_tensor_list_is_ignored_at_level_debug(
    tmp_path: Path, debugger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        dbg = debugger(level="debug", statistics={"tensor_list": ["x"]})
    assert any("tensor_list is ignored at level debug" in r.getMessage() for r in caplog.records)
    dbg.save(torch.ones(2), "x")
    dbg.step()
    debug = json.loads((tmp_path / RANK / "debug.json").read_text())
    assert "data_name" not in debug["data"]["x.0.debug"]
    assert not (tmp_path / RANK / "dump_tensor_data").exists()


def test_an_empty_dump_path_argument_takes_the_files(tmp_path: Path) -> None:
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()
    try:
        dbg = PrecisionDebugger(config_path=write_config(tmp_path), dump_path="")
        assert dbg.config.dump_path == str(tmp_path / "dump")
    finally:
        PrecisionDebugger._shutdown()


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_scope_starting_at_a_module_backward_opens_when_that_backward_begins(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """The backward of what runs inside ``block`` (its fc, and at mix the APIs) lies between Sub's
    backward begin and end: inside a window that starts at Sub's backward."""
    scope = ["Module.block.Sub.backward.0", "Module.linear_1.Linear.backward.0"]
    names, _ = _dump(tmp_path, debugger, level=level, **_section(scope=scope))
    backward = [n for n in names if ".backward" in n]
    expected = {"Module.block.Sub.backward.0", "Module.block.fc.Linear.backward.0", scope[1]}
    if level == "mix":
        # (linear_1's input needs no gradient: its module backward ends before its linear's backward)
        expected |= {"Torch.relu.0.backward", "Functional.linear.1.backward"}
    assert set(backward) == expected


@pytest.mark.parametrize(
    ("fields", "grads"),
    [
        # a backward-only list: the module's forward is left out, its backward and gradients kept
        (_section(list=["Module.block.fc.Linear.backward.0"]), ["Module.block.fc.Linear.parameters_grad"]),
        # a backward scope: every module whose backward is inside it keeps its gradients
        (
            _section(scope=["Module.linear_2.Linear.backward.0", "Module.block.Sub.backward.0"]),
            ["Module.linear_2.Linear.parameters_grad", "Module.block.fc.Linear.parameters_grad"],
        ),
        # a forward scope: closed when the gradients arrive, no module backward inside it: none kept
        (_section(scope=["Module.block.fc.Linear.forward.0", "Module.linear_2.Linear.forward.0"]), []),
        # no filter: every module with trainable parameters
        (
            {},
            [
                "Module.linear_1.Linear.parameters_grad",
                "Module.block.fc.Linear.parameters_grad",
                "Module.linear_2.Linear.parameters_grad",
            ],
        ),
    ],
)
def test_parameter_gradients_are_kept_by_the_filter_when_they_arrive(
    tmp_path: Path, debugger: Any, fields: dict[str, Any], grads: list[str]
) -> None:
    """8.1.1 decides when a gradient arrives: kept if the record passes the filter then, or if its
    module's backward is dumped; otherwise its ``[null]`` placeholder goes."""
    torch.manual_seed(0)
    net = Net()
    dbg = debugger(level="L0", **fields)
    dbg.start(model=net)
    net(torch.randn(3, 8)).sum().backward()
    dbg.stop()
    dbg.step()
    data = load_dump(tmp_path / RANK)["data"]
    kept = {k: v for k, v in data.items() if k.endswith(".parameters_grad")}
    assert sorted(kept) == sorted(grads)
    for name, value in kept.items():
        assert all(g != [None] for g in value.values()), name


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_output_only_data_mode_keeps_is_recompute_in_api_records(
    tmp_path: Path, debugger: Any, level: str
) -> None:
    """Every forward record, API or module, says ``is_recompute`` (docs/dump.md "Recomputation"; 8.1.1
    sets it on the output side too): ``data_mode: ["output"]`` keeps it with the output."""
    _dump(tmp_path, debugger, level=level, **_section(data_mode=["output"]))
    data = load_dump(tmp_path / RANK)["data"]
    forward = {n: r for n, r in data.items() if n.endswith(".forward") or ".forward." in n}
    assert "Functional.linear.0.forward" in forward
    for name, record in forward.items():
        assert "input_args" not in record, name
        assert record.get("is_recompute") is False, (name, list(record))
