"""Laws of the pure pieces: json writer, statistics, record names, filters, API list parsing."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from msprobe.dump.api_families import FAMILIES, load_api_list, parse_api_list
from msprobe.dump.filters import DataMode, RecordFilter
from msprobe.dump.naming import CallCounter
from msprobe.dump.pytorch.stats import SummaryCache, tensor_md5, tensor_stats
from msprobe.errors import MsprobeError
from msprobe.formats import jsonfmt
from msprobe.formats.record_names import (
    SCOPE_API_RE,
    api_record_name,
    data_file_name,
    parse_api_record_name,
    record_api_name,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
json_values = st.recursive(
    scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=5), kids, max_size=4)
    ),
    max_leaves=25,
)


@given(json_values, st.integers(0, 4))
def test_jsonfmt_is_json_dumps_indent_1(value: object, level: int) -> None:
    expect = json.dumps(value, indent=1)
    assert jsonfmt.dumps(value) == expect
    assert jsonfmt.dumps(value, level) == expect.replace("\n", "\n" + " " * level)


@given(
    st.lists(st.integers(0, 2**31), max_size=4),
    st.one_of(st.floats(allow_nan=True), st.none(), st.booleans(), st.integers()),
    st.booleans(),
)
def test_jsonfmt_summary_template(shape: list[int], stat: object, md5: bool) -> None:
    s = jsonfmt.Summary(
        type="torch.Tensor",
        dtype="torch.float32",
        shape=shape,
        Max=stat,
        Min=stat,
        Mean=stat,
        Norm=stat,
        requires_grad=False,
    )
    if md5:
        s["md5"] = "0a1b2c3d"
    doc = {"x": [s, {"y": s}]}
    assert jsonfmt.dumps(doc) == json.dumps(doc, indent=1)
    assert jsonfmt.dumps(doc, 2) == json.dumps(doc, indent=1).replace("\n", "\n  ")


float_arrays = st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=64)


@given(float_arrays, st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]))
def test_stats_follow_upstream_dtype_rules(values: list[float], dtype: torch.dtype) -> None:
    t = torch.tensor(values, dtype=dtype)
    mx, mn, mean, norm = tensor_stats(t)
    ref = t.float() if dtype == torch.float64 else t  # float64 (and ints) are summarised as float32
    assert mx == ref.max().item() and mn == ref.min().item()
    assert mean == ref.mean().item()
    assert norm == torch.linalg.vector_norm(ref).item()


@given(st.lists(st.integers(-1000, 1000), min_size=2, max_size=32))
def test_int_stats_cast_to_float32(values: list[int]) -> None:
    t = torch.tensor(values, dtype=torch.int64)
    f = t.float()
    assert tensor_stats(t) == (f.max().item(), f.min().item(), f.mean().item(), f.norm().item())


def _same_stats(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Equal values, NaN equal to NaN."""
    nan = lambda v: isinstance(v, float) and math.isnan(v)  # noqa: E731
    return all(x == y or (nan(x) and nan(y)) for x, y in zip(a, b))


special_floats = st.one_of(
    st.floats(-1e4, 1e4, width=32), st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan])
)


@given(
    st.lists(st.lists(special_floats, min_size=1, max_size=40), min_size=1, max_size=6),
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    st.booleans(),
)
def test_batch_stats_equal_one_tensor_at_a_time(
    arrays: list[list[float]], dtype: torch.dtype, strided: bool
) -> None:
    from msprobe.dump.pytorch.stats import BatchStats

    tensors = [torch.tensor(a, dtype=dtype) for a in arrays]
    if strided:  # every other element of a longer tensor, and a transposed matrix
        tensors = [torch.tensor(a + a, dtype=dtype)[::2] for a in arrays] + [tensors[0].repeat(3, 1).t()]
    batch = BatchStats()
    batch.compute(tensors)
    for t in tensors:
        got = batch.take(t)
        assert got is not None and _same_stats(got, tensor_stats(t))


