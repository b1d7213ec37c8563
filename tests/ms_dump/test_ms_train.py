"""End-to-end: ``Model.train`` with ``MsprobeStep``, and nets that use ``mindspore.jit``."""

from __future__ import annotations

import json
import os
from typing import Any

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import mint, nn, ops
from mindspore.train import Model
from nets import data, write_config

from msprobe.mindspore import MsprobeStep, PrecisionDebugger


def _records(out: str, step: int) -> dict[str, Any]:
    with open(os.path.join(out, f"step{step}", "rank", "dump.json"), encoding="utf-8") as fh:
        return json.load(fh)["data"]


class Mlp(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Dense(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Dense(8, 2)

    def construct(self, x: Any) -> Any:
        return self.fc2(self.act(self.fc1(x)))


def test_model_train_with_msprobe_step_dumps_one_folder_per_step(tmp_path):
    out = str(tmp_path / "dump")
    cfg = write_config(str(tmp_path / "cfg.json"), "statistics", "mix", out)
    dbg = PrecisionDebugger(config_path=cfg)
    net = Mlp()
    rng = np.random.RandomState(0)
    xs, ys = rng.randn(6, 4).astype(np.float32), rng.randn(6, 2).astype(np.float32)
    dataset = ds.NumpySlicesDataset({"x": xs, "y": ys}, shuffle=False).batch(2)
    model = Model(net, loss_fn=nn.MSELoss(), optimizer=nn.SGD(net.trainable_params(), 0.01))
    dbg.start(net)  # registers the Cell and Primitive hooks; the callback drives the steps
    model.train(1, dataset, callbacks=[MsprobeStep(dbg)], dataset_sink_mode=False)
    assert sorted(os.listdir(out)) == ["step0", "step1", "step2"]
    for step in range(3):
        names = list(_records(out, step))
        assert "Cell.fc1.Dense.forward.0" in names
        assert "Cell.fc1.Dense.backward.0" in names
        assert "Primitive.matmul.MatMul.0.forward" in names


@ms.jit
def scaled_relu(x: Any) -> Any:
    return ops.relu(x) * 2.0


class JitNet(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(3, 3)

    def construct(self, x: Any) -> Any:
        return mint.sum(scaled_relu(self.fc(x)))


def test_jit_function_runs_and_is_recorded_as_one_call(tmp_path):
    out = str(tmp_path / "dump")
    cfg = write_config(str(tmp_path / "cfg.json"), "statistics", "mix", out)
    dbg = PrecisionDebugger(config_path=cfg)
    net = JitNet()
    x = data(0, (2, 3))
    expected = float(ops.sum(ops.relu(net.fc(x)) * 2.0).asnumpy())
    for _ in range(2):
        dbg.start(net)
        loss, grads = ms.value_and_grad(net, None, net.trainable_params())(x)
        dbg.stop()
        dbg.step()
    assert float(loss.asnumpy()) == np.float32(expected)
    for step in (0, 1):
        rec = _records(out, step)
        assert "Jit.scaled_relu.0.forward" in rec
        assert not any(n.startswith("Functional.relu") for n in rec)  # compiled: no per-op records inside
        fwd = rec["Jit.scaled_relu.0.forward"]
        assert fwd["output"][0]["Min"] >= 0.0
        bwd = rec["Jit.scaled_relu.0.backward"]
        assert bwd["input"][0]["shape"] == [2, 3] and bwd["output"][0]["shape"] == [2, 3]
        with open(os.path.join(out, f"step{step}", "rank", "construct.json"), encoding="utf-8") as fh:
            construct = json.load(fh)
        placed = set(construct)  # every record has its place, the jit call's backward included
        assert {n for n in rec if not n.endswith("parameters_grad")} <= placed
    assert len(grads) == 2


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_bytecode_jit_code_runs_eagerly_in_a_window_and_every_api_is_recorded(tmp_path, level):
    """``jit(capture_mode="bytecode")`` (PIJit) traced our wrappers and recorded only the calls where it
    broke its graph (here ``exp`` and ``sum``); as in 8.1.1 its capture is off inside a dump window."""

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(4, 4)

        @ms.jit(capture_mode="bytecode")
        def construct(self, x: Any) -> Any:
            h = ops.relu(self.fc(x))
            return mint.sum((h * 2.0 + ops.exp(-h)) ** 2)

    net = Net()
    x = data(0, (2, 4))
    expected, expected_grads = ms.value_and_grad(net, None, net.trainable_params())(x)
    out = str(tmp_path / "dump")
    dbg = PrecisionDebugger(config_path=write_config(str(tmp_path / "cfg.json"), "statistics", level, out))
    for _ in range(2):
        dbg.start(net)
        loss, grads = ms.value_and_grad(net, None, net.trainable_params())(x)
        dbg.stop()
        dbg.step()
    assert float(loss.asnumpy()) == pytest.approx(float(expected.asnumpy()), rel=1e-6)
    np.testing.assert_allclose(grads[0].asnumpy(), expected_grads[0].asnumpy(), rtol=1e-5)
    for step in (0, 1):
        rec = _records(out, step)
        for name in (
            "Primitive.matmul.MatMul.0",
            "Functional.relu.0",
            "Tensor.__mul__.0",
            "Tensor.__neg__.0",
            "Functional.exp.0",
            "Tensor.__add__.0",
            "Tensor.__pow__.0",
            "Mint.sum.0",
        ):
            assert f"{name}.forward" in rec and f"{name}.backward" in rec, name
    after = float(net(x).asnumpy())  # outside a window PIJit compiles it again, as without msprobe
    assert after == pytest.approx(float(expected.asnumpy()), rel=1e-6)


@pytest.mark.parametrize("level", ["L0", "mix"])
@pytest.mark.parametrize("jit_root", [False, True], ids=["jit function calling the net", "jit root Cell"])
def test_jit_code_calling_hooked_cells_runs_as_without_the_dump(tmp_path, level, jit_root):
    """The compiler would compile our Cell hooks into the graph (and failed on them): a jit function
    calling the dumped net, or a dumped net whose own ``construct`` is jit, runs with them off and is
    one Jit record at mix, nothing at L0 (its Cells run inside the graph)."""

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(4, 2)

        def construct(self, x: Any) -> Any:
            return self.fc(x)

    if jit_root:
        Net.construct = ms.jit(Net.construct)
    net = Net()

    def forward(x: Any) -> Any:
        return net(x).sum()

    run = forward if jit_root else ms.jit(forward)
    x = data(0, (2, 4))
    expected = float(net.fc(x).sum().asnumpy())  # eager: the jit code is first compiled while dumping
    out = str(tmp_path / "dump")
    dbg = PrecisionDebugger(config_path=write_config(str(tmp_path / "cfg.json"), "statistics", level, out))
    dbg.start(net)
    assert float(run(x).asnumpy()) == pytest.approx(expected, rel=1e-6)  # compiled vs eager kernels
    dbg.stop()
    jit_records = [n for n in _records(out, 0) if n.startswith("Jit.")]
    assert jit_records == ([] if level == "L0" else [f"Jit.{'Net' if jit_root else 'forward'}.0.forward"])
    assert not any(n.startswith("Cell.") for n in _records(out, 0))


def test_jit_cell_at_l0_is_recorded_without_entering_it(tmp_path):
    class Inner(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(3, 3)

        @ms.jit
        def construct(self, x: Any) -> Any:
            return self.fc(x)

    class Outer(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()
            self.act = nn.Tanh()

        def construct(self, x: Any) -> Any:
            return self.act(self.inner(x))

    out = str(tmp_path / "dump")
    cfg = write_config(str(tmp_path / "cfg.json"), "statistics", "L0", out)
    dbg = PrecisionDebugger(config_path=cfg)
    net = Outer()
    dbg.start(net)
    ms.value_and_grad(lambda v: ops.sum(net(v)), None, net.trainable_params())(data(0, (2, 3)))
    dbg.stop()
    names = list(_records(out, 0))
    assert "Cell.inner.Inner.forward.0" in names and "Cell.act.Tanh.backward.0" in names
    assert not any(n.startswith("Cell.inner.fc.") for n in names)


def _train_losses(dbg: Any, steps: int = 3) -> tuple[list[float], np.ndarray]:
    from nets import Net

    ms.set_seed(0)
    net = Net()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    loss_fn = nn.MSELoss()
    x, y = data(0, (2, 3, 4, 4)), data(1, (2, 5))
    grad_fn = ms.value_and_grad(lambda a, b: loss_fn(net(a), b), None, opt.parameters)
    losses = []
    for _ in range(steps):
        if dbg is not None:
            dbg.start(net)
        loss, grads = grad_fn(x, y)
        opt(grads)
        if dbg is not None:
            dbg.stop()
            dbg.step()
        losses.append(float(loss.asnumpy()))
    return losses, net.fc.weight.asnumpy().copy()


def test_dumping_does_not_change_training(tmp_path):
    ref_losses, ref_w = _train_losses(None)
    cfg = write_config(str(tmp_path / "cfg.json"), "statistics", "mix", str(tmp_path / "dump"))
    losses, w = _train_losses(PrecisionDebugger(config_path=cfg))
    assert losses == ref_losses
    assert np.array_equal(w, ref_w)
    assert sorted(os.listdir(tmp_path / "dump")) == ["step0", "step1", "step2"]


def test_module_save_and_save_grad_write_numbered_npy_files(tmp_path, monkeypatch):
    import itertools

    from msprobe.dump.mindspore import single_save
    from msprobe.mindspore import save, save_grad

    monkeypatch.setattr(single_save, "_seq", itertools.count())
    x = data(0, (2, 2))
    save(str(tmp_path / "s"), "x", x)
    save(str(tmp_path / "s"), "d", {"a": x, "b": [x, ms.Tensor(np.ones(2), ms.bfloat16)]})

    def f(v: Any) -> Any:
        z = save_grad(str(tmp_path / "s"), "z", v * 3.0)
        return ops.sum(z * z)

    ms.value_and_grad(f)(x)
    folder = tmp_path / "s" / "step0" / "rank0"
    assert sorted(os.listdir(folder)) == sorted(
        [
            "x_float32_0.npy",
            "d.a_float32_1.npy",
            "d.b.0_float32_2.npy",
            "d.b.1_float32_3.npy",
            "z_grad_float32_4.npy",
        ]
    )
    np.testing.assert_array_equal(np.load(folder / "x_float32_0.npy"), x.asnumpy())
    np.testing.assert_allclose(np.load(folder / "z_grad_float32_4.npy"), 6.0 * x.asnumpy(), rtol=1e-6)


def test_the_update_of_an_experimental_optimizer_is_not_recorded(tmp_path):
    """``mindspore.experimental.optim.AdamW`` runs its update as a jit call, as ``nn.Optimizer``s do;
    neither is part of the model's step (8.1.1's dumps hold no optimizer update)."""
    optim = pytest.importorskip("mindspore.experimental.optim")
    out = str(tmp_path / "dump")
    dbg = PrecisionDebugger(config_path=write_config(str(tmp_path / "cfg.json"), "statistics", "L1", out))
    net = nn.Dense(3, 2)
    opt = optim.AdamW(net.trainable_params(), lr=1e-3)
    grad_fn = ms.value_and_grad(lambda x: net(x).sum(), None, opt.parameters)
    dbg.start(net)
    _, grads = grad_fn(data(0, (2, 3)))
    opt(grads)
    dbg.stop()
    names = list(_records(out, 0))
    assert names and not [n for n in names if n.startswith("Jit.")], names
