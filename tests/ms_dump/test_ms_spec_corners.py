"""MindSpore front door corners where 8.1.1's behaviour is specified: a Cell judged by scope when it
ends, construct.json kept whole, task structure, parameters with any data_mode, the switch for Cell
backward, and restore_custom_api undoing only what register_custom_api did."""

from __future__ import annotations

import json
import os
from typing import Any

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, ops
from nets import Net, data, run_fixture_net, write_config

from msprobe.mindspore import PrecisionDebugger, seed_all


def _cfg(tmp_path: Any, task: str = "statistics", level: str = "L1", **section: Any) -> tuple[str, str]:
    tmp_path.mkdir(exist_ok=True)
    out = str(tmp_path / "dump")
    return write_config(str(tmp_path / "cfg.json"), task, level, out, **section), out


def _read(out: str, name: str) -> dict[str, Any]:
    with open(os.path.join(out, "step0", "rank", name), encoding="utf-8") as fh:
        return json.load(fh)


def _stack_names(out: str) -> set[str]:
    return {n for names, _ in _read(out, "stack.json").values() for n in names}


def test_l0_scope_leaves_out_a_cell_that_ends_after_the_window(tmp_path: Any) -> None:
    scope = ["Cell.block.Block.forward.0", "Cell.block.conv.Conv2d.forward.0"]
    cfg, out = _cfg(tmp_path, level="L0", scope=scope, data_mode=["forward"])
    run_fixture_net(PrecisionDebugger, seed_all, cfg, steps=1, level="L0")
    # the window opens as Block begins and closes when conv ends, before Block ends
    assert list(_read(out, "dump.json")["data"]) == ["Cell.block.conv.Conv2d.forward.0"]


def test_mix_construct_json_keeps_the_calls_a_list_leaves_out(tmp_path: Any) -> None:
    full_cfg, full_out = _cfg(tmp_path / "full", level="mix")
    run_fixture_net(PrecisionDebugger, seed_all, full_cfg, steps=1, level="mix")
    PrecisionDebugger._shutdown()
    cfg, out = _cfg(tmp_path, level="mix", list=["Cell.fc"])
    run_fixture_net(PrecisionDebugger, seed_all, cfg, steps=1, level="mix")
    everything = _read(full_out, "construct.json")
    assert any(".backward" in k and not k.startswith("Cell") for k in everything)
    assert _read(out, "construct.json") == everything


def test_task_structure_fills_stack_and_construct_json(tmp_path: Any) -> None:
    stats_cfg, stats_out = _cfg(tmp_path / "stats", level="mix")
    run_fixture_net(PrecisionDebugger, seed_all, stats_cfg, steps=1, level="mix")
    PrecisionDebugger._shutdown()
    cfg, out = _cfg(tmp_path, task="structure", level="mix")
    run_fixture_net(PrecisionDebugger, seed_all, cfg, steps=1, level="mix")
    assert _read(out, "dump.json")["data"] == {}
    assert _read(out, "construct.json") == _read(stats_out, "construct.json")
    assert _stack_names(out) == _stack_names(stats_out) != set()


def test_cell_records_hold_parameters_whatever_the_data_mode(tmp_path: Any) -> None:
    cfg, out = _cfg(tmp_path, level="L0", data_mode=["input"])
    run_fixture_net(PrecisionDebugger, seed_all, cfg, steps=1, level="L0")
    record = _read(out, "dump.json")["data"]["Cell.fc.Dense.forward.0"]
    assert sorted(record) == ["input_args", "input_kwargs", "parameters"]
    assert sorted(record["parameters"]) == ["bias", "weight"]


def test_cell_backward_needs_the_dump_switched_on(tmp_path: Any) -> None:
    cfg, out = _cfg(tmp_path, level="L0")
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    seed_all(1234)
    dbg = PrecisionDebugger(config_path=cfg)
    net = Net()

    def loss(x: Tensor) -> Tensor:
        y = net(x)
        dbg.stop()  # off before the backward runs
        return y.sum()

    dbg.start(net)
    ms.value_and_grad(loss, None, net.trainable_params())(data(0, (2, 3, 4, 4)))
    dbg.step()
    records = _read(out, "dump.json")["data"]
    assert [k for k in records if ".backward." in k] == []
    assert records["Cell.fc.Dense.parameters_grad"] == {"weight": [None], "bias": [None]}


def test_restore_custom_api_undoes_only_what_register_custom_api_did(tmp_path: Any) -> None:
    cfg, out = _cfg(tmp_path)
    dbg = PrecisionDebugger(config_path=cfg)
    x = Tensor(np.ones((2, 2), np.float32))
    dbg.register_custom_api(ops, "mul", "MyOps")  # an API the dump records anyway
    dbg.start()
    ops.mul(x, x)
    dbg.stop()
    dbg.restore_custom_api(ops, "mul")  # back to the dump's own wrapper
    dbg.restore_custom_api(ops, "add")  # never registered: nothing to undo
    dbg.start()
    ops.mul(x, x)
    ops.add(x, x)
    dbg.stop()
    assert list(_read(out, "dump.json")["data"]) == [
        "MyOps.mul.0.forward",
        "Functional.mul.0.forward",
        "Functional.add.0.forward",
    ]


