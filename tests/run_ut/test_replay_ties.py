"""Saved inputs with equal values, replayed through the APIs that order them (``sort``, ``topk``, ...):
a device that orders equal values otherwise than the CPU is right, and its indices and gradients,
scored modulo the order of equal values, pass; one that names an element of another value fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from replay_dumps import forward, scalar, tensor, write_dump
from test_replay_api_table import run

from msprobe.run_ut.ties import canonical_grad, canonical_indices, first_equal

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


# --- the canonical form --------------------------------------------------------------------------------

rows_with_ties = st.lists(
    st.lists(st.integers(0, 4), min_size=1, max_size=12), min_size=1, max_size=3
).filter(lambda rows: len({len(r) for r in rows}) == 1)


def _permuted_within_ties(x: torch.Tensor, seed: int) -> torch.Tensor:
    """Per row, a permutation of the positions that moves each position to one of equal value."""
    gen = torch.Generator().manual_seed(seed)
    out = torch.arange(x.shape[-1]).repeat(x.shape[0], 1)
    for r in range(x.shape[0]):
        for value in x[r].unique():
            where = (x[r] == value).nonzero().flatten()
            out[r, where] = where[torch.randperm(len(where), generator=gen)]
    return out


@given(rows=rows_with_ties, seed=st.integers(0, 2**31))
def test_indices_differing_only_among_equal_values_have_one_canonical_form(
    rows: list[list[int]], seed: int
) -> None:
    x = torch.tensor(rows, dtype=torch.bfloat16)
    first = first_equal(x)
    order = torch.sort(x, dim=-1, stable=True).indices
    other = _permuted_within_ties(x, seed).gather(-1, order)  # the same sort, ties taken otherwise
    assert torch.equal(x.gather(-1, other), x.gather(-1, order))
    assert torch.equal(canonical_indices(first, order), canonical_indices(first, other))
    # each canonical index names an element equal to the one the index named
    assert torch.equal(x.gather(-1, canonical_indices(first, order)), x.gather(-1, order))


@given(rows=rows_with_ties, seed=st.integers(0, 2**31))
def test_an_index_naming_another_value_keeps_a_different_canonical_form(
    rows: list[list[int]], seed: int
) -> None:
    x = torch.tensor(rows, dtype=torch.float16)
    first = first_equal(x)
    index = torch.randint(0, x.shape[-1], x.shape, generator=torch.Generator().manual_seed(seed))
    wrong = (index + 1) % x.shape[-1]
    differs = x.gather(-1, index) != x.gather(-1, wrong)
    assert torch.equal(canonical_indices(first, index) != canonical_indices(first, wrong), differs)


@given(rows=rows_with_ties, seed=st.integers(0, 2**31))
def test_gradients_permuted_among_equal_inputs_have_one_canonical_form(
    rows: list[list[int]], seed: int
) -> None:
    x = torch.tensor(rows, dtype=torch.float32)
    first = first_equal(x)
    gen = torch.Generator().manual_seed(seed)
    grad = torch.randn(x.shape, generator=gen)
    moved = grad.gather(-1, _permuted_within_ties(x, seed + 1))
    assert torch.equal(canonical_grad(first, grad), canonical_grad(first, moved))
    canon = canonical_grad(first, grad)
    for r in range(x.shape[0]):  # a permutation of the gradient within each group of equal inputs
        for value in x[r].unique():
            where = x[r] == value
            assert sorted(canon[r][where].tolist()) == sorted(grad[r][where].tolist())


@given(rows=rows_with_ties, seed=st.integers(0, 2**31))
def test_a_gradient_sent_to_an_element_of_another_value_keeps_a_different_canonical_form(
    rows: list[list[int]], seed: int
) -> None:
    x = torch.tensor(rows, dtype=torch.float32)
    first = first_equal(x)
    gen = torch.Generator().manual_seed(seed)
    grad = torch.randn(x.shape, generator=gen)  # distinct values (almost surely)
    i, j = torch.randint(0, x.shape[-1], (2,), generator=gen).tolist()
    swapped = grad.clone()
    swapped[0, i], swapped[0, j] = grad[0, j], grad[0, i]
    moved_across_values = bool(x[0, i] != x[0, j])
    assert torch.equal(canonical_grad(first, grad), canonical_grad(first, swapped)) != moved_across_values


@given(n=st.integers(1, 50), seed=st.integers(0, 2**31))
def test_without_equal_values_the_canonical_form_changes_nothing(n: int, seed: int) -> None:
    x = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).double()[None]
    first = first_equal(x)
    assert torch.equal(first, torch.arange(n)[None])
    grad = torch.randn(1, n, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(canonical_grad(first, grad), grad)


def test_nan_equals_nan_and_signed_zeros_are_equal() -> None:
    x = torch.tensor([[float("nan"), 0.0, 1.0, float("nan"), -0.0]])
    assert first_equal(x).tolist() == [[0, 1, 2, 0, 1]]


# --- end to end, on saved inputs, against a device that orders equal values the other way --------------

ORDERING = {"sort": 1, "argsort": 1, "topk": 2, "kthvalue": 2, "mode": 1, "median": 1, "msort": None}

OTHER_TIE_ORDER_CONFTEST = f"""
import torch

ORDERING = {ORDERING!r}
WRONG = False  # True: a device that names the element after the right one


