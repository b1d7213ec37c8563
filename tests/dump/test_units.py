"""Laws of the pure pieces: json writer, statistics, record names, filters, API list parsing."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.dump.api_families import FAMILIES, load_api_list, parse_api_list
from msprobe.dump.filters import DataMode, RecordFilter
from msprobe.dump.naming import CallCounter
from msprobe.dump.pytorch.stat_batch import StatsBatch, tensor_stats
from msprobe.dump.pytorch.stats import (
    Stats,
    SummaryCache,
    coalesced_layout,
    element_sequence,
    memory_order_layout,
    tensor_md5,
)
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
    st.one_of(
        st.floats(allow_nan=True),
        st.none(),
        st.booleans(),
        st.integers(),
        st.lists(st.integers(), max_size=2),  # anything else a value may be: nested at its depth
        st.dictionaries(st.sampled_from("ab"), st.integers(), max_size=2),
    ),
    st.booleans(),
    st.sampled_from([jsonfmt.Summary, dict]),
    st.sampled_from(["torch.Tensor", 3, None, ["torch.Tensor"]]),
    st.sampled_from([None, [1.5], ["a"], [[2]], "2x3"]),
)
def test_jsonfmt_summary_template(
    shape: list[int], stat: object, md5: bool, kind: type, type_: object, odd_shape: object
) -> None:
    """Tensor summaries, a Summary or a plain dict with the tensor keys, are written as json.dumps
    writes them, also where the values are not what a tensor summary holds."""
    s = kind(
        type=type_,
        dtype="torch.float32",
        shape=shape if odd_shape is None else odd_shape,
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


def _tensors_of_every_kind(arrays: list[list[float]], dtype: torch.dtype) -> list[torch.Tensor]:
    """Float tensors of ``dtype`` (contiguous, strided, transposed) mixed with the other kinds of
    summary: integers, bools, 0-dim floats and integers, complex, empty."""
    floats = [torch.tensor(a, dtype=dtype) for a in arrays]
    strided = [torch.tensor(a + a, dtype=dtype)[::2] for a in arrays] + [floats[0].repeat(3, 1).t()]
    others = [torch.tensor([len(a), -3, 7]) for a in arrays[:2]] + [
        torch.tensor([True, False]),
        torch.tensor(False),
        torch.tensor(arrays[0][0], dtype=dtype),
        torch.tensor(5),
        torch.tensor([3 + 4j, 1j]),
        torch.tensor(2 - 1j),
        torch.empty(0, dtype=dtype),
        torch.tensor(arrays[-1], dtype=torch.float64),
    ]
    return [t for pair in zip(floats, strided) for t in pair] + strided[len(floats) :] + others


@given(
    st.lists(st.lists(special_floats, min_size=1, max_size=40), min_size=1, max_size=6),
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
)
def test_one_batch_of_many_tensors_gives_each_its_own_statistics(
    arrays: list[list[float]], dtype: torch.dtype
) -> None:
    from msprobe.dump.pytorch.stats import Slot

    # and small tensors of the other float dtypes: groups of several dtypes resolved together
    others = [d for d in (torch.float32, torch.float16, torch.bfloat16) if d != dtype]
    tensors = _tensors_of_every_kind(arrays, dtype) + [
        torch.tensor(a, dtype=d) for a in arrays for d in others
    ]
    batch = StatsBatch()
    slots = [Slot(md5=True) for _ in tensors]
    for t, slot in zip(tensors, slots):
        batch.add(t, slot)
    batch.resolve()
    assert len(batch) == 0
    for t, slot in zip(tensors, slots):
        assert slot.done and slot.stats is not None and _same_stats(slot.stats, tensor_stats(t)), t
        assert slot.digest == tensor_md5(t)
        if t.dtype in (torch.float32, torch.float16, torch.bfloat16) and t.dim() > 0 and t.numel():
            own = (t.amax().item(), t.amin().item(), t.mean().item(), torch.linalg.vector_norm(t).item())
            assert _same_stats(slot.stats, own), t  # torch's own, not only a batch of one's


class _Boxed(torch.Tensor):
    """A wrapper tensor subclass whose results stay wrapped: ``tolist`` refuses them (as DTensor's)."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> _Boxed:
        t = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls, inner.shape, strides=inner.stride(), dtype=inner.dtype, device=inner.device
        )
        t.inner = inner
        return t  # type: ignore[no-any-return]

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        from torch.utils._pytree import tree_map

        unwrap = lambda x: x.inner if isinstance(x, _Boxed) else x  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda x: _Boxed(x) if isinstance(x, torch.Tensor) else x, out)