def test_batch_stats_are_taken_only_for_the_same_unchanged_tensor() -> None:
    from msprobe.dump.pytorch.stats import BatchStats, batchable

    x, y = torch.arange(6.0), torch.arange(6.0)
    batch = BatchStats()
    batch.compute([x])
    assert batch.take(x) == tensor_stats(x) and batch.take(y) is None
    x.add_(1)  # changed since: summarised again, one tensor at a time
    assert batch.take(x) is None
    batch.compute([y])
    batch.clear()
    assert batch.take(y) is None
    batched = (torch.ones(2), torch.ones(2).half(), torch.ones(2, requires_grad=True))
    assert all(batchable(t) for t in batched)
    not_batched = (torch.tensor(1.0), torch.empty(0), torch.ones(2, dtype=torch.float64), torch.arange(3))
    assert not any(batchable(t) for t in (*not_batched, torch.ones(2, device="meta"), torch.ones(2) > 0))


def test_summaries_ahead_skip_known_changed_and_unbatchable_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    from msprobe.dump.pytorch import stats as st_mod

    computed: list[list[torch.Tensor]] = []
    real = st_mod.BatchStats.compute
    monkeypatch.setattr(st_mod.BatchStats, "compute", lambda self, ts: (computed.append(ts), real(self, ts)))
    cache = SummaryCache()
    known, fresh, changed, ints = torch.ones(4), torch.randn(5), torch.randn(6), torch.arange(3)
    cache.get(known, md5=False)
    stamps = [(known, 0), (fresh, 0), (fresh, 0), (ints, 0), (changed, 0)]
    changed.mul_(2)  # written after it was queued: the job reports it, nothing summarised ahead
    cache.summarise_ahead(stamps, md5=False)
    assert [[id(t) for t in ts] for ts in computed] == [[id(fresh)]]
    assert cache.get(fresh, md5=False)[0] == tensor_stats(fresh)
    computed.clear()
    cache.summarise_ahead([(known, 0)], md5=True)  # its cached summary has no md5: not known
    assert [[id(t) for t in ts] for ts in computed] == [[id(known)]]


def test_stats_special_cases() -> None:
    assert tensor_stats(torch.empty(0)) == (None, None, None, None)
    assert tensor_stats(torch.empty(3, device="meta")) == (None, None, None, None)
    assert tensor_stats(torch.tensor([True, False])) == (True, False, None, None)
    assert tensor_stats(torch.tensor(-2.5)) == (-2.5, -2.5, -2.5, -2.5)
    assert tensor_stats(torch.tensor(3)) == (3, 3, 3, 3)
    mx, _mn, mean, norm = tensor_stats(torch.tensor([1.0, float("nan")]))
    assert math.isnan(mx) and math.isnan(mean) and math.isnan(norm)
    c = tensor_stats(torch.tensor([3 + 4j, 0j]))
    assert c == (5.0, 0.0, 2.5, None)
    nc = torch.arange(12.0).reshape(3, 4).t()
    assert tensor_stats(nc)[:2] == (11.0, 0.0)


def test_md5_is_crc32_of_the_bytes() -> None:
    import zlib

    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert tensor_md5(t) == f"{zlib.crc32(t.numpy().tobytes()):08x}"
    assert tensor_md5(t.t()) == f"{zlib.crc32(np.ascontiguousarray(t.t().numpy()).tobytes()):08x}"
    b = torch.ones(3, dtype=torch.bfloat16)
    assert tensor_md5(b) == tensor_md5(b.float())


def test_summary_cache_sees_inplace_changes() -> None:
    cache = SummaryCache()
    t = torch.ones(3)
    assert cache.get(t, md5=False)[0][0] == 1.0
    t.add_(1)
    assert cache.get(t, md5=False)[0][0] == 2.0
    assert cache.get(t, md5=True)[1] == tensor_md5(t)


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
prefixes = st.sampled_from([f.prefix for f in FAMILIES] + ["custom_mod", "MyPrefix"])


@given(prefixes, names, st.integers(0, 10**6), st.sampled_from(["forward", "backward"]))
def test_record_name_grammar_round_trip(prefix: str, api: str, index: int, direction: str) -> None:
    name = api_record_name(prefix, api, index, direction)
    assert parse_api_record_name(name) == (prefix, api, index, direction)
    if prefix in {"Functional", "Torch", "Tensor", "Distributed", "NPU", "VF"}:
        assert SCOPE_API_RE.match(name)


