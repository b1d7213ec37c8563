"""torch.compile with the dump on: a compiled Llama trains with an L1 statistics dump as it does
without (bitwise equal losses), compiles once, never hits dynamo's recompile limit, and writes the
same records every step; L0 and mix on a compiled model run."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import zoo

zoo.require_transformers()


class _Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def dynamo_warnings() -> Iterator[list[str]]:
    handler = _Logs()
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    torch._dynamo.reset()
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        torch._dynamo.reset()


def _frames_compiled() -> int:
    return int(torch._dynamo.utils.counters["frames"]["ok"])


class _CountingDebugger:
    """The debugger, noting how many frames dynamo has compiled when each step ends."""

    def __init__(self, dbg: Any) -> None:
        self.dbg = dbg
        self.compiled_at_step: list[int] = []

    def start(self, model: Any = None) -> None:
        self.dbg.start(model=model)

    def stop(self) -> None:
        self.dbg.stop()

    def step(self) -> None:
        self.compiled_at_step.append(_frames_compiled())
        self.dbg.step()


def _compiled_run(tmp_path: Path, backend: str, steps: int, level: str | None) -> tuple[zoo.Trained, Any]:
    from msprobe.pytorch import PrecisionDebugger

    torch._dynamo.reset()
    model = torch.compile(zoo.build("llama"), backend=backend)
    if level is None:
        return zoo.train("llama", steps, model=model), None
    PrecisionDebugger._shutdown()
    try:
        dbg = _CountingDebugger(
            PrecisionDebugger(dump_path=str(tmp_path / level), task="statistics", level=level)
        )
        trained = zoo.train("llama", steps, dbg, model=model)
    finally:
        PrecisionDebugger._shutdown()
    return trained, dbg


def _record_names(path: Path) -> set[str]:
    return set(json.loads(path.read_text())["data"])


# AdamW creates its state (exp_avg, exp_avg_sq) with ``torch.zeros_like`` in its first step only: eager
# user code, recorded like any other call; every later step records the same set.
FIRST_STEP_ONLY = ("Torch.zeros_like.",)


def _same_record_set_each_step(names: list[set[str]]) -> None:
    assert all(n == names[1] for n in names[2:])
    extra = names[0] - names[1]
    assert names[1] <= names[0] and all(n.startswith(FIRST_STEP_ONLY) for n in extra), sorted(extra)[:5]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "steps"), [("eager", 4), ("inductor", 2)])
def test_compiled_llama_l1_dump(tmp_path: Path, dynamo_warnings: list[str], backend: str, steps: int) -> None:
    plain, _ = _compiled_run(tmp_path, backend, steps, None)
    dumped, dbg = _compiled_run(tmp_path, backend, steps, "L1")

    assert [loss.item() for loss in dumped.losses] == [loss.item() for loss in plain.losses]
    assert all(torch.equal(a, b) for a, b in zip(dumped.losses, plain.losses))
    assert not [m for m in dynamo_warnings if "recompile_limit" in m or "cache_size_limit" in m]
    # compiled in the first step, never again
    assert dbg.compiled_at_step[0] > 0
    assert len(set(dbg.compiled_at_step)) == 1, dbg.compiled_at_step
    files = [tmp_path / "L1" / f"step{i}" / "rank" / "dump.json" for i in range(steps)]
    names = [_record_names(f) for f in files]
    assert names[0], "nothing recorded outside the compiled region"
    _same_record_set_each_step(names)
    # the optimizer runs eagerly and is recorded; compiler machinery (fake tensors, runtime wrappers,
    # inductor's extern kernels) never is
    assert any(n.startswith("Tensor.addcdiv_.") for n in names[0])
    assert not [
        n
        for n in names[0]
        if n.startswith(("Tensor.__ilshift__", "Tensor.__ixor__", "Torch.dsmm", "Torch.mm"))
    ]


@pytest.mark.slow
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_compiled_llama_module_levels_run(tmp_path: Path, dynamo_warnings: list[str], level: str) -> None:
    plain, _ = _compiled_run(tmp_path, "eager", 2, None)
    dumped, _ = _compiled_run(tmp_path, "eager", 2, level)
    assert all(torch.equal(a, b) for a, b in zip(dumped.losses, plain.losses))
    # our hook wrappers are never compiled as frames of their own (one per module signature)
    assert not [m for m in dynamo_warnings if "recompile_limit" in m or "cache_size_limit" in m]
    names = [_record_names(tmp_path / level / f"step{i}" / "rank" / "dump.json") for i in range(2)]
    assert any(".Linear.forward." in n for n in names[0])
    _same_record_set_each_step(names)


def test_compiler_probes_are_false_in_eager_code() -> None:
    from msprobe.dump.pytorch.torch_compat import compiler_tracing, in_compiled_code

    def handler() -> bool:  # in_compiled_code() asks about the frame that called the handler
        return in_compiled_code()

    assert compiler_tracing() is False
    assert handler() is False


def test_compiler_tracing_is_true_while_dynamo_traces() -> None:
    from msprobe.dump.pytorch.torch_compat import compiler_tracing

    seen: list[bool] = []

    @torch.compiler.disable
    def probe() -> None:
        seen.append(compiler_tracing())

    def backend(gm: Any, example_inputs: Any) -> Any:
        seen.append(compiler_tracing())
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(lambda x: x * 2, backend=backend)(torch.ones(2))
        probe()
    finally:
        torch._dynamo.reset()
    assert seen == [True, False]


class _SavesHidden(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from msprobe.pytorch import PrecisionDebugger

        h = torch.relu(self.a(x))
        PrecisionDebugger.save(h, "hidden")
        return self.b(h)


def test_save_inside_compiled_forward_is_not_compiled(tmp_path: Path, dynamo_warnings: list[str]) -> None:
    """``debugger.save`` called from a compiled forward runs eagerly behind one graph break: dynamo
    neither compiles the recorder (a hundred frames of ours) nor recompiles it every step."""
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    net = _SavesHidden()
    x = torch.randn(3, 4)
    try:
        dbg = PrecisionDebugger(dump_path=str(tmp_path), task="statistics", level="debug")
        model = torch.compile(net, backend="eager")
        frames = []
        for _ in range(3):
            model(x).pow(2).sum().backward()
            dbg.step()
            frames.append(_frames_compiled())
    finally:
        PrecisionDebugger._shutdown()
    assert len(set(frames)) == 1 and frames[0] <= 4, frames  # two graphs and their resumptions
    assert not [m for m in dynamo_warnings if "recompile_limit" in m or "cache_size_limit" in m]
    for step in range(3):
        data = json.loads((tmp_path / f"step{step}" / "rank" / "debug.json").read_text())["data"]
        assert data["hidden.0.debug"]["shape"] == [3, 4]
        assert data["hidden_grad.0.debug"]["Max"] is not None
