"""API coverage of the L1 dump: upstream 8.1.1's names and operator names, discovered public
functions in no list, and the deny list."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from msprobe.dump.api_families import DENY, DENY_KEY, load_api_list
from msprobe.dump.pytorch.capture import build_mode_table, discovered_functions
from tests.dump.conftest import load_dump


def _names(tmp_path: Path, fn: Callable[[], Any]) -> set[str]:
    """The ``Prefix.api`` names an L1 statistics dump of ``fn()`` records."""
    from msprobe.pytorch import PrecisionDebugger

    PrecisionDebugger._shutdown()
    try:
        dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
        dbg.start()
        fn()
        dbg.stop()
        dbg.step()
    finally:
        PrecisionDebugger._shutdown()
    data = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    return {".".join(k.split(".")[:2]) for k in data}


X = torch.randn(3, 4)
Y = torch.rand(3, 4) + 1
N = torch.arange(4)


def _ipow() -> None:
    z = Y.clone()
    z **= 2


# (upstream's record name, an eager call producing it)
UPSTREAM_FORMS: list[tuple[str, Callable[[], Any]]] = [
    ("Tensor.__floordiv__", lambda: X // Y),
    ("Tensor.__lt__", lambda: X < Y),
    ("Tensor.__le__", lambda: X <= Y),
    ("Tensor.__ne__", lambda: X != Y),
    ("Tensor.__ipow__", _ipow),
    ("Tensor.__rpow__", lambda: 2**X),
    ("Tensor.__rmod__", lambda: 5 % Y),
    ("Tensor.__ror__", lambda: 1 | N),
    ("Tensor.__rxor__", lambda: 1 ^ N),
    ("Tensor.__rsub__", lambda: 1 - X),
    ("Tensor.expand", lambda: X.expand(2, 3, 4)),
    ("Tensor.expand_as", lambda: X.expand_as(torch.zeros(2, 3, 4))),
    ("Torch.empty_like", lambda: torch.empty_like(X)),
    ("Tensor.bool", lambda: X.bool()),
    ("Tensor.long", lambda: X.long()),
    ("Tensor.int", lambda: X.int()),
    ("Tensor.double", lambda: X.double()),
    ("Tensor.bfloat16", lambda: X.bfloat16()),
    ("Tensor.movedim", lambda: X.movedim(0, 1)),
    ("Tensor.swapaxes", lambda: X.swapaxes(0, 1)),
    ("Torch.outer", lambda: torch.outer(N, N)),
    ("Tensor.unique", lambda: N.unique()),
    ("Torch.isin", lambda: torch.isin(N, N)),
    ("Torch.unflatten", lambda: torch.unflatten(X, 1, (2, 2))),
    ("Torch.aminmax", lambda: torch.aminmax(X)),
]


@pytest.mark.parametrize(("name", "call"), UPSTREAM_FORMS, ids=[n for n, _ in UPSTREAM_FORMS])
def test_recorded_under_upstream_name(tmp_path: Path, name: str, call: Callable[[], Any]) -> None:
    assert name in _names(tmp_path, call)


def test_operators_not_recorded_under_their_method_names(tmp_path: Path) -> None:
    names = _names(tmp_path, lambda: (X // Y, X < Y, 1 - X))
    assert not names & {"Torch.floor_divide", "Tensor.floor_divide", "Tensor.lt", "Tensor.rsub", "Torch.rsub"}


DOCUMENTED_EXTRAS: list[tuple[str, Callable[[], Any]]] = [
    ("Tensor.neg", lambda: -X),
    ("Tensor.div_", lambda: Y.clone().__itruediv__(2)),
]


@pytest.mark.parametrize(("name", "call"), DOCUMENTED_EXTRAS, ids=[n for n, _ in DOCUMENTED_EXTRAS])
def test_documented_deviations(tmp_path: Path, name: str, call: Callable[[], Any]) -> None:
    assert name in _names(tmp_path, call)


def test_early_bound_functional_recorded(tmp_path: Path) -> None:
    from torch.nn.functional import gelu  # bound before the debugger starts

    assert "Functional.gelu" in _names(tmp_path, lambda: gelu(X))


def test_denied_names_not_recorded(tmp_path: Path) -> None:
    def queries() -> None:
        X.size(), X.dim(), X.numel(), X.is_contiguous(), X.data_ptr(), X.is_floating_point()
        X.view(12), X[0], X.item() if X.numel() == 1 else X.sum().item(), X.tolist()

    names = _names(tmp_path, queries)
    denied = {f"Tensor.{n}" for n in ("size", "dim", "numel", "is_contiguous", "data_ptr", "view", "item")}
    assert not names & (denied | {"Tensor.__getitem__", "Tensor.tolist", "Tensor.is_floating_point"})
    assert "Tensor.sum" in names  # the dump was on


def test_unlisted_public_function_is_discovered() -> None:
    lists = load_api_list()
    table = build_mode_table(lists)
    assert "zeros_like" not in lists["torch"]  # in no list: recorded by discovery
    assert table[torch.zeros_like] == ("Torch", "zeros_like")
    for entry in DENY:
        family, _, name = entry.partition(".")
        if family == "tensor" and hasattr(torch.Tensor, name):
            assert getattr(torch.Tensor, name) not in table, entry


@pytest.mark.skipif(not hasattr(F, "grouped_mm"), reason="torch without F.grouped_mm")
def test_grouped_mm_does_not_vanish(tmp_path: Path) -> None:
    assert "grouped_mm" not in load_api_list()["functional"]
    patched = {(owner, attr) for owner, attr, _, _ in discovered_functions(load_api_list())}
    assert (F, "grouped_mm") in patched
    a, b = torch.randn(2, 8, 16, dtype=torch.bfloat16), torch.randn(2, 16, 8, dtype=torch.bfloat16)
    assert "Functional.grouped_mm" in _names(tmp_path, lambda: F.grouped_mm(a, b))


def test_function_added_to_a_namespace_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A public Python function that torch.nn.functional gains is recorded without any list edit."""

    def fresh_op(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    fresh_op.__module__ = "torch.nn.functional"
    monkeypatch.setattr(F, "fresh_op", fresh_op, raising=False)
    assert "Functional.fresh_op" in _names(tmp_path, lambda: F.fresh_op(X))


def test_yaml_deny_section_wins_over_list_and_discovery(tmp_path: Path) -> None:
    path = tmp_path / "ops.yaml"
    path.write_text("tensor:\n  - add\n  - expand\ndeny:\n  - tensor.expand\n  - torch.zeros_like\n")
    lists = load_api_list(str(path))
    assert lists["tensor"] == ["add"]
    table = build_mode_table(lists)
    assert torch.zeros_like not in table and torch.Tensor.expand not in table
    assert table[torch.Tensor.add] == ("Tensor", "add")
    assert set(DENY) <= set(lists[DENY_KEY])


def test_deny_list_has_a_reason_and_spares_upstream_names() -> None:
    lists = load_api_list()
    for entry, reason in DENY.items():
        family, _, name = entry.partition(".")
        assert reason and name
        assert name not in lists.get(family, [])


def test_builtins_sharing_a_c_function_are_recorded_by_their_operators_name(tmp_path: Path) -> None:
    """``torch.mm == torch.dsmm`` (one C function, two names, and builtins compare by it): the name
    table gave every ``torch.mm`` call the first equal name listed, ``Torch.dsmm``. torch hands the
    function mode the function named after the aten operator for a call of either, so that name wins
    (a call of the alias ``dsmm`` is recorded as ``Torch.mm`` too)."""
    assert torch.mm == torch.dsmm and torch.mm is not torch.dsmm  # the trap itself
    table = build_mode_table(load_api_list())
    for alias, operator in (("dsmm", "mm"), ("spmm", "mm"), ("hsmm", "hspmm"), ("saddmm", "sspaddmm")):
        assert table[getattr(torch, operator)] == ("Torch", operator)
        assert table[getattr(torch, alias)] == ("Torch", operator)
    names = _names(tmp_path, lambda: torch.mm(X, X.t()))
    assert "Torch.mm" in names and "Torch.dsmm" not in names
