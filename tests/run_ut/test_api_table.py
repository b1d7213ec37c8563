"""Tests generated from the API table: every entry with a reference replays a sample, every standard
passes identical outputs, every skip has a reason, every 8.1.1 list name routes to its standard, and
the lookup order is exact key -> type-free key -> family default of the type."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_replay_api_table import GRAD_FA, GRAD_ROTARY, LINALG_SAMPLES, MINDSPEED_FA, ROTARY

from msprobe.compare import rules
from msprobe.compare.standards import route
from msprobe.run_ut import api_table, registry
from msprobe.run_ut.api_info import ApiInfo, Ref, Skip, Standard
from msprobe.run_ut.records import ApiRecord, read_dump
from msprobe.run_ut.replay import MULTIPLE_BACKWARD, replay
from msprobe.run_ut.standards import compare_outputs, standard_for
from msprobe.run_ut.standards.columns import STANDARD_COLUMNS
from msprobe.run_ut.standards.thresholds import (
    BF16,
    COMPARE_LIMITS,
    DEFAULT,
    FP16,
    FP32,
    THRESHOLDS,
    thresholds,
)

FUSED_DUMP = Path(__file__).parents[1] / "data" / "npu_ops" / "fused_stats_dump" / "dump.json"

# --- every entry with a reference replays a sample ---


def _samples() -> dict[tuple[str, str], ApiRecord]:
    samples: dict[tuple[str, str], ApiRecord] = {}
    for record in read_dump(FUSED_DUMP).records:
        samples.setdefault((record.api_type, record.bare_name), record)
    for name, fwd, bwd in (
        ("MindSpeed.npu_fusion_attention.0", MINDSPEED_FA, GRAD_FA),
        ("MindSpeed.npu_rotary_position_embedding.0", ROTARY, GRAD_ROTARY),
    ):
        record = ApiRecord(name, 0, fwd, bwd)
        samples[(record.api_type, record.bare_name)] = record
    for bare, fwd in LINALG_SAMPLES.items():
        samples[("Torch", bare)] = ApiRecord(f"Torch.{bare}.0", 0, fwd, None)
    return samples


SAMPLES = _samples()
WITH_REFERENCE = [
    (t, n) for (t, n), info in registry.INDEX.items() if info.reference is not None and n == info.name
]


@pytest.mark.parametrize(("api_type", "name"), WITH_REFERENCE, ids=[f"{t}.{n}" for t, n in WITH_REFERENCE])
def test_every_entry_with_a_reference_replays_its_sample(api_type: str, name: str) -> None:
    """Adding an entry with a CPU reference means adding its sample record (to the fused dump or here)."""
    record = SAMPLES.get((api_type, name))
    assert record is not None, f"{api_type}.{name}: no sample record to replay"
    result = replay(record, FUSED_DUMP.parent / "dump_tensor_data", "cpu")
    assert result.result[1] in ("pass", "Warning", "error"), (record.name, result.reason)
    info = registry.lookup(api_type, name)
    if record.backward is not None and info.backward_message is None:
        backward = {r.message for r in result.details if ".backward." in r.name}
        assert result.result[2] in ("pass", "Warning", "error") or backward == {MULTIPLE_BACKWARD}, (
            record.name
        )


@pytest.mark.parametrize("info", [i for i in api_table.ENTRIES if isinstance(i.reference, Ref)], ids=str)
def test_every_named_reference_imports(info: ApiInfo) -> None:
    assert isinstance(info.reference, Ref)
    assert callable(info.reference.load())
    if isinstance(info.prepare_inputs, Ref):
        assert callable(info.prepare_inputs.load())


# --- every standard passes identical outputs ---

ONE_PER_STANDARD = {
    s: next(i.name for i in api_table.ENTRIES if i.standard is s and i.types is None) for s in Standard
}


def test_every_standard_fills_its_columns() -> None:
    assert set(STANDARD_COLUMNS) == set(Standard)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("standard", list(Standard), ids=lambda s: s.name)
def test_every_standard_passes_identical_outputs(standard: Standard, dtype: torch.dtype) -> None:
    api = f"Torch.{ONE_PER_STANDARD[standard]}.0"
    assert standard_for(api) is standard
    device = torch.linspace(-3, 3, 256, dtype=torch.float64).to(dtype)
    bench = device.to(torch.float64 if dtype == torch.float32 else torch.float32)
    rows = compare_outputs(api, "forward", bench, device)
    assert [r.status for r in rows] == ["pass"], rows[0].message
    assert rows[0].metrics, "the standard filled no column"


# --- every skip has a reason; every entry is well-formed ---


@pytest.mark.parametrize("info", [i for i in api_table.ENTRIES if i.skips], ids=lambda i: i.name)
def test_every_skip_has_a_reason_and_a_known_scope(info: ApiInfo) -> None:
    for skip in info.skips:
        assert isinstance(skip, Skip) and skip.reason.strip()
        assert skip.device in (None, "cpu", "cuda", "npu")
        assert all(d.startswith("torch.") for d in skip.dtypes)


def test_every_entry_names_known_api_types_and_valid_tolerances() -> None:
    for info in api_table.ENTRIES:
        assert set(info.types or ()) <= set(registry.API_TYPES), info.name
        for dtype in info.tolerances:
            thresholds(info.standard, dtype, info.tolerances)  # raises on a field the standard lacks


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\(None, 'add'\) is in two entries"):
        registry.build_index([*api_table.ENTRIES, ApiInfo("addition", aliases=("add",))])
    registry.build_index([*api_table.ENTRIES, ApiInfo("add", types=("Torch",))])  # a typed key is another key


def test_tolerances_change_only_the_named_fields_of_the_named_dtype() -> None:
    tolerances = {FP32: {"rtol": 1e-3}}
    changed = thresholds(Standard.ABSOLUTE_THRESHOLD, FP32, tolerances)
    assert changed == dataclasses.replace(thresholds(Standard.ABSOLUTE_THRESHOLD, FP32), rtol=1e-3)
    assert thresholds(Standard.ABSOLUTE_THRESHOLD, FP16, tolerances) == thresholds(
        Standard.ABSOLUTE_THRESHOLD, FP16
    )
    with pytest.raises(ValueError, match="fields are"):
        thresholds(Standard.ULP, FP32, {DEFAULT: {"rtol": 1e-3}})
    with pytest.raises(ValueError, match=r"\['proportion_limit'\] are compare limits"):
        thresholds(Standard.ULP, FP16, {FP16: {"proportion_limit": 0.01}})


def test_compare_limits_are_fields_of_the_thresholds_entries() -> None:
    names = {f.name for entry in THRESHOLDS.values() for f in dataclasses.fields(entry)}
    assert names >= COMPARE_LIMITS


# --- routing of each 8.1.1 list name ---

UPSTREAM_LISTS = {
    Standard.ABSOLUTE_THRESHOLD: (
        "mul mul_ __mul__ __imul__ __rmul__ add add_ __add__ __iadd__ __radd__ div div_ __div__ "
        "__idiv__ divide divide_ leaky_relu leaky_relu_ prelu reciprocal reciprocal_ rsqrt rsqrt_ "
        "square square_ sub sub_ rsub __isub__ __sub__"
    ),
    Standard.BINARY: (
        "abs abs_ absolute absolute_ argmin bitwise_and bitwise_and_ broadcast_to ceil ceil_ equal "
        "fill_ flatten floor floor_ gather greater greater_ greater_equal greater_equal_ histc "
        "isfinite isnan less less_ less_equal less_equal_ logical_and logical_and_ logical_not "
        "logical_not_ logical_or logical_or_ masked_fill masked_fill_ max_pool3d maximum minimum "
        "neg neg_ nonzero not_equal not_equal_ one_hot pad relu reshape round round_ select sign "
        "sign_ sort tile topk transpose transpose_ tril tril_ triu triu_ type_as"
    ),
    Standard.ULP: (
        "__matmul__ addbmm addbmm_ addmm addmm_ baddbmm baddbmm_ bilinear bmm chain_matmul hspmm "
        "linear matmul mm mv smm sspaddmm"
    ),
    Standard.THOUSANDTH: "conv1d conv2d",
    Standard.ACCUMULATIVE: "test_api",
}
LISTED = [(s, n) for s, names in UPSTREAM_LISTS.items() for n in names.split()]


def test_upstream_list_sizes() -> None:
    assert {s: len(n.split()) for s, n in UPSTREAM_LISTS.items()} == {
        Standard.ABSOLUTE_THRESHOLD: 30,
        Standard.BINARY: 62,
        Standard.ULP: 17,
        Standard.THOUSANDTH: 2,
        Standard.ACCUMULATIVE: 1,
    }


@pytest.mark.parametrize(("standard", "name"), LISTED, ids=[n for _, n in LISTED])
def test_each_listed_name_routes_to_its_standard_on_both_stages(standard: Standard, name: str) -> None:
    for api_type in ("Torch", "Tensor", "Functional", "NPU"):  # upstream routes by bare name, any type
        assert standard_for(f"{api_type}.{name}.0") is standard
        assert route(np.array([api_type]), np.array([name]), np.array([FP16]))[0] is standard
    assert standard_for(name) is standard


def test_names_outside_the_lists_are_benchmark_without_prefix_matching() -> None:
    for api in (
        "Torch.addcmul.0",
        "Tensor.add_x.0",
        "Torch.matmul_.0",
        "Functional.conv3d.0",
        "NPU.npu_add.0",
    ):
        assert standard_for(api) is Standard.BENCHMARK, api


# --- lookup order ---


def test_lookup_exact_then_type_free_then_family_default() -> None:
    npu_fa, ms_fa = (
        registry.lookup("NPU", "npu_fusion_attention"),
        registry.lookup("MindSpeed", "npu_fusion_attention"),
    )
    assert npu_fa.types == ("NPU",) and ms_fa.types == ("MindSpeed",) and npu_fa.reference != ms_fa.reference
    assert registry.lookup("NPU", "fast_gelu") is registry.lookup("NPU", "npu_fast_gelu")  # alias
    assert registry.lookup("Tensor", "__iadd__") is registry.lookup("Torch", "add")  # type-free, alias
    assert registry.lookup("MindSpeed", "npu_fast_gelu").reference is None  # typed keys stay with their type
    assert registry.lookup("NPU", "npu_fusion_attention_v2") == api_table.NPU.variant(
        "npu_fusion_attention_v2"
    )
    assert registry.lookup("Torch", "conv2d_x") == api_table.PLAIN.variant("conv2d_x")
    assert registry.find("Torch", "tanh") is None


# --- one thresholds table for both stages ---


def test_compare_limits_are_the_thresholds_tables() -> None:
    bench = thresholds(Standard.BENCHMARK, DEFAULT)
    assert [r.bound for _, r in rules.BENCHMARK] == [
        bench.small_value_ratio_limit,
        bench.rmse_ratio_limit,
        bench.max_rel_ratio_limit,
        bench.mean_rel_ratio_limit,
        bench.eb_ratio_limit,
    ]
    assert rules.THOUSANDTH.bound == thresholds(Standard.THOUSANDTH, FP16).ratio_limit
    ulp32, ulp16 = thresholds(Standard.ULP, FP32), thresholds(Standard.ULP, FP16)
    assert [r.bound for r in rules.ULP_FP32.rules] == [
        ulp32.mean_limit,
        ulp32.proportion_limit,
        ulp32.ratio_limit,
    ]
    assert [r.bound for r in rules.ULP_HALF.rules] == [ulp16.proportion_limit, ulp16.ratio_limit]


@pytest.mark.parametrize(
    ("standard", "fields"),
    [
        (
            Standard.BENCHMARK,
            (
                "small_value_ratio_limit",
                "rmse_ratio_limit",
                "max_rel_ratio_limit",
                "mean_rel_ratio_limit",
                "eb_ratio_limit",
            ),
        ),
        (Standard.ABSOLUTE_THRESHOLD, ("max_error_rate",)),
        (Standard.ACCUMULATIVE, ("max_error_rate",)),
        (Standard.ULP, ("ratio_limit",)),
    ],
)
def test_limits_the_compare_reads_once_are_the_same_for_every_dtype(
    standard: Standard, fields: tuple[str, ...]
) -> None:
    """compare/rules.py reads these from one dtype's entry: the table must not vary them by dtype."""
    entries = [v for (s, _), v in THRESHOLDS.items() if s is standard]
    for field in fields:
        assert len({getattr(e, field) for e in entries}) == 1, field
    if standard is Standard.ULP:
        assert thresholds(standard, BF16).proportion_limit == thresholds(standard, FP16).proportion_limit


