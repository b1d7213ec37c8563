"""The one tree walk: every argument traversal of the dump sees the same containers, in the same order."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple
from typing import Any

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.dump.pytorch.encode import Encoder
from msprobe.dump.pytorch.stat_batch import StatsBatch
from msprobe.dump.pytorch.stats import SummaryCache
from msprobe.dump.pytorch.tree import MAPPING, SEQUENCE, branches, first_tensor, tensors

Pair = namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class Box:
    x: Any
    y: Any


class Output(OrderedDict):  # type: ignore[type-arg]
    """Like transformers' ModelOutput: an ordered dict subclass."""


def _reference(v: Any) -> list[Any]:
    """The leaves of a nest, written out case by case (what every traversal must agree with)."""
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, Pair):
        return _reference(v.a) + _reference(v.b)
    if isinstance(v, list | tuple):
        return [x for part in v for x in _reference(part)]
    if isinstance(v, dict):
        return [x for part in v.values() for x in _reference(part)]
    if isinstance(v, Box):
        return _reference(v.x) + _reference(v.y)
    return []


_counter = iter(range(1, 10**9))


def _tensor(_: Any) -> torch.Tensor:
    return torch.zeros(next(_counter) % 50 + 1)  # its shape tells tensors apart in a record


leaves = st.one_of(st.builds(_tensor, st.none()), st.integers(-5, 5), st.none(), st.text(max_size=3))
nests = st.recursive(
    leaves,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.lists(kids, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from("abc"), kids, max_size=3),
        st.dictionaries(st.sampled_from("abc"), kids, max_size=3).map(Output),
        st.builds(Pair, kids, kids),
        st.builds(Box, kids, kids),
    ),
    max_leaves=12,
)


def _summaries(encoded: Any) -> list[dict[str, Any]]:
    if isinstance(encoded, dict) and encoded.get("type") == "torch.Tensor":
        return [encoded]
    if isinstance(encoded, dict):
        return [s for v in encoded.values() for s in _summaries(v)]
    if isinstance(encoded, list):
        return [s for v in encoded for s in _summaries(v)]
    return []


@settings(max_examples=150, deadline=None)
@given(nests)
def test_every_traversal_sees_the_same_tensors_in_order(nest: Any) -> None:
    expected = _reference(nest)
    assert [id(t) for t in tensors(nest)] == [id(t) for t in expected]
    assert first_tensor(nest) is (expected[0] if expected else None)
    encoded = Encoder(SummaryCache(), False, None, StatsBatch()).value(nest, "r", "input")
    assert [s["shape"] for s in _summaries(encoded)] == [list(t.shape) for t in expected]


def test_branches_of_each_container() -> None:
    t = torch.ones(1)
    assert branches([t, 1]) == (SEQUENCE, [(0, t), (1, 1)])
    assert branches((t,)) == (SEQUENCE, [(0, t)])
    assert branches(Pair(t, 2)) == (MAPPING, [("a", t), ("b", 2)])
    assert branches({1: t}) == (MAPPING, [("1", t)])
    assert branches(Output(h=t)) == (MAPPING, [("h", t)])
    assert branches(Box(t, None)) == (MAPPING, [("x", t), ("y", None)])
    for leaf in (t, 1, "s", None, Box):
        assert branches(leaf) is None


def test_a_self_containing_list_ends() -> None:
    loop: list[Any] = [torch.ones(1)]
    loop.append(loop)
    assert len(list(tensors(loop))) >= 1


def test_upstream_encodings_of_device_numbers_numpy_scalars_and_list_outputs() -> None:
    enc = Encoder(SummaryCache(), False, None, StatsBatch())
    assert enc.value(0, "r", "kwargs", ("device",), "device") == {"type": "torch.device", "value": 0}
    assert enc.value(True, "r", "kwargs", ("device",), "device") == {"type": "bool", "value": True}
    assert enc.value(np.float64(0.5), "r", "input") == {"type": "float64", "value": 0.5}
    assert enc.value(np.str_("a"), "r", "input") == {"type": "str_", "value": "a"}
    out = enc.output([torch.ones(1), torch.ones(2)], "r")  # a list is one output, as upstream wraps it
    assert [[t["shape"] for t in o] for o in out] == [[[1], [2]]]
    assert [t["shape"] for t in enc.output((torch.ones(1), torch.ones(2)), "r")] == [[1], [2]]