def test_a_wrapper_subclass_tensor_is_summarised_apart_from_its_group() -> None:
    """A wrapper subclass's copy would turn its group's rows into its own kind: it is summarised on
    its own, and its group-mates keep their values."""
    from msprobe.dump.pytorch.stats import Slot

    tensors = [torch.randn(4, 3), _Boxed(torch.randn(4, 3)), torch.randn(12)]
    batch, slots = StatsBatch(), [Slot(md5=False) for _ in tensors]
    for t, slot in zip(tensors, slots):
        batch.add(t, slot)
    batch.resolve()
    for t, slot in zip(tensors, slots):
        inner = t.inner if isinstance(t, _Boxed) else t
        assert slot.stats == tensor_stats(inner)


def test_values_that_cannot_be_read_spoil_no_other_slot() -> None:
    """Queued results that stay wrapped on the host (a device tensor subclass) get null statistics and
    the batch reports it once, after every other slot has its values: before, all stayed null."""
    from msprobe.dump.pytorch import stat_batch
    from msprobe.dump.pytorch.stats import NONE4, Slot

    plain = [torch.tensor([True, False]), torch.tensor(7), torch.tensor(2.5), torch.randn(5)]
    batch, slots = StatsBatch(), [Slot(md5=False) for _ in plain]
    for t, slot in zip(plain, slots):
        batch.add(t, slot)
    boxed = _Boxed(torch.tensor([True, True]))
    wrapped = Slot(md5=False)
    batch._push(wrapped, stat_batch._BOOL, torch.device("cpu"), (boxed.any(), boxed.all()))  # as a device's
    with pytest.raises(RuntimeError, match="tolist"):
        batch.resolve()
    for t, slot in zip(plain, slots):
        assert slot.done and slot.stats == tensor_stats(t)
    assert wrapped.stats == NONE4
    batch.resolve()  # reported once
    assert len(batch) == 0


def test_summaries_attached_before_and_after_resolve_get_the_values() -> None:
    from msprobe.dump.pytorch.stats import Slot

    batch, slot = StatsBatch(), Slot(md5=False)
    early: dict[str, object] = {"Max": None, "Min": None, "Mean": None, "Norm": None}
    slot.attach(early)
    batch.add(torch.tensor([True, False]), slot)  # a queued kind, even on the CPU
    assert early["Max"] is None and len(batch) == 1  # queued until the batch is resolved
    batch.resolve()
    late: dict[str, object] = {"Max": None, "Min": None, "Mean": None, "Norm": None}
    slot.attach(late)
    assert early == late == {"Max": True, "Min": False, "Mean": None, "Norm": None}


def test_a_small_cpu_tensor_is_copied_at_capture_and_summarised_with_its_group() -> None:
    from msprobe.dump.pytorch.stats import Slot

    batch, slot, other = StatsBatch(), Slot(md5=False), Slot(md5=False)
    summary: dict[str, object] = {"Max": None, "Min": None, "Mean": None, "Norm": None}
    slot.attach(summary)
    t = torch.tensor([1.0, -2.0])
    batch.add(t, slot)
    batch.add(torch.tensor([3.0, 4.0]), other)
    t.mul_(100)  # an in-place write after the capture does not reach the record
    assert len(batch) == 2 and summary["Max"] is None
    batch.resolve()
    assert len(batch) == 0
    assert summary == {"Max": 1.0, "Min": -2.0, "Mean": -0.5, "Norm": float(np.float32(math.sqrt(5.0)))}
    assert other.stats == (4.0, 3.0, 3.5, 5.0)


