"""Tensor mode: one .pt per tensor leaf, loadable with weights_only=True, equal to the run-time tensor."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.dump.conftest import load_dump

REPO = Path(__file__).resolve().parents[2]


def _leaf(dump: dict[str, Any], record: str, *where: str | int) -> dict[str, Any]:
    v: Any = dump["data"][record]
    for k in where:
        v = v[k]
    assert isinstance(v, dict)
    return v


def _named_files(dump: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            if "data_name" in v:
                found.append(v["data_name"])
            for item in v.values():
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)

    walk(dump["data"])
    return found


def test_pt_files_equal_runtime_tensors(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(task="tensor")
    a = torch.randn(2, 3)
    b = torch.randn(2, 3)
    w = torch.randn(4, 3)
    seen: dict[tuple[str | int, ...], torch.Tensor] = {}
    dbg.start()
    c = torch.cat([a, b])  # list argument: input.0.0 / input.0.1
    seen["Torch.cat.0.forward", "input_args", 0, 0] = a.clone()
    seen["Torch.cat.0.forward", "output", 0] = c.clone()
    y = F.linear(c, weight=w)  # tensor passed as keyword: kwargs.weight
    seen["Functional.linear.0.forward", "input_kwargs", "weight"] = w.clone()
    seen["Functional.linear.0.forward", "output", 0] = y.clone()
    y.add_(1.0)  # in place: the input file keeps the value before, the output file the value after
    seen["Tensor.add_.0.forward", "input_args", 0] = seen["Functional.linear.0.forward", "output", 0]
    seen["Tensor.add_.0.forward", "output", 0] = y.clone()
    t = c.t()
    torch.relu(t)  # non-contiguous input: saved contiguous
    seen["Torch.relu.0.forward", "input_args", 0] = t.clone()
    _values, idx = torch.max(c, 1)
    seen["Torch.max.0.forward", "output", 1] = idx.clone()
    dbg.stop()
    rank = tmp_path / "dump" / "step0" / "rank"
    dump = load_dump(rank)
    assert dump["dump_data_dir"] == str(rank / "dump_tensor_data")
    files = set(os.listdir(rank / "dump_tensor_data"))
    for (record, *where), expect in seen.items():
        name = _leaf(dump, record, *where)["data_name"]
        got = torch.load(rank / "dump_tensor_data" / name, weights_only=True)
        assert torch.equal(got, expect) and got.is_contiguous() and not got.requires_grad, name
    leaf = _leaf(dump, "Functional.linear.0.forward", "input_kwargs", "weight")
    assert leaf["data_name"] == "Functional.linear.0.forward.kwargs.weight.pt"
    assert set(_named_files(dump)) == files  # every file is named, every name is a file
    assert all(oct(os.stat(rank / "dump_tensor_data" / f).st_mode & 0o777) == oct(0o640) for f in files)


def test_statistics_tensor_list_saves_only_matching(tmp_path: Path, debugger: Any) -> None:
    dbg = debugger(statistics={"tensor_list": ["relu"]})
    x = torch.randn(3)
    dbg.start()
    torch.relu(x)
    torch.tanh(x)
    dbg.stop()
    rank = tmp_path / "dump" / "step0" / "rank"
    data = load_dump(rank)["data"]
    assert "data_name" in data["Torch.relu.0.forward"]["output"][0]
    assert "data_name" not in data["Torch.tanh.0.forward"]["output"][0]
    assert sorted(os.listdir(rank / "dump_tensor_data")) == [
        "Torch.relu.0.forward.input.0.pt",
        "Torch.relu.0.forward.output.0.pt",
    ]


QUICK_START = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from msprobe.pytorch import PrecisionDebugger, seed_all

    seed_all()
    debugger = PrecisionDebugger()


    class ModuleOP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear_1 = nn.Linear(in_features=8, out_features=4)
            self.linear_2 = nn.Linear(in_features=4, out_features=2)

        def forward(self, x):
            x1 = self.linear_1(x)
            x2 = self.linear_2(x1)
            r1 = F.relu(x2)
            return r1


    if __name__ == "__main__":
        module = ModuleOP()
        debugger.start(model=module)
        x = torch.randn(10, 8)
        out = module(x)
        loss = out.sum()
        loss.backward()
        debugger.stop()
    """
)


@pytest.mark.slow
def test_quick_start_script_unchanged(tmp_path: Path) -> None:
    (tmp_path / "quick.py").write_text(QUICK_START)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run(
        [sys.executable, "quick.py"], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300
    )
    dump = load_dump(tmp_path / "dump_path" / "step0" / "rank")
    assert list(dump["data"]) == [
        "Functional.linear.0.forward",
        "Functional.linear.1.forward",
        "Functional.relu.0.forward",
        "Tensor.sum.0.forward",
        "Torch.ones_like.0.forward",
        "Tensor.sum.0.backward",
        "Functional.relu.0.backward",
        "Functional.linear.1.backward",
        "Functional.linear.0.backward",
    ]
    # same seed, same torch: the weights are upstream's, so are the statistics
    torch.manual_seed(1234)
    lin1 = torch.nn.Linear(8, 4)
    torch.nn.Linear(4, 2)
    x = torch.randn(10, 8)
    w = dump["data"]["Functional.linear.0.forward"]["input_args"]
    assert w[0]["Max"] == x.max().item() and w[0]["Norm"] == x.norm().item()
    assert w[1]["shape"] == [4, 8] and w[1]["Mean"] == lin1.weight.mean().item()
    assert not (tmp_path / "dump_path" / "step0" / "rank" / ".msprobe_journal.jsonl").exists()


def test_every_folder_the_dump_makes_has_mode_0750(tmp_path: Path, debugger: Any) -> None:
    """The dump path, the step folder and the rank folder too (``os.makedirs`` gives the mode to the
    last folder only: the step folder was 0755)."""
    old = os.umask(0o022)
    try:
        dbg = debugger(task="tensor", dump_path=str(tmp_path / "a" / "dump"))
        dbg.start()
        torch.relu(torch.ones(2))
        dbg.stop()
    finally:
        os.umask(old)
    made = [tmp_path / "a", tmp_path / "a" / "dump", tmp_path / "a" / "dump" / "step0"]
    made += [made[-1] / "rank", made[-1] / "rank" / "dump_tensor_data"]
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in made} == {str(p): oct(0o750) for p in made}