# --- adding an entry to the built-in table ---


def test_an_entry_added_to_the_table_is_routed_alike_by_replay_and_compare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    new = ApiInfo("my_op", reference=torch.mul, standard=Standard.ABSOLUTE_THRESHOLD)
    assert standard_for("Torch.my_op.0") is Standard.BENCHMARK
    monkeypatch.setattr(registry, "INDEX", registry.build_index([*api_table.ENTRIES, new]))
    assert standard_for("Torch.my_op.0") is Standard.ABSOLUTE_THRESHOLD
    assert route(np.array(["Torch"]), np.array(["my_op"]), np.array([FP32]))[0] is Standard.ABSOLUTE_THRESHOLD
    spec = {
        "type": "torch.Tensor",
        "dtype": FP32,
        "shape": [8],
        "Max": 1.0,
        "Min": -1.0,
        "requires_grad": False,
    }
    record = ApiRecord(
        "Torch.my_op.0", 0, {"input_args": [spec, spec], "input_kwargs": {}, "output": []}, None
    )
    result = replay(record, None, "cpu")
    assert result.result[:2] == ["Torch.my_op.0", "pass"]
    assert "相对误差错误率" in result.details[0].metrics and "均方根误差" not in result.details[0].metrics


def test_attention_dropout_is_zeroed_where_torch_takes_it() -> None:
    """The MHA entry's positional index is ``dropout_p``'s in torch's signature (sdpa's builtin has
    none to read: its replay test passes it both ways)."""
    info = registry.lookup("Functional", "multi_head_attention_forward")
    params = list(inspect.signature(torch.nn.functional.multi_head_attention_forward).parameters)
    args: list[Any] = [1.0] * len(params)
    kwargs: dict[str, Any] = {"dropout_p": 0.5}
    assert info.prepare is not None
    info.prepare(args, kwargs)
    assert [i for i, a in enumerate(args) if a == 0.0] == [params.index("dropout_p")]
    assert kwargs == {"dropout_p": 0.0}