def test_large_and_strided_cpu_tensors_are_summarised_at_once() -> None:
    from msprobe.dump.pytorch.stat_batch import GROUP_MAX_NUMEL
    from msprobe.dump.pytorch.stats import Slot

    for t in (torch.ones(GROUP_MAX_NUMEL + 1), torch.ones(4, 3).t()):
        batch, slot = StatsBatch(), Slot(md5=False)
        batch.add(t, slot)
        assert len(batch) == 0 and slot.stats is not None and slot.stats[0] == 1.0


@settings(deadline=None, max_examples=30)
@given(
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    st.integers(0, 3 * (1 << 14)),
    st.sampled_from([None, math.nan, math.inf, -math.inf, -0.0]),
)
def test_a_large_cpu_tensor_gets_torchs_own_statistics(
    dtype: torch.dtype, at: int, special: float | None
) -> None:
    """Above the group size: summarised at once, with torch's own max, min, mean and norm (a NaN or
    an infinity anywhere included)."""
    t = torch.randn(3 * (1 << 14) + 1, generator=torch.Generator().manual_seed(at)).to(dtype)
    if special is not None:
        t[at] = special
    ref = (t.max().item(), t.min().item(), t.mean().item(), torch.linalg.vector_norm(t).item())
    assert _same_stats(tensor_stats(t), ref)


def test_copies_held_for_groups_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from msprobe.dump.pytorch import stat_batch
    from msprobe.dump.pytorch.stats import Slot

    monkeypatch.setattr(stat_batch, "GROUP_BYTES", 3 * 4 * 100)  # three tensors of 100 float32
    batch, slots = StatsBatch(), [Slot(md5=False) for _ in range(4)]
    for i, slot in enumerate(slots):
        batch.add(torch.full((100,), float(i)), slot)
    assert [s.done for s in slots] == [True, True, True, False]  # the third copy filled the budget
    batch.resolve()
    assert [s.stats[0] for s in slots if s.stats is not None] == [0.0, 1.0, 2.0, 3.0]


