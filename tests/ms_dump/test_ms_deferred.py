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
        ("__init_subclass__", False),
        ("relu", False),
    ],
)
def test_is_inplace(api, inplace):
    """MindSpore's rule is the shared naming (``in_place_name``, which the PyTorch dump and the replay
    read) plus its own prefixes: the dunder exclusions were two lists that had drifted apart."""
    from msprobe.formats.record_names import in_place_name

    assert is_inplace(api) is inplace
    if not api.startswith(("assign", "inplace_", "scatter_")):
        assert in_place_name(api) is inplace


def test_tensor_mutators_include_setitem_and_copy():
    names = mutator_names(ms.Tensor)
    assert {"__setitem__", "copy_", "assign_value", "add_", "__iadd__"} <= set(names)
    assert "requires_grad_" not in names and "__init__" not in names


leaf = st.one_of(
    st.integers(),
    st.text(max_size=3),
    st.none(),
    st.builds(lambda v: Pending(v, lambda t: -t, lambda t: None), st.integers()),
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
    failures: list[tuple[BaseException, bool]] = []
    assert resolve(tree, failures) == _reference(tree)
    assert repr(tree) == before and failures == []


def test_batch_writes_in_order_and_when_full(monkeypatch):
    monkeypatch.setattr(deferred, "BATCH", 3)
    written: list[tuple[str, object]] = []
    batch = Batch(lambda n, r: written.append((n, r)), lambda n, e: written.append((n, "error")))
    batch.add("a", [Pending(1, lambda t: t * 10, _blank)])
    batch.add("b", {"x": 2})
    assert written == []
    batch.add("c", [Pending(np.float32(3), lambda t: float(t) + 0.5, _blank)])
    assert written == [("a", [10]), ("b", {"x": 2}), ("c", [3.5])]
    batch.add("d", [Pending(None, lambda t: 1 / 0, _blank)])
    batch.flush()
    assert written[-2:] == [("d", ["blank"]), ("d", "error")] and batch.queue == []


def _blank(t):
    return "blank"


class _Flaky:
    """A read that fails its first ``fails`` times (another op's error surfacing at the first read of
    the batch, as MindSpore reports an asynchronous failure at the next read, whichever)."""

    def __init__(self, fails: int) -> None:
        self.fails = fails

    def read(self, value):
        if self.fails:
            self.fails -= 1
            raise RuntimeError("The kernel X unregistered.")
        return value


def test_a_failure_surfacing_at_our_read_is_raised_once_the_batch_is_written():
    """Without msprobe the program's next read raises it: swallowed here, a failing program would run
    on. The record whose read it interrupted keeps its values (read again); nothing is dropped."""
    written: list[tuple[str, object]] = []
    batch = Batch(lambda n, r: written.append((n, r)), lambda n, e: written.append((n, "error")))
    surfacing = _Flaky(1)
    batch.add("mul", [Pending(10, surfacing.read, _blank)])
    batch.add("zeros_like", [Pending(20, _Flaky(2).read, _blank)])  # the failed op's own output
    batch.add("where", [Pending(30, lambda t: t, _blank)])
    with pytest.raises(RuntimeError, match="unregistered"):
        batch.flush()
    assert written == [
        ("mul", [10]),
        ("zeros_like", ["blank"]),
        ("zeros_like", "error"),
        ("where", [30]),
    ]
    assert batch.queue == []


def test_an_error_of_our_own_summary_is_logged_not_raised():
    written: list[tuple[str, object]] = []
    batch = Batch(lambda n, r: written.append((n, r)), lambda n, e: written.append((n, type(e).__name__)))
    batch.add("odd", [Pending("x", lambda t: int(t), _blank)])
    batch.flush()
    assert written == [("odd", ["blank"]), ("odd", "ValueError")]
