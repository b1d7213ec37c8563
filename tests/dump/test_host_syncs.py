"""Host synchronisations of a dumped step on a device: a fixed few per batch of records, whatever
the number of tensors (statistics stay on the device until a batch fetches them all at once).

The device is :mod:`tests.dump.fake_device`: CPU tensors that report ``cuda:0`` and count what a
real device would synchronise on. The model is a chain of linear layers whose depth multiplies the
records and tensors of a step; forward only (autograd would need the real device's runtime), so the
backward records' gradients go through the same code on the CPU tests.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from msprobe.dump import session as session_mod
from tests.dump import fake_device
from tests.dump.conftest import load_dump


class Block(nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x, self.weight)) + x


class Chain(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(
            Block(fake_device.on_device(torch.randn(8, 8) * 0.3)) for _ in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _step(depth: int) -> tuple[nn.Module, Callable[[], None]]:
    model = Chain(depth)
    x = fake_device.on_device(torch.randn(4, 8))

    def train() -> None:
        model(x).pow(2).mean()

    return model, train


def _syncs(
    debugger: Any, monkeypatch: pytest.MonkeyPatch, depth: int, level: str, summary_mode: str, dump: bool
) -> tuple[int, int]:
    """(host syncs, records) of one step of the chain, with or without the dump."""
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()
    model, train = _step(depth)
    dbg = None
    if dump:
        out = Path(tempfile.mkdtemp(prefix="syncs_"))
        dbg = debugger(level=level, dump_path=str(out), statistics={"summary_mode": summary_mode})
    with fake_device.counting(monkeypatch) as counts:
        if dbg is not None:
            dbg.start(model=model)
        train()
        if dbg is not None:
            dbg.stop()
        syncs = counts["sync"]
    records = 0
    if dbg is not None:
        records = len(load_dump(out / "step0" / "rank")["data"])
        dbg.step()
        shutil.rmtree(out)
    return syncs, records


@pytest.mark.parametrize(
    ("level", "summary_mode"), [("L1", "statistics"), ("mix", "statistics"), ("L1", "md5"), ("mix", "md5")]
)
def test_syncs_per_step_do_not_grow_with_the_tensors(
    debugger: Any, monkeypatch: pytest.MonkeyPatch, level: str, summary_mode: str
) -> None:
    # one batch a step, so the count is the fetches of one batch
    monkeypatch.setattr(
        session_mod, "batching", lambda config: {"batch_records": 1 << 16, "batch_seconds": 1e9}
    )
    added = {}
    for depth in (2, 8):
        own, _ = _syncs(debugger, monkeypatch, depth, level, summary_mode, dump=False)
        dumped, records = _syncs(debugger, monkeypatch, depth, level, summary_mode, dump=True)
        assert records >= 3 * depth  # linear, gelu and add per block (and modules at mix)
        added[depth] = dumped - own
    assert added[2] == added[8]
    assert added[8] == 2  # one synchronize, then one copy of the stacked floats (md5 copies do not wait)


def test_default_batches_sync_once_per_batch(debugger: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_mod, "batching", lambda config: {"batch_records": 16, "batch_seconds": 1e9})
    own, _ = _syncs(debugger, monkeypatch, 8, "L1", "statistics", dump=False)
    dumped, records = _syncs(debugger, monkeypatch, 8, "L1", "statistics", dump=True)
    assert dumped - own == 2 * -(-records // 16)  # a synchronize and a copy per batch of 16 records


def test_statistics_on_the_device_equal_those_on_the_cpu(
    debugger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, train = _step(3)
    dbg = debugger(level="L1")
    with fake_device.counting(monkeypatch):
        dbg.start(model=model)
        train()
        dbg.stop()
    on_device = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    dbg.step()
    record = on_device["Functional.linear.0.forward"]
    x, w = record["input_args"][0], record["input_args"][1]
    assert x["Max"] is not None and w["Norm"] is not None
    ref = model.blocks[0].weight.inner
    assert w["Max"] == ref.max().item() and w["Norm"] == torch.linalg.vector_norm(ref).item()
    assert json.dumps(on_device).count("null") < len(on_device)  # statistics everywhere