def pytest_msprobe_device_function(api_type, bare_name, function):
    # the flipped input ordered, its indices mapped back: the CPU's result where no value repeats,
    # other indices (and gradients) among equal values
    if bare_name not in ORDERING:
        return function

    def other_order(x, *args, **kwargs):
        at = ORDERING[bare_name]
        default = None if bare_name == "median" else -1
        dim = 0 if at is None else args[at - 1] if len(args) >= at else kwargs.get("dim", default)
        if dim is None:  # median of the whole tensor: the element mirrored in every dimension
            return function(x.flip(list(range(x.dim()))), *args, **kwargs)
        out = function(x.flip(dim), *args, **kwargs)
        if bare_name == "msort":
            return out
        last = x.shape[dim] - 1
        if isinstance(out, torch.Tensor):
            return last - out
        index = last - out[1]
        if WRONG:
            index = (index + 1) % x.shape[dim]
        return type(out)((out[0], index))

    return other_order
"""


def _saved(folder: Path, name: str, value: torch.Tensor, requires_grad: bool = False) -> dict[str, Any]:
    (folder / "dump_tensor_data").mkdir(parents=True, exist_ok=True)
    torch.save(value, folder / "dump_tensor_data" / name)
    lo, hi = value.min().item(), value.max().item()
    return tensor(str(value.dtype), list(value.shape), lo, hi, requires_grad=requires_grad, data_name=name)


def _records(folder: Path) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(0)
    # bfloat16 values from a handful: most repeat within each row
    x = _saved(folder, "x.pt", torch.randint(0, 6, (4, 32), generator=gen).bfloat16(), requires_grad=True)
    g_topk = _saved(folder, "g_topk.pt", torch.randn(4, 8, generator=gen).bfloat16())
    g_msort = _saved(folder, "g_msort.pt", torch.randn(4, 32, generator=gen).bfloat16())
    g_median = _saved(folder, "g_median.pt", torch.randn((), generator=gen).bfloat16())
    g_sort = _saved(folder, "g_sort.pt", torch.randn(4, 32, generator=gen).bfloat16())
    g_mode = _saved(folder, "g_mode.pt", torch.randn(32, generator=gen).bfloat16())
    return {
        "Torch.sort.0.forward": forward(x, dim=scalar("int", -1)),
        "Torch.sort.0.backward": {"input": [g_sort, None], "output": [None]},
        "Tensor.sort.0.forward": forward(x, scalar("int", 0)),
        "Torch.argsort.0.forward": forward(x, scalar("int", 1), scalar("bool", True)),
        "Torch.topk.0.forward": forward(x, scalar("int", 8)),
        "Torch.topk.0.backward": {"input": [g_topk, None], "output": [None]},
        "Tensor.kthvalue.0.forward": forward(x, scalar("int", 5), scalar("int", 1)),
        "Torch.mode.0.forward": forward(x, scalar("int", 0)),
        "Torch.mode.0.backward": {"input": [g_mode, None], "output": [None]},
        "Torch.median.0.forward": forward(x, scalar("int", -1)),
        "Torch.median.1.forward": forward(x),
        "Torch.median.1.backward": {"input": [g_median], "output": [None]},
        "Torch.msort.0.forward": forward(x),
        "Torch.msort.0.backward": {"input": [g_msort], "output": [None]},
    }


def test_saved_inputs_with_equal_values_replay_on_a_device_that_orders_them_otherwise(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(OTHER_TIE_ORDER_CONFTEST)
    folder = pytester.path / "d"
    data = _records(folder)
    write_dump(folder, data, task="tensor")
    _, rows = run(pytester, data)
    assert {name: row[1:3] for name, row in rows.items()} == {
        "Torch.sort.0": ["pass", "pass"],
        "Tensor.sort.0": ["pass", " "],
        "Torch.argsort.0": ["pass", " "],
        "Torch.topk.0": ["pass", "pass"],
        "Tensor.kthvalue.0": ["pass", " "],
        "Torch.mode.0": ["pass", "pass"],
        "Torch.median.0": ["pass", " "],
        "Torch.median.1": ["pass", "pass"],
        "Torch.msort.0": ["pass", "pass"],
    }


def test_a_device_naming_an_element_of_another_value_still_fails(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(OTHER_TIE_ORDER_CONFTEST.replace("WRONG = False", "WRONG = True"))
    folder = pytester.path / "d"
    data = {k: v for k, v in _records(folder).items() if k.startswith(("Torch.topk", "Tensor.kthvalue"))}
    write_dump(folder, data, task="tensor")
    _, rows = run(pytester, data)
    assert rows["Torch.topk.0"][1] == "error"
    assert rows["Tensor.kthvalue.0"][1] == "error"


HALF_GRADIENT_CONFTEST = """
import torch


class _Half(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        return v.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 0.5


def pytest_msprobe_device_function(api_type, bare_name, function):
    # right values and indices, half the gradient sent back: a wrong backward kernel
    if bare_name not in ("topk", "msort", "sort", "mode"):
        return function

    def half_gradient(x, *args, **kwargs):
        out = function(x, *args, **kwargs)
        if isinstance(out, torch.Tensor):
            return _Half.apply(out)
        return type(out)((_Half.apply(out[0]), out[1]))

    return half_gradient
"""


def test_a_wrong_gradient_of_inputs_with_equal_values_fails(pytester: pytest.Pytester) -> None:
    # a perturbed input breaks the ties and moves whole gradients: that is no noise floor to excuse
    # a gradient of an API that only selects values
    pytester.makeconftest(HALF_GRADIENT_CONFTEST)
    folder = pytester.path / "d"
    kept = ("Torch.topk", "Torch.msort", "Torch.sort", "Torch.mode")
    data = {k: v for k, v in _records(folder).items() if k.startswith(kept)}
    write_dump(folder, data, task="tensor")
    _, rows = run(pytester, data)
    for api in ("Torch.topk.0", "Torch.msort.0", "Torch.sort.0", "Torch.mode.0"):
        assert rows[api][1:3] == ["pass", "error"], api
