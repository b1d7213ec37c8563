"""Argument rebuilding from statistics and the per-API seed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from replay_dumps import tensor

from msprobe.run_ut.arg_values import DeviceArg, InputError, TensorArg
from msprobe.run_ut.draws import random_tensor
from msprobe.run_ut.inputs import ArgBuilder
from msprobe.run_ut.replay import api_seed


def gen(name: str = "Torch.exp.0") -> torch.Generator:
    return torch.Generator().manual_seed(api_seed(name))


def test_seed_is_a_stable_hash_of_the_name() -> None:
    import zlib

    assert api_seed("Functional.linear.0") == zlib.crc32(b"Functional.linear.0")
    assert api_seed("Functional.linear.0") != api_seed("Functional.linear.1")


def test_bounds_land_on_first_and_last_element() -> None:
    t = random_tensor(tensor("torch.float32", [3, 5], -2.0, 3.0), gen())
    flat = t.reshape(-1)
    assert t.shape == (3, 5) and t.dtype == torch.float32
    assert flat[0] == -2.0 and flat[-1] == 3.0
    assert bool(((flat >= -2.0) & (flat <= 3.0)).all())


def test_nan_max_gives_all_nan_and_inf_max_fills_inf() -> None:
    assert torch.isnan(random_tensor(tensor("torch.float16", [4], math.nan, math.nan), gen())).all()
    t = random_tensor(tensor("torch.float32", [3, 2], -1.0, math.inf), gen())
    assert torch.isinf(t[1]).all() and t[-1, 0] == -1.0  # full of Max, last dim-0 slice = Min
    assert t.reshape(-1)[0] == -1.0 and t.reshape(-1)[-1] == math.inf


def test_empty_shape_int_and_bool() -> None:
    assert random_tensor(tensor("torch.float32", [0, 4], 0.0, 0.0), gen()).shape == (0, 4)
    ints = random_tensor(tensor("torch.int64", [100], 0, 9), gen())
    assert ints.dtype == torch.int64 and int(ints.min()) >= 0 and int(ints.max()) <= 9
    bools = random_tensor(tensor("torch.bool", [50], False, True), gen())
    assert bools.dtype == torch.bool


def test_unsupported_dtype_and_missing_stats_raise() -> None:
    with pytest.raises(InputError, match=r"Dtype is not supported: torch\.float8_e4m3fn"):
        random_tensor(tensor("torch.float8_e4m3fn", [2], 0.0, 1.0), gen())
    with pytest.raises(InputError, match="no numeric Max/Min"):
        random_tensor(tensor("torch.float32", [2], None, None), gen())


@given(
    lo=st.floats(-1e3, 0, allow_nan=False),
    span=st.floats(0, 1e3, allow_nan=False),
    shape=st.lists(st.integers(1, 5), min_size=0, max_size=3),
    dtype=st.sampled_from(["torch.float16", "torch.bfloat16", "torch.float32", "torch.float64"]),
)
def test_generation_depends_only_on_name_and_stats(
    lo: float, span: float, shape: list[int], dtype: str
) -> None:
    spec = tensor(dtype, shape, lo, lo + span)
    first = random_tensor(spec, gen("Torch.add.3"))
    torch.rand(17)  # global RNG use in between changes nothing
    random_tensor(tensor("torch.float32", [9], 0.0, 1.0), gen("Torch.other.0"))
    again = random_tensor(spec, gen("Torch.add.3"))
    assert torch.equal(first, again) or (torch.isnan(first) == torch.isnan(again)).all()
    assert list(first.shape) == shape


def test_builder_values_and_requires_grad_rules(tmp_path: Path) -> None:
    record = {
        "input_args": [
            tensor("torch.float32", [2], 0.0, 1.0, requires_grad=True),
            {"type": "slice", "value": [0, 2, None]},
            {"type": "ellipsis", "value": "..."},
            [{"type": "int", "value": 1}, None],
            {"type": "torch.Size", "value": [2, 3]},
        ],
        "input_kwargs": {
            "dtype": {"type": "torch.dtype", "value": "torch.float16"},
            "device": {"type": "torch.device", "value": "cuda:0"},
            "alpha": {"type": "float32", "value": 2.0},
        },
    }
    args, kwargs = ArgBuilder(tmp_path, gen()).build(record)
    assert isinstance(args[0], TensorArg) and args[0].requires_grad
    assert args[1:] == [slice(0, 2, None), ..., [1, None], torch.Size([2, 3])]
    assert kwargs["dtype"] is torch.float16 and kwargs["device"] == DeviceArg("cuda:0")
    assert type(kwargs["alpha"]).__name__ == "float32"
    record["input_kwargs"] = {"out": tensor("torch.float32", [2], 0.0, 1.0, requires_grad=True)}
    args, kwargs = ArgBuilder(tmp_path, gen()).build(record)
    assert not args[0].requires_grad and not kwargs["out"].requires_grad  # out= disables grads


def test_unknown_argument_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"argument type .builtins\.eval. is not supported"):
        ArgBuilder(tmp_path, gen()).build({"input_args": [{"type": "builtins.eval", "value": "1"}]})


def test_out_none_is_no_out_call(tmp_path: Path) -> None:
    """torch re-packs a call made through ``*args, **kwargs`` with its defaults, ``out=None`` too
    (``F.normalize``, ``torch.norm``): the dump records ``out: null``, which was read as an ``out=``
    call, so the inputs lost their gradients and the backward was never compared."""
    record = {
        "input_args": [tensor("torch.float32", [4, 3], -1.0, 1.0, requires_grad=True)],
        "input_kwargs": {"dim": {"type": "int", "value": -1}, "out": None},
    }
    args, kwargs = ArgBuilder(tmp_path, gen()).build(record)
    assert args[0].requires_grad and kwargs["out"] is None
    from replay_dumps import forward

    from msprobe.run_ut.records import ApiRecord
    from msprobe.run_ut.replay import replay

    x = tensor("torch.float32", [4, 3], -1.0, 1.0, requires_grad=True)
    fwd = forward(
        x, dim={"type": "int", "value": -1}, out=None, output=[tensor("torch.float32", [4, 3], -1, 1)]
    )
    bwd = {"input": [tensor("torch.float32", [4, 3], -1.0, 1.0)], "output": [None]}
    result = replay(ApiRecord("Functional.normalize.0", 0, fwd, bwd), tmp_path, "cpu")
    assert result.result[1:3] == ["pass", "pass"], result.result


@pytest.mark.parametrize(
    ("dtype", "info"),
    [("torch.int32", torch.iinfo(torch.int32)), ("torch.int64", torch.iinfo(torch.int64))],
)
def test_integer_statistics_at_the_dtypes_limits_are_drawn(dtype: str, info: torch.iinfo) -> None:
    """The dump writes an integer tensor's Max/Min in float32 (as 8.1.1), which rounds the dtype's
    largest value one past it (``iinfo(int32).max`` -> ``2147483648.0``); the draw keeps to the
    dtype's range instead of failing (the API was skipped: "cannot draw ... out of bounds")."""
    hi, lo = (
        float(torch.tensor(info.max, dtype=torch.float32)),
        float(torch.tensor(info.min, dtype=torch.float32)),
    )
    t = random_tensor(tensor(dtype, [6], lo, hi), gen())
    assert t.dtype == getattr(torch, dtype.split(".")[1])
    assert t[0].item() == info.min and t[-1].item() == info.max
    const = random_tensor(tensor(dtype, [3], hi, hi), gen())
    assert const.tolist() == [info.max] * 3