def test_a_scope_starting_at_a_cell_backward_holds_what_ran_inside_the_cell(tmp_path: Any) -> None:
    """The window opens when Block's backward begins: relu's backward, inside Block, is in it."""
    scope = ["Cell.block.Block.backward.0", "Cell.block.conv.Conv2d.backward.0"]
    cfg, out = _cfg(tmp_path, level="L0", scope=scope)
    run_fixture_net(PrecisionDebugger, seed_all, cfg, steps=1, level="L0")
    backward = {k for k in _read(out, "dump.json")["data"] if ".backward." in k}
    assert backward == {"Cell.block.relu.ReLU.backward.0", *scope}


@pytest.mark.parametrize(
    ("section", "grads"),
    [
        ({"list": ["Cell.fc.Dense.backward.0"]}, {"Cell.fc.Dense.parameters_grad"}),
        (
            {"scope": ["Cell.block.Block.backward.0", "Cell.block.conv.Conv2d.backward.0"]},
            {"Cell.block.conv.Conv2d.parameters_grad"},
        ),
        ({"scope": ["Cell.block.Block.forward.0", "Cell.block.conv.Conv2d.forward.0"]}, set()),
        ({}, {"Cell.block.conv.Conv2d.parameters_grad", "Cell.fc.Dense.parameters_grad"}),
    ],
)
def test_parameter_gradients_are_kept_by_the_filter_when_they_arrive(
    tmp_path: Any, section: dict[str, Any], grads: set[str]
) -> None:
    """Kept if the record passes the filter when the gradient arrives, or if its Cell's backward is
    dumped; otherwise its ``[null]`` placeholder goes (8.1.1)."""
    cfg, out = _cfg(tmp_path, level="L0", **section)
    run_fixture_net(PrecisionDebugger, seed_all, cfg, steps=1, level="L0")
    data = _read(out, "dump.json")["data"]
    kept = {k: v for k, v in data.items() if k.endswith(".parameters_grad")}
    assert set(kept) == grads
    assert all(g != [None] for v in kept.values() for g in v.values())


def test_the_dump_writes_through_no_link_planted_at_a_tensor_file_name(tmp_path: Any) -> None:
    """A link planted at a tensor file's name (an earlier run's folder reused), leading out of the dump
    folder: np.save wrote through it and os.chmod changed the mode of the file it leads to. It is an
    error of its record, as in the PyTorch dump; the dump goes on."""
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    os.chmod(outside, 0o644)
    cfg, out = _cfg(tmp_path, task="tensor")
    data_dir = os.path.join(out, "step0", "rank", "dump_tensor_data")
    os.makedirs(data_dir)
    os.symlink(outside, os.path.join(data_dir, "Functional.relu.0.forward.input.0.npy"))
    dbg = PrecisionDebugger(config_path=cfg)
    dbg.start()
    ops.relu(Tensor(np.ones(3, np.float32)))
    dbg.stop()
    assert outside.read_text() == "precious\n"
    assert oct(os.stat(outside).st_mode & 0o777) == oct(0o644)
    assert "Functional.relu.0.forward" in _read(out, "dump.json")["data"]


def test_module_save_writes_through_no_link_planted_at_its_file_name(tmp_path: Any) -> None:
    import itertools

    from msprobe.dump.mindspore import single_save
    from msprobe.mindspore import save

    single_save._seq = itertools.count()
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    folder = tmp_path / "s" / "step0" / "rank0"
    folder.mkdir(parents=True)
    (folder / "x_float32_0.npy").symlink_to(outside)
    with pytest.raises(OSError):
        save(str(tmp_path / "s"), "x", Tensor(np.ones(2, np.float32)))
    assert outside.read_text() == "precious\n"


def test_module_save_waits_on_no_pipe_planted_at_its_file_name(tmp_path: Any) -> None:
    """A named pipe at save()'s file name: opening it to write waited for a reader for ever."""
    import itertools
    import signal

    from msprobe.dump.mindspore import single_save
    from msprobe.mindspore import save

    single_save._seq = itertools.count()
    folder = tmp_path / "s" / "step0" / "rank0"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "x_float32_0.npy")

    def waited(signum: int, frame: Any) -> None:
        raise TimeoutError("save() waited on the pipe planted at its file name")

    old = signal.signal(signal.SIGALRM, waited)
    signal.alarm(20)
    try:
        with pytest.raises(OSError) as exc:
            save(str(tmp_path / "s"), "x", Tensor(np.ones(2, np.float32)))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert not isinstance(exc.value, TimeoutError)


def test_the_dump_waits_on_no_pipe_planted_at_a_tensor_file_name(tmp_path: Any) -> None:
    """A named pipe at a tensor file's name: the dump (its helper process) waited on it for ever and
    stop() never returned. It is refused, an error of its record, as a link there is."""
    import subprocess
    import sys

    cfg, out = _cfg(tmp_path, task="tensor")
    data_dir = os.path.join(out, "step0", "rank", "dump_tensor_data")
    os.makedirs(data_dir)
    os.mkfifo(os.path.join(data_dir, "Functional.relu.0.forward.input.0.npy"))
    code = (
        "import sys, numpy as np\n"
        "from mindspore import Tensor, ops\n"
        "from msprobe.mindspore import PrecisionDebugger\n"
        "dbg = PrecisionDebugger(config_path=sys.argv[1])\n"
        "dbg.start()\n"
        "ops.relu(Tensor(np.ones(3, np.float32)))\n"
        "dbg.stop()\n"
    )
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=repo)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, cfg], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the dump waited on the pipe planted at a tensor file's name")
    assert done.returncode == 0, done.stderr
    assert "Functional.relu.0.forward" in _read(out, "dump.json")["data"]
