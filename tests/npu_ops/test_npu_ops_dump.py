"""The committed statistics dump (tests/data/npu_ops/fused_stats_dump) holds one forward record of each
fused op; each must replay through its reference with inputs built from the statistics, giving the
recorded output structure (in the dumped dtypes, and upcast as the benchmark side runs it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from npu_cases import FIFTEEN

from msprobe.run_ut import registry
from msprobe.run_ut.npu_ops import lookup

DUMP = Path(__file__).parents[1] / "data" / "npu_ops" / "fused_stats_dump" / "dump.json"
BENCH = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}


def _records() -> dict[str, Any]:
    doc = json.loads(DUMP.read_text())
    assert doc["task"] == "statistics" and doc["framework"] == "pytorch" and doc["dump_data_dir"] is None
    return doc["data"]


FORWARD = sorted(k.removesuffix(".forward") for k in _records() if k.endswith(".forward"))


def build(arg: Any, gen: torch.Generator, upcast: bool) -> Any:
    """A value from its dump encoding (stand-in for the replay stage's generator: bounds Min/Max)."""
    if arg is None:
        return None
    if isinstance(arg, list):
        return [build(a, gen, upcast) for a in arg]
    if arg["type"] != "torch.Tensor":
        return arg["value"]
    dtype = getattr(torch, arg["dtype"].removeprefix("torch."))
    shape = arg["shape"]
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(arg["Min"]), int(arg["Max"]) + 1, shape, generator=gen, dtype=dtype)
    lo, hi = (0.0, 0.0) if arg["Min"] is None else (arg["Min"], arg["Max"])
    t = (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    if upcast:
        t = t.to(BENCH.get(dtype, dtype))
    return t.requires_grad_(arg["requires_grad"])


def check_output(result: Any, recorded: list, upcast: bool, compared: tuple[int, ...] | None) -> None:
    results = list(result) if isinstance(result, tuple | list) else [result]
    assert len(results) == len(recorded), f"{len(results)} outputs, the dump has {len(recorded)}"
    for i, (got, rec) in enumerate(zip(results, recorded)):
        if rec is None or rec["type"] != "torch.Tensor":
            assert not isinstance(got, torch.Tensor) and got == (None if rec is None else rec["value"])
            continue
        dtype = getattr(torch, rec["dtype"].removeprefix("torch."))
        # upcast inputs raise an output by one step (fp16/bf16 -> fp32 -> fp64) unless the kernel fixes
        # its dtype (fp32 softmax statistics, rstd): never lower than the dump, never two steps higher
        allowed = {dtype, BENCH.get(dtype, dtype)} if upcast else {dtype}
        assert isinstance(got, torch.Tensor), (i, got)
        assert list(got.shape) == rec["shape"] and got.dtype in allowed, (i, got.shape, got.dtype)
        if upcast and i == 0 and dtype in BENCH:  # the main result always follows its inputs up
            assert got.dtype == BENCH[dtype], (i, got.dtype)
        if compared is None or i in compared:
            assert torch.isfinite(got.double()).all(), f"output {i} is not finite"


def test_dump_has_every_op() -> None:
    names = {k.split(".")[1] for k in _records()}
    assert names == set(FIFTEEN)
    assert all(k.startswith("NPU.") for k in _records())


@pytest.mark.parametrize("upcast", [False, True], ids=["device-dtype", "bench-upcast"])
@pytest.mark.parametrize("name", FORWARD)
def test_record_replays_through_reference(name: str, upcast: bool) -> None:
    record = _records()[f"{name}.forward"]
    entry = lookup(name)
    assert entry is not None, f"{name}: no reference"
    gen = torch.Generator().manual_seed(1234)
    args = tuple(build(a, gen, upcast) for a in record["input_args"])
    kwargs = {k: build(v, gen, upcast) for k, v in record["input_kwargs"].items()}
    if entry.prepare_inputs is not None:
        args, kwargs = entry.prepare_inputs(args, kwargs)
    result = entry.reference(*args, **kwargs)
    check_output(result, record["output"], upcast, entry.forward_outputs)


@pytest.mark.parametrize(
    "name", sorted(k.removesuffix(".backward") for k in _records() if k.endswith(".backward"))
)
def test_backward_record_drives_reference_gradients(name: str) -> None:
    """Backward as the replay stage runs it: ``output[grad_index]`` (or the single output) receives the
    dumped gradient; the grads of the positional tensors match the recorded ``output`` shapes."""
    records = _records()
    forward, backward = records[f"{name}.forward"], records[f"{name}.backward"]
    entry = lookup(name)
    assert entry is not None and entry.backward_message is None
    gen = torch.Generator().manual_seed(1234)
    args = tuple(build(a, gen, False) for a in forward["input_args"])
    kwargs = {k: build(v, gen, False) for k, v in forward["input_kwargs"].items()}
    if entry.prepare_inputs is not None:
        args, kwargs = entry.prepare_inputs(args, kwargs)
    out = entry.reference(*args, **kwargs)
    if isinstance(out, tuple) and entry.grad_index is None:
        pytest.skip("8.1.1: 'Multiple backward is not supported.' (tuple output, no grad_index)")
    target = out[entry.grad_index] if isinstance(out, tuple) else out
    target.backward(build(backward["input"][0], gen, False))
    grads = [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    assert [list(g.shape) for g in grads] == [o["shape"] for o in backward["output"]]
    assert all(torch.isfinite(g.double()).all() for g in grads)


def test_table_covers_the_dump_names() -> None:
    for name in FIFTEEN:
        entry = registry.find("NPU", name)
        assert entry is not None and entry.name == name and entry.reference is not None
