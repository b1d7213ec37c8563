"""What parallel training code brings into one process: tensor subclasses as API outputs (tensor
parallel's AsyncCollectiveTensor), code run on fake tensors while torch infers shapes (DTensor's
sharding propagation), patched API families at L0 (FSDP2's collectives)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from tests.dump.conftest import load_dump


def test_an_async_collective_tensor_is_saved_as_a_plain_tensor_file(tmp_path: Path, debugger: Any) -> None:
    """A functional collective's output (what tensor parallel layers return) is a tensor subclass that
    wraps itself again at every op: torch.save pickled its class, which weights_only=True refuses."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        dbg = debugger(level="L1", task="tensor")
        y = funcol.all_reduce(torch.linspace(-1.0, 1.0, 6), "sum", dist.group.WORLD)
        assert type(y) is not torch.Tensor
        dbg.start()
        torch.relu(y)
        dbg.stop()
    finally:
        dist.destroy_process_group()
    rank = tmp_path / "dump" / "step0" / "rank0"
    record = load_dump(rank)["data"]["Torch.relu.0.forward"]
    for side, expected in (("input_args", torch.linspace(-1.0, 1.0, 6)), ("output", None)):
        saved = torch.load(rank / "dump_tensor_data" / record[side][0]["data_name"], weights_only=True)
        assert type(saved) is torch.Tensor
        if expected is not None:
            assert torch.equal(saved, expected)


def test_calls_run_on_fake_tensors_are_not_recorded(tmp_path: Path, debugger: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    dbg = debugger(level="L1")
    dbg.start()
    with FakeTensorMode():  # as DTensor infers an op's output sharding
        torch.relu(torch.empty(3, 4)).sum()
    torch.tanh(torch.ones(2))
    dbg.stop()
    assert list(load_dump(tmp_path / "dump" / "step0" / "rank")["data"]) == ["Torch.tanh.0.forward"]
    assert not (tmp_path / "dump" / "step0" / "rank" / "dump_error_info.log").exists()


def test_l0_records_modules_only_not_the_patched_families(tmp_path: Path, debugger: Any) -> None:
    """8.1.1 wraps APIs at L1 and mix only: a custom API (as Distributed.* and NPU.*) at L0 is not
    recorded, and a tensor it writes is summarised again by the next record."""
    ns = types.SimpleNamespace(scale_=lambda t: t.mul_(3.0))
    lin = nn.Linear(4, 4)
    net = nn.Sequential(lin)
    dbg = debugger(level="L0")
    dbg.register_custom_api(ns, "scale_", api_prefix="Custom")
    dbg.start(model=net)
    x = torch.ones(2, 4)
    net(x)
    ns.scale_(x)
    net(x)
    dbg.stop()
    data = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    assert all(name.startswith("Module.") for name in data), list(data)
    assert data["Module.0.Linear.forward.1"]["input_args"][0]["Max"] == 3.0