@settings(deadline=None)
@given(
    st.lists(special_floats, min_size=1, max_size=3 * 257),
    st.sampled_from([(1,), (2,), (3,), (257,)]),
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    st.integers(1, 5),
    st.sampled_from([1, 2]),
)
def test_a_group_gives_every_tensor_torchs_own_statistics(
    values: list[float], inner: tuple[int, ...], dtype: torch.dtype, k: int, threads: int
) -> None:
    """Rows of one matrix reduce to the bits of each tensor's own full reduction."""
    from msprobe.dump.pytorch.stats import Slot

    n = max(1, len(values) // inner[0]) * inner[0]
    base = torch.tensor((values * (n // len(values) + 1))[:n], dtype=torch.float32).to(dtype)
    # one size, two shapes (a group may mix them)
    tensors = [(base * (i + 1)).reshape(-1, *inner) if i % 2 else base * (i + 1) for i in range(k)]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        batch, slots = StatsBatch(), [Slot(md5=False) for _ in tensors]
        for t, slot in zip(tensors, slots):
            batch.add(t, slot)
        batch.resolve()
        for t, slot in zip(tensors, slots):
            ref = (t.amax().item(), t.amin().item(), t.mean().item(), torch.linalg.vector_norm(t).item())
            assert slot.stats is not None and _same_stats(slot.stats, ref), (t, slot.stats, ref)
    finally:
        torch.set_num_threads(previous)


def _summary(
    cache: SummaryCache, t: torch.Tensor, md5: bool, added: list[torch.Tensor] | None = None
) -> tuple[Stats | None, str | None]:
    """The cached (stats, md5) of ``t``, summarising it now if the cache has no slot for it."""
    slot, fresh = cache.slot(t, md5)
    if fresh:
        if added is not None:
            added.append(t)
        batch = StatsBatch()
        batch.add(t, slot)
        batch.resolve()
    return slot.stats, slot.digest


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
    assert _summary(cache, t, md5=False)[0] == (1.0, 1.0, 1.0, float(np.float32(math.sqrt(3.0))))
    t.add_(1)
    assert _summary(cache, t, md5=False)[0] == (2.0, 2.0, 2.0, float(np.float32(math.sqrt(12.0))))
    assert _summary(cache, t, md5=True)[1] == tensor_md5(t)


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


@given(st.lists(st.integers(0, 4), min_size=0, max_size=4), st.data())
def test_element_sequence_of_contiguous_tensor_is_its_coalesced_layout(
    shape: list[int], data: st.DataObject
) -> None:
    """The contiguous shortcut gives the key the general coalescing gives, for any shape (size-1 and
    empty dimensions included), also for a contiguous view at an offset."""
    base = torch.zeros(int(np.prod(shape)) + 3)
    offset = data.draw(st.integers(0, 3))
    t = base[offset : offset + int(np.prod(shape))].view(shape)
    assert t.is_contiguous()
    key = element_sequence(t)
    assert key is not None
    assert key == (
        t.untyped_storage().data_ptr(),
        offset,
        t.dtype,
        coalesced_layout(tuple(t.shape), t.stride()),
        False,
        False,
    )


def test_element_sequence_tells_conj_and_neg_views_apart() -> None:
    """A conj-bit or neg-bit view reads its base's memory but stands for other values: its key
    differs, so it never reuses the base's statistics or md5."""
    z = torch.complex(torch.arange(4096.0), torch.arange(4096.0))
    assert element_sequence(z.conj()) != element_sequence(z)
    assert element_sequence(z.conj().imag) != element_sequence(z.imag)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")  # torch's, about complex32
def test_md5_of_conj_neg_views_and_complex32_is_that_of_their_values() -> None:
    """numpy refuses conj-bit and neg-bit views and has no complex32: the md5 failed, and the record
    lost its inputs or outputs."""
    x = torch.tensor([[-3.5, 0.0, 1.25, 2.0], [7.0, -0.5, 3.0, 100.0]])
    z = torch.complex(x, -x)
    assert tensor_md5(z.conj()) == tensor_md5(z.conj().resolve_conj()) != tensor_md5(z)
    assert tensor_md5(torch._neg_view(x)) == tensor_md5(-x) != tensor_md5(x)
    half = torch.complex(x, x).to(torch.complex32)
    assert tensor_md5(half) == tensor_md5(torch.view_as_real(half.to(torch.complex64)).half())


def test_summary_cache_shares_stats_of_same_element_sequence() -> None:
    added: list[torch.Tensor] = []
    cache = SummaryCache()
    x = torch.randn(64, 128)
    _summary(cache, x, False, added)
    v = x.view(8, 8, 128)  # same elements, same order: no new summary
    assert _summary(cache, v, False, added)[0] == tensor_stats(v)
    t = x.t()  # read in memory order by torch's reductions: the same statistics
    assert _summary(cache, t, False, added)[0] == tensor_stats(t)
    _summary(cache, x[:, ::2], False, added)  # other elements: summarised
    x.add_(1)  # version bump: the view is summarised again
    _summary(cache, x.view(-1), False, added)
    assert [tuple(t.shape) for t in added] == [(64, 128), (64, 64), (8192,)]


def test_summary_cache_md5_of_a_transpose_is_its_own() -> None:
    """md5 is of the bytes in logical order: a transposed view is checksummed anew."""
    added: list[torch.Tensor] = []
    cache = SummaryCache()
    x = torch.randn(64, 128)
    _summary(cache, x, True, added)
    stats, digest = _summary(cache, x.t(), True, added)
    assert digest == tensor_md5(x.t()) != tensor_md5(x)
    assert stats == tensor_stats(x.t())
    assert [tuple(t.shape) for t in added] == [(64, 128), (128, 64)]


def test_summary_cache_memory_order_only_on_torchs_reduction_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device whose kernels may reduce a logical-order copy (torch_npu) summarises a transpose anew."""
    from msprobe.dump.pytorch import stats

    monkeypatch.setattr(stats, "_MEMORY_ORDER_DEVICES", frozenset({"cuda"}))
    added: list[torch.Tensor] = []
    cache = SummaryCache()
    x = torch.randn(64, 128)
    _summary(cache, x, False, added)
    assert _summary(cache, x.t(), False, added)[0] == tensor_stats(x.t())
    assert [tuple(t.shape) for t in added] == [(64, 128), (128, 64)]


def test_memory_order_of_an_expanded_tensor_is_none() -> None:
    """Dimensions sharing a stride read elements more than once: no memory-order key, the logical
    one instead."""
    e = torch.randn(1, 4096).expand(3, 4096)
    assert memory_order_layout(tuple(e.shape), e.stride()) is None
    assert element_sequence(e, memory_order=True) is None
    assert element_sequence(e) is not None


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.integers(1, 9), min_size=2, max_size=4),
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    st.data(),
)
def test_views_with_one_memory_order_have_torchs_same_statistics(
    shape: list[int], dtype: torch.dtype, data: st.DataObject
) -> None:
    """What the memory-order key shares is sound: any two permutations of a (possibly sliced)
    tensor have one memory-order key, and torch's own statistics of the two are the same bits."""
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    base = (torch.randn(*[n * 3 for n in shape], generator=gen) * 37.0 + 5.0).to(dtype)
    index = tuple(slice(data.draw(st.integers(0, 2)), None, data.draw(st.integers(1, 3))) for _ in shape)
    x = base[index]
    perms = st.permutations(list(range(len(shape))))
    a, b = x.permute(data.draw(perms)), x.permute(data.draw(perms))
    key = element_sequence(a, memory_order=True)
    assert key is not None and key == element_sequence(b, memory_order=True)

    def torchs(t: torch.Tensor) -> tuple[float, ...]:
        return (t.amax().item(), t.amin().item(), t.mean().item(), torch.linalg.vector_norm(t).item())

    assert torchs(a) == torchs(b)


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [5, 4097, 65537, 300001])
def test_statistics_of_large_and_strided_tensors_are_torchs(dtype: torch.dtype, n: int) -> None:
    """The CPU mean is taken as a float32 sum divided by the count and rounded (cheaper than
    ``mean``): equal to ``mean``, over the sizes where torch's kernels change strategy."""
    gen = torch.Generator().manual_seed(n)
    x = (torch.randn(n, generator=gen) * 37.0 + 5.0).to(dtype)
    for t in (x, x[::3], x[: n - n % 4].reshape(-1, 4).t()):
        ref = (t.amax().item(), t.amin().item(), t.mean().item(), torch.linalg.vector_norm(t).item())
        assert tensor_stats(t) == ref


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20)), max_size=40), st.integers(0, 3))
def test_storage_index_drops_every_key_put_under_a_storage(puts: list[tuple[int, int]], dropped: int) -> None:
    from msprobe.dump.pytorch.storage_index import StorageIndex

    index: StorageIndex[tuple[int, int]] = StorageIndex(limit=len(puts) + 1)
    for n, (storage, key) in enumerate(puts):
        index.put(storage, key, (storage, n))
    index.drop_storage(dropped)
    for key in {k for _, k in puts}:
        last = max(n for n, (_, k) in enumerate(puts) if k == key)
        ever_on_dropped = any(s == dropped for s, k in puts if k == key)
        assert index.get(key) == (None if ever_on_dropped else (puts[last][0], last))


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1000)), max_size=60), st.integers(1, 10))
def test_storage_index_holds_at_most_limit_keys(puts: list[tuple[int, int]], limit: int) -> None:
    from msprobe.dump.pytorch.storage_index import StorageIndex

    index: StorageIndex[int] = StorageIndex(limit)
    for storage, key in puts:
        index.put(storage, key, key)
        assert index.get(key) == key  # the newest is always kept
    assert sum(index.get(k) is not None for k in {k for _, k in puts}) <= limit


def test_dump_errors_keep_their_message_across_processes() -> None:
    """A Pool worker's error is pickled to the parent; torch rebuilds a DataLoader worker's as
    ``type(msg)``: either way the message stays (it was ``[msprobe] `` alone)."""
    import pickle

    from msprobe.dump.exceptions import FileCheckException, MsprobeException, ScopeException

    for exc in (
        MsprobeException(
            MsprobeException.INTERFACE_USAGE_ERROR, "PrecisionDebugger instance is not created."
        ),
        ScopeException(ScopeException.InvalidScope, "bad scope"),
        FileCheckException("/x: not writable"),
    ):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc) and back.detail == exc.detail
    rebuilt = MsprobeException("Caught MsprobeException in DataLoader worker process 0.\nOriginal ...")
    assert str(rebuilt).startswith("Caught MsprobeException in DataLoader worker process 0.")
    assert str(pickle.loads(pickle.dumps(rebuilt))) == str(rebuilt)
