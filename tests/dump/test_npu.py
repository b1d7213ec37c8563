"""torch_npu / mindspeed capture through patches, with fake modules; and a torch_npu that breaks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.dump.conftest import load_dump

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_npu(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    npu = types.ModuleType("torch_npu")

    def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[Any, Any]:
        # A plain binding: never calls handle_torch_function, so only a patch can see it.
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
        return x * rstd * gamma, rstd

    npu.npu_rms_norm = npu_rms_norm  # type: ignore[attr-defined]
    mindspeed = types.ModuleType("mindspeed")
    ops = types.ModuleType("mindspeed.ops")
    gmm = types.ModuleType("mindspeed.ops.gmm")
    gmm.npu_gmm = lambda x, w: x @ w  # type: ignore[attr-defined]
    ops.gmm = gmm  # type: ignore[attr-defined]
    mindspeed.ops = ops  # type: ignore[attr-defined]
    for name, mod in {
        "torch_npu": npu,
        "mindspeed": mindspeed,
        "mindspeed.ops": ops,
        "mindspeed.ops.gmm": gmm,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    yield npu


def test_npu_and_mindspeed_ops_recorded(tmp_path: Path, debugger: Any, fake_npu: types.ModuleType) -> None:
    import mindspeed.ops.gmm as gmm  # type: ignore[import-not-found]

    original = fake_npu.npu_rms_norm
    dbg = debugger()
    assert fake_npu.npu_rms_norm is not original  # patched: bindings may ignore __torch_function__
    x = torch.randn(2, 8, requires_grad=True)
    g = torch.ones(8, requires_grad=True)
    dbg.start()
    y, _ = fake_npu.npu_rms_norm(x, g, epsilon=1e-5)
    z = gmm.npu_gmm(y, torch.ones(8, 3))
    z.sum().backward()
    dbg.stop()
    data = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    assert list(data)[:3] == [
        "NPU.npu_rms_norm.0.forward",
        "MindSpeed.npu_gmm.0.forward",
        "Tensor.sum.0.forward",
    ]
    rec = data["NPU.npu_rms_norm.0.forward"]
    assert rec["input_kwargs"] == {"epsilon": {"type": "float", "value": 1e-5}}
    assert [o["shape"] for o in rec["output"]] == [[2, 8], [2, 1]]
    assert "NPU.npu_rms_norm.0.backward" in data  # backward through the grad_fn of its first output
    assert not any(n.startswith(("Tensor.pow", "Torch.rsqrt", "Tensor.__mul__")) for n in data)
    type(dbg)._shutdown()
    assert fake_npu.npu_rms_norm is original  # restored


def test_broken_torch_npu_never_breaks_import_or_dump(tmp_path: Path) -> None:
    stub = tmp_path / "stub" / "torch_npu"
    stub.mkdir(parents=True)
    marker = tmp_path / "imported"
    (stub / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise RuntimeError('no NPU here')\n"
    )
    script = textwrap.dedent(
        f"""
        import os, sys, json
        import msprobe, msprobe.pytorch, msprobe.dump.cli
        assert not os.path.exists({str(marker)!r}), "torch_npu imported eagerly"
        import torch, torch.nn as nn
        from msprobe.pytorch import PrecisionDebugger, seed_all
        seed_all()
        dbg = PrecisionDebugger(dump_path={str(tmp_path / "dump")!r})
        net = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
        dbg.start(model=net)
        net(torch.randn(2, 4)).sum().backward()
        dbg.stop()
        data = json.load(open({str(tmp_path / "dump" / "step0" / "rank" / "dump.json")!r}))["data"]
        print(sorted(data))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "stub"), str(REPO)]))
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "Functional.linear.0.forward" in res.stdout and "Functional.relu.0.backward" in res.stdout
