"""Inputs drawn without repeated values where a device may resolve equal values otherwise than the CPU
without being wrong: the indices of writes (``scatter``, ``index_copy``, ``index_put``, ``x[idx] = v``,
``put``; CUDA and NPU do not define which of two duplicate writes stays) and the values that sorting
and selecting order (``sort``, ``topk``, ...; equal values come out in the kernel's order)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from replay_dumps import forward, scalar, tensor
from test_replay_api_table import run

from msprobe.run_ut import registry
from msprobe.run_ut.draws import DISTINCT_ALONG, distinct_floats, distinct_integers, random_tensor

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


# --- the draw ----------------------------------------------------------------------------------------


@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    low=st.integers(-50, 50),
    extra=st.integers(0, 12),
    axis=st.integers(-4, 3),
    whole=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_drawn_indices_repeat_no_value_along_their_dimension(
    shape: list[int], low: int, extra: int, axis: int, whole: bool, seed: int
) -> None:
    dim = None if whole else axis % len(shape)
    k = shape[dim] if dim is not None else torch.Size(shape).numel()
    high = low + k - 1 + extra  # the range holds k values or more
    gen = torch.Generator().manual_seed(seed)
    drawn = distinct_integers(shape, torch.int64, low, high, dim, gen)
    assert drawn is not None and list(drawn.shape) == shape and drawn.dtype == torch.int64
    assert drawn.min() >= low and drawn.max() <= high
    if drawn.numel() > 1:
        assert drawn.min() == low and drawn.max() == high  # the recorded Min and Max are drawn
    rows = drawn.reshape(1, -1) if dim is None else drawn.movedim(dim, -1).reshape(-1, k)
    assert all(len(set(row.tolist())) == k for row in rows)


@given(k=st.integers(2, 20), short=st.integers(1, 10), seed=st.integers(0, 2**31))
def test_a_range_too_small_for_distinct_values_keeps_the_plain_draw(k: int, short: int, seed: int) -> None:
    span = max(k - short, 1)
    assert distinct_integers([k], torch.int64, 0, span - 1, None, torch.Generator().manual_seed(seed)) is None
    spec = tensor("torch.int64", [k], 0, span - 1) | {DISTINCT_ALONG: None}
    drawn = random_tensor(spec, torch.Generator().manual_seed(seed))
    assert drawn.min() == 0 and drawn.max() == span - 1  # statistics still honoured, repeats and all


@given(
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32]),
    shape=st.lists(st.integers(1, 300), min_size=1, max_size=2),
    low=st.floats(-1e3, 1e3),
    width=st.floats(1e-3, 1e3),
    seed=st.integers(0, 2**31),
)
def test_drawn_floats_repeat_no_value_and_are_never_subnormal(
    dtype: torch.dtype, shape: list[int], low: float, width: float, seed: int
) -> None:
    """What sorting sees: distinct values in [Min, Max] along the last dimension; none subnormal (a
    device that flushes them to zero would tie them again)."""
    low = float(torch.tensor(low, dtype=dtype))
    high = float(torch.tensor(low + width, dtype=dtype))
    drawn = distinct_floats(shape, dtype, low, high, -1, torch.Generator().manual_seed(seed))
    if drawn is None:  # too few values of the dtype in the range: the plain draw
        return
    assert drawn.dtype == dtype and list(drawn.shape) == shape
    assert drawn.min() >= low and drawn.max() <= high
    if drawn.numel() > 1:
        assert drawn.min() == low and drawn.max() == high
    rows = drawn.reshape(-1, shape[-1])
    assert all(len(set(row.tolist())) == shape[-1] for row in rows)
    values = drawn.float()
    assert not ((values != 0) & (values.abs() < torch.finfo(dtype).tiny)).any()


# --- which records the table marks -------------------------------------------------------------------

INDEX = tensor("torch.int64", [12], 0, 15)
VALUES = tensor("torch.float32", [12, 4], -1.0, 1.0)
TARGET = tensor("torch.float32", [16, 4], -1.0, 1.0)


def _marked(api_type: str, name: str, record: dict[str, Any]) -> list[Any]:
    info = registry.lookup(api_type, name)
    assert info.prepare_spec is not None, name
    info.prepare_spec(record)
    found = []
    for arg in [*record["input_args"], *record["input_kwargs"].values()]:
        for item in arg if isinstance(arg, list) else [arg]:
            if isinstance(item, dict) and DISTINCT_ALONG in item:
                found.append(item[DISTINCT_ALONG])
    return found


def test_the_table_marks_the_index_of_each_write_and_its_dimension() -> None:
    def rec(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(forward(*args, **kwargs))

    assert _marked("Tensor", "scatter_", rec(TARGET, scalar("int", 1), INDEX, VALUES)) == [1]
    assert _marked("Torch", "scatter", rec(TARGET, dim=scalar("int", 0), index=INDEX, src=VALUES)) == [0]
    assert _marked("Tensor", "index_copy_", rec(TARGET, scalar("int", 0), INDEX, VALUES)) == [None]
    assert _marked("Tensor", "index_put_", rec(TARGET, [INDEX, INDEX], VALUES)) == [None, None]
    mask = tensor("torch.bool", [16], False, True)
    assert _marked(
        "Tensor", "__setitem__", rec(TARGET, [scalar("slice", [None, None, None]), INDEX], VALUES)
    ) == [None]
    assert _marked("Tensor", "__setitem__", rec(TARGET, mask, VALUES)) == []
    # accumulating writes sum their duplicates: their repeats are part of what is checked
    assert _marked("Tensor", "index_put_", rec(TARGET, [INDEX], VALUES, scalar("bool", True))) == []
    assert _marked("Tensor", "put_", rec(TARGET, INDEX, VALUES, accumulate=scalar("bool", True))) == []
    assert (
        _marked(
            "Tensor", "scatter_", rec(TARGET, scalar("int", 0), INDEX, VALUES, reduce=scalar("str", "add"))
        )
        == []
    )


def test_the_table_marks_what_sorting_and_selecting_order_and_along_which_dimension() -> None:
    x = tensor("torch.float16", [4, 64], -1.0, 1.0)

    def marked(api_type: str, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        return _marked(api_type, name, copy.deepcopy(forward(x, *args, **kwargs)))

    assert marked("Torch", "sort") == [-1]
    assert marked("Tensor", "sort", scalar("int", 0)) == [0]
    assert marked("Torch", "argsort", dim=scalar("int", 1)) == [1]
    assert marked("Torch", "topk", scalar("int", 3)) == [-1]
    assert marked("Tensor", "topk", scalar("int", 3), scalar("int", 0)) == [0]
    assert marked("Torch", "kthvalue", scalar("int", 3), dim=scalar("int", 0)) == [0]
    assert marked("Torch", "msort") == [0]
    assert marked("Torch", "mode") == [-1]
    assert marked("Torch", "median") == [None]  # the whole tensor's median
    assert marked("Tensor", "median", scalar("int", 1)) == [1]
    assert marked("Torch", "nanmedian", scalar("int", 0)) == [0]


# --- end to end, against a device that keeps the first of duplicate writes --------------------------

FIRST_WRITE_WINS_CONFTEST = """
def pytest_msprobe_device_function(api_type, bare_name, function):
    # a device that keeps the first of two writes to one element (the CPU keeps the last): the
    # written values in reverse order give that, and change nothing when no index repeats
    if bare_name in ("scatter", "scatter_"):
        return lambda x, dim, index, src: function(x, dim, index.flip(dim), src.flip(dim))
    if bare_name in ("index_copy", "index_copy_"):
        return lambda x, dim, index, src: function(x, dim, index.flip(0), src.flip(dim))
    if bare_name in ("index_put", "index_put_"):
        return lambda x, indices, values: function(x, [i.flip(0) for i in indices], values.flip(0))
    if bare_name == "__setitem__":
        return lambda x, key, value: function(x, key.flip(0), value.flip(0))
    if bare_name in ("put", "put_"):
        return lambda x, index, source: function(x, index.flip(0), source.flip(0))
    return function