@given(st.lists(st.one_of(st.integers(0, 9), names), max_size=4))
def test_data_file_name(path: list[object]) -> None:
    name = data_file_name("Torch.cat.0.forward", "input", path)  # type: ignore[arg-type]
    assert name == ".".join(["Torch.cat.0.forward", "input", *map(str, path)]) + ".pt"
    assert "/" not in name


def test_counter_per_api() -> None:
    c = CallCounter()
    assert [c.next("Torch.relu"), c.next("Torch.relu"), c.next("Tensor.add")] == [0, 1, 0]
    c.reset()
    assert c.next("Torch.relu") == 0


@given(
    st.lists(
        st.sampled_from(["all", "input", "output", "forward", "backward"]),
        min_size=1,
        max_size=4,
        unique=True,
    )
)
def test_data_mode_law(modes: list[str]) -> None:
    if "all" in modes and len(modes) > 1:
        return
    dm = DataMode(tuple(modes))
    for direction in ("forward", "backward"):
        for side in ("input", "output"):
            dir_ok = "all" in modes or direction in modes or not ({"forward", "backward"} & set(modes))
            side_ok = "all" in modes or side in modes or not ({"input", "output"} & set(modes))
            assert dm.allows(direction, side) == (dir_ok and side_ok)


def test_scope_window_and_list() -> None:
    f = RecordFilter(scope=("A.x.1.forward", "A.x.3.forward"))
    seq = [f"A.x.{i}.forward" for i in range(5)]
    assert [f.check(n) for n in seq] == [False, True, True, True, False]
    f.reset()
    assert [f.check("A.x.1.forward"), f.check("A.x.3.forward"), f.check("A.x.3.forward")] == [
        True,
        True,
        False,
    ]
    g = RecordFilter(names=("relu",))
    assert g.check("Functional.relu.0.forward") and not g.check("Torch.tanh.0.forward")
    assert RecordFilter().check("anything")


def test_api_list_file() -> None:
    lists = load_api_list()
    assert "conv2d" in lists["functional"] and "__add__" in lists["tensor"]
    assert "__getitem__" not in lists["tensor"] and "ones" not in lists["torch"]
    assert record_api_name("linalg.norm") == "norm"
    assert parse_api_list("# c\nfunctional:\n  - relu  # x\n\ntensor:\n  - add\n", "f") == {
        "functional": ["relu"],
        "tensor": ["add"],
    }
    with pytest.raises(MsprobeError, match=r"f:2: expected"):
        parse_api_list("functional:\nrelu\n", "f")
    with pytest.raises(MsprobeError, match=r"f:1: expected '  - api_name'"):
        parse_api_list("  - relu\n", "f")


def test_summary_cache_shares_stats_of_same_element_sequence() -> None:
    from msprobe.dump.pytorch import stats as st

    calls = []
    real = st.tensor_stats

    def counting(t: torch.Tensor) -> st.Stats:
        calls.append(tuple(t.shape))
        return real(t)

    cache = SummaryCache()
    st.tensor_stats, saved = counting, st.tensor_stats
    try:
        x = torch.randn(64, 128)
        cache.get(x, md5=False)
        v = x.view(8, 8, 128)  # same elements, same order: no new summary
        assert cache.get(v, md5=False)[0] == real(v)
        t = x.t()  # other order (Mean/Norm would sum differently): summarised
        cache.get(t, md5=False)
        x.add_(1)  # version bump: the view is summarised again
        cache.get(x.view(-1), md5=False)
    finally:
        st.tensor_stats = saved
    assert calls == [(64, 128), (128, 64), (8192,)]


def test_core_imports_no_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, msprobe, msprobe.dump.config, msprobe.dump.session, msprobe.dump.writer, "
        "msprobe.dump.cli, msprobe.dump.api_families, msprobe.dump.filters, msprobe.dump.journal; "
        "print('torch' in sys.modules)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert res.stdout.strip() == "False"
