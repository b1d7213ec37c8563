"""The batch of pending statistics: order, no mutation of the queued records, in-place detection."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from msprobe.dump.mindspore import deferred
from msprobe.dump.mindspore.deferred import Batch, Pending, is_inplace, mutator_names, resolve


@pytest.mark.parametrize(
    ("api", "inplace"),
    [
        ("add_", True),
        ("__iadd__", True),
        ("assign", True),
        ("assign_add", True),
        ("inplace_update", True),
        ("scatter_update", True),
        ("add", False),
        ("__add__", False),
        ("__init__", False),
        ("__index__", False),
        ("relu", False),
    ],
)
def test_is_inplace(api, inplace):
    assert is_inplace(api) is inplace


def test_tensor_mutators_include_setitem_and_copy():
    names = mutator_names(ms.Tensor)
    assert {"__setitem__", "copy_", "assign_value", "add_", "__iadd__"} <= set(names)
    assert "requires_grad_" not in names and "__init__" not in names


leaf = st.one_of(
    st.integers(),
    st.text(max_size=3),
    st.none(),
    st.builds(lambda v: Pending(v, lambda t: -t), st.integers()),
)
trees = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=10,
)


def _reference(tree):
    if isinstance(tree, Pending):
        return -tree.tensor
    if isinstance(tree, dict):
        return {k: _reference(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_reference(v) for v in tree]
    return tree


@given(trees)
def test_resolve_replaces_every_pending_and_leaves_the_input_alone(tree):
    before = repr(tree)
    assert resolve(tree) == _reference(tree)
    assert repr(tree) == before


def test_batch_writes_in_order_and_when_full(monkeypatch):
    monkeypatch.setattr(deferred, "BATCH", 3)
    written: list[tuple[str, object]] = []
    batch = Batch(lambda n, r: written.append((n, r)), lambda n, e: written.append((n, "error")))
    batch.add("a", [Pending(1, lambda t: t * 10)])
    batch.add("b", {"x": 2})
    assert written == []
    batch.add("c", [Pending(np.float32(3), lambda t: float(t) + 0.5)])
    assert written == [("a", [10]), ("b", {"x": 2}), ("c", [3.5])]
    batch.add("d", [Pending(None, lambda t: 1 / 0)])
    batch.flush()
    assert written[-1] == ("d", "error") and batch.queue == []