"""


def test_writes_through_drawn_indices_replay_on_a_device_that_keeps_another_duplicate(
    pytester: pytest.Pytester,
) -> None:
    """Twelve indices drawn with repeats from sixteen values almost surely repeat one (P > 0.99);
    the device keeps the other of the two writes than the CPU, and the replay failed where the
    device was right."""
    pytester.makeconftest(FIRST_WRITE_WINS_CONFTEST)
    columns = tensor("torch.int64", [12, 4], 0, 15)
    data = {
        "Tensor.scatter.0.forward": forward(TARGET, scalar("int", 0), columns, VALUES),
        "Torch.scatter.0.forward": forward(TARGET, scalar("int", 0), columns, VALUES),
        "Tensor.index_copy_.0.forward": forward(TARGET, scalar("int", 0), INDEX, VALUES),
        "Tensor.index_put.0.forward": forward(TARGET, [INDEX], VALUES),
        "Tensor.__setitem__.0.forward": forward(TARGET, INDEX, VALUES),
        "Tensor.put_.0.forward": forward(
            TARGET, tensor("torch.int64", [48], 0, 63), tensor("torch.float32", [48], -1, 1)
        ),
    }
    _, rows = run(pytester, data)
    verdicts = {name: row[1] for name, row in rows.items()}
    assert verdicts == {name.removesuffix(".forward"): "pass" for name in data}


# --- end to end, against a device that orders equal values the other way -------------------------------

OTHER_TIE_ORDER_CONFTEST = """
import torch


def pytest_msprobe_device_function(api_type, bare_name, function):
    # a device whose kernel orders equal values the other way round than the CPU's: the flipped
    # input sorted, its indices mapped back (the same result where no value repeats)
    if bare_name not in ("sort", "argsort", "topk"):
        return function

    def other_order(x, *args, **kwargs):
        dim = kwargs.get("dim", args[0] if bare_name != "topk" and args else -1)
        if bare_name == "topk" and len(args) > 1:
            dim = args[1]
        out = function(x.flip(dim), *args, **kwargs)
        last = x.shape[dim] - 1
        if isinstance(out, torch.Tensor):
            return last - out
        return type(out)((out[0], last - out[1]))

    return other_order
"""


def test_sorting_drawn_values_replays_on_a_device_that_orders_equal_values_otherwise(
    pytester: pytest.Pytester,
) -> None:
    """256 float16 values drawn with repeats in [-1, 1] repeat some (the draw has a few thousand
    values to pick from): the device returns other indices for them, and the gradient of topk goes
    to other elements; the replay failed where the device was right."""
    pytester.makeconftest(OTHER_TIE_ORDER_CONFTEST)
    x = tensor("torch.float16", [4, 256], -1.0, 1.0, requires_grad=True)
    half = scalar("int", 128)
    grad = {"input": [tensor("torch.float16", [4, 128], -1.0, 1.0), None], "output": [None]}
    data = {
        "Torch.sort.0.forward": forward(x, dim=scalar("int", -1)),
        "Torch.argsort.0.forward": forward(x, scalar("int", 1)),
        "Torch.topk.0.forward": forward(x, half),
        "Torch.topk.0.backward": grad,
    }
    _, rows = run(pytester, data)
    assert {name: row[1:3] for name, row in rows.items()} == {
        "Torch.sort.0": ["pass", " "],
        "Torch.argsort.0": ["pass", " "],
        "Torch.topk.0": ["pass", "pass"],
    }
