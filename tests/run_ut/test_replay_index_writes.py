"""Writes through index tensors (``scatter``, ``index_copy``, ``index_put``, ``x[idx] = v``, ``put``)
replayed from statistics: the drawn indices repeat no value, so a device that keeps another of two
duplicate writes than the CPU (CUDA and NPU do not define which one) is not failed for it."""

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
from msprobe.run_ut.inputs import DISTINCT_ALONG, distinct_integers, random_tensor

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
