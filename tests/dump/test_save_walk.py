"""The framework-neutral nesting walk of ``save(variable, name)`` (msprobe/dump/save_walk.py)."""

from __future__ import annotations

from typing import Any

import pytest

from msprobe.dump.save_walk import MAX_DEPTH, check_savable, nulls, set_at, tensor_leaves


class Leaf:
    """Stands for a framework tensor: the walk only needs its type."""


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (Leaf(), None),
        ([1, 2.5, "s", True, (Leaf(), {"k": Leaf()})], None),
        ({1: Leaf()}, "dict key 1 is not a str"),
        ([1, object()], "unsupported type object"),
        ({"a": [None]}, "unsupported type NoneType"),
    ],
)
def test_check_savable(value: Any, why: str | None) -> None:
    assert check_savable(value, Leaf) == why


def test_check_savable_depth_limit() -> None:
    deep: Any = Leaf()
    for _ in range(MAX_DEPTH):
        deep = [deep]
    assert check_savable(deep, Leaf) is None
    assert check_savable([deep], Leaf) == f"nesting deeper than {MAX_DEPTH}"


def test_leaves_nulls_and_set_at_agree() -> None:
    a, b, c = Leaf(), Leaf(), Leaf()
    value = {"x": (a, 3), "y": [{"z": b}], "w": c}
    leaves = tensor_leaves(value, Leaf)
    assert leaves == [(("x", 0), a), (("y", 0, "z"), b), (("w",), c)]
    tree = nulls(value)
    assert tree == {"x": [None, None], "y": [{"z": None}], "w": None}
    for path, leaf in leaves:
        tree = set_at(tree, path, id(leaf))
    assert tree == {"x": [id(a), None], "y": [{"z": id(b)}], "w": id(c)}
    assert set_at(None, (), "root") == "root" and tensor_leaves(a, Leaf) == [((), a)]
