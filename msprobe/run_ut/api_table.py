"""The API table: every API msprobe knows something about, one :class:`ApiInfo` entry each.

Adding an API is one entry here (or, for a project's own op, one ``pytest_msprobe_api_info`` answer in
its ``conftest.py``). Families are entries whose fields are their members' defaults; a member names
its family and what differs (``CONV.variant("conv2d")``). The 8.1.1 routing lists are the
``standard`` fields of the type-free entries below (upstream routes by bare name whatever the API
type, so ``types`` stays ``None``): upstream checks its lists in the order absolute threshold, binary,
ULP, thousandth, accumulative and takes the first match; the lists share no name, so each name is in
one entry here and the registry refuses a name given twice. Every other API is benchmark.

Fused ``NPU`` and ``MindSpeed`` ops are entries keyed by their API type (``MindSpeed``'s
``npu_fusion_attention`` has another signature than torch_npu's); their CPU references are functions
in :mod:`msprobe.run_ut.npu_ops`, named by :class:`Ref` so this table imports no torch.
"""

from __future__ import annotations

from typing import Any

from msprobe.run_ut.api_info import NO_BACKWARD_DATA, NO_BACKWARD_UT, ApiInfo, Ref, Skip, Standard, Ties
from msprobe.run_ut.arg_fixes import (
    INDEX_DTYPES,
    argument_is,
    as_dtype,
    ascending,
    class_index_target,
    dtype_limits,
    no_repeats,
    tuple_index,
    zero_dropout,
    zero_probability,
)

RANDOM_REASON = "random values: the device's and the CPU's generators differ, nothing to compare"
TOPK_HINT = (
    "在npu上，topk的入参sorted=False时不生效，会返回有序tensor，而cpu上会返回无序tensor。 "
    "如果topk精度不达标，请检查是否是该原因导致的。"
)
"""upstream 8.1.1's result-row hint for a failing forward ``topk``."""
ZERO_FRACTION_MARKER = "dropout"
"""upstream 8.1.1 scores every API whose full name contains this with the zero-fraction check instead
of its standard (``Functional.dropout2d``, ``Torch.native_dropout``, ...), entry or not."""

# --- families: the defaults of their members -----------------------------------------------------------
PLAIN = ApiInfo("plain")
"""Any API of a torch namespace without an entry: the framework function, upcast, benchmark."""
CONV = ApiInfo("conv", upcast_fp32=False, hf32=True, standard=Standard.THOUSANDTH)
"""conv1d/conv2d: fp32 stays fp32 on the bench side and both sides round fp32 inputs to HF32."""
DROPOUT = ApiInfo("dropout", prepare=zero_dropout)
RANDOM = ApiInfo(
    "random", upcast=False, skips=(Skip(RANDOM_REASON, device="cuda"), Skip(RANDOM_REASON, device="npu"))
)
"""Random draws: skipped where the generators differ; on the CPU both sides draw from one seed in the
recorded dtype (the generator draws other numbers in a wider one)."""
ABSOLUTE = ApiInfo("absolute threshold", standard=Standard.ABSOLUTE_THRESHOLD)
BINARY = ApiInfo("binary", standard=Standard.BINARY)
ULP = ApiInfo("ulp", standard=Standard.ULP)
ACCUMULATIVE = ApiInfo("accumulative", standard=Standard.ACCUMULATIVE)
NPU = ApiInfo("npu", types=("NPU",))
"""torch_npu fused ops: a CPU reference with torch_npu's signature; without an entry, no replay."""
NPU_FORWARD_ONLY = NPU.variant("npu forward only", backward_message=NO_BACKWARD_UT)
"""Kernels without a backward in torch_npu (inference, optimizer, ``out=``)."""
MINDSPEED = ApiInfo("mindspeed", types=("MindSpeed",))
NORM = ApiInfo("norm", autocast_casts=False)
"""Normalisations: a bf16/fp16 input with fp32 weight and bias is the kernel's mixed-dtype form (no
autocast lowers a norm), so the bench keeps the fp32 weight as it is and its gradient stays fp32."""


def _npu(module: str, attr: str) -> Ref:
    return Ref(f"msprobe.run_ut.npu_ops.{module}", attr)


def _members(family: ApiInfo, groups: str) -> tuple[ApiInfo, ...]:
    """One member of ``family`` per ``name[/alias...]`` group of a whitespace-separated list."""
    return tuple(family.variant(g.split("/")[0], aliases=tuple(g.split("/")[1:])) for g in groups.split())


FUSION_ATTENTION = NPU.variant(
    "fusion attention",
    forward_outputs=(0,),
    grad_index=0,
    prepare_inputs=_npu("attention", "prepare_fusion_attention_inputs"),
)
"""torch_npu's and MindSpeed's npu_fusion_attention: output 0 compared and driving backward; a
compressed sparse mode's generated mask replaced by the one the kernel expects."""


_KEYWORD = 1 << 16
"""The positional index of a keyword-only argument (no call has that many)."""


def _ordering(family: ApiInfo, name: str, ties: Ties, **changes: Any) -> ApiInfo:
    """A member of ``family`` that orders values (``ties``): its drawn input repeats no value along
    the ordered dimension."""
    spec = no_repeats(ties.input, dim=ties.dim, default_dim=ties.default_dim)
    return family.variant(name, prepare_spec=spec, ties=ties, **changes)


def _linalg(names: str) -> tuple[ApiInfo, ...]:
    """``torch.linalg`` functions the dump names ``Torch.<name>`` (upstream's rule: the last name
    component) whose ``torch.<name>`` is missing, removed, or another function: replayed as
    ``torch.linalg.<name>``."""
    return tuple(PLAIN.variant(n, types=("Torch",), reference=Ref("torch.linalg", n)) for n in names.split())


ENTRIES: tuple[ApiInfo, ...] = (
    # upstream 8.1.1 AbsoluteThreshStandard (30 names)
    *_members(
        ABSOLUTE,
        "mul/mul_/__mul__/__imul__/__rmul__ add/add_/__add__/__iadd__/__radd__ "
        "div/div_/__div__/__idiv__/divide/divide_ leaky_relu/leaky_relu_ prelu reciprocal/reciprocal_ "
        "rsqrt/rsqrt_ square/square_ sub/sub_/rsub/__isub__/__sub__",
    ),
    # upstream 8.1.1 BinaryCompareStandard (62 names)
    *_members(
        BINARY,
        "abs/abs_/absolute/absolute_ argmin bitwise_and/bitwise_and_ broadcast_to ceil/ceil_ equal fill_ "
        "flatten floor/floor_ gather greater/greater_ greater_equal/greater_equal_ isfinite isnan "
        "less/less_ less_equal/less_equal_ logical_and/logical_and_ logical_not/logical_not_ "
        "logical_or/logical_or_ masked_fill/masked_fill_ max_pool3d maximum minimum neg/neg_ nonzero "
        "not_equal/not_equal_ one_hot pad relu reshape round/round_ select sign/sign_ tile "
        "transpose/transpose_ tril/tril_ triu/triu_",
    ),
    BINARY.variant("histc", prepare=as_dtype(0, ("torch.int8", "torch.int32", "torch.int64"), "float32")),
    # sort and topk (8.1.1's binary list), argsort and the other selections (benchmark): equal values
    # come out in the kernel's order, which a device may take otherwise (ours: drawn inputs repeat no
    # value along the ordered dimension, and indices and gradients are scored modulo equal values;
    # 8.1.1 draws repeats and scores the CPU's order)
    # sort, kthvalue and mode return (values, indices): their gradient flows through the values, so
    # grad_index=0 checks it (8.1.1 has none for them: "Multiple backward is not supported.")
    _ordering(
        BINARY,
        "sort",
        Ties((0, "input"), (1, "dim"), indices=(1,), stable=(_KEYWORD, "stable")),
        grad_index=0,
    ),
    _ordering(BINARY, "topk", Ties((0, "input"), (2, "dim"), indices=(1,)), grad_index=0, hint=TOPK_HINT),
    _ordering(PLAIN, "argsort", Ties((0, "input"), (1, "dim"), indices=(0,), stable=(3, "stable"))),
    _ordering(PLAIN, "kthvalue", Ties((0, "input"), (2, "dim"), indices=(1,)), grad_index=0),
    _ordering(PLAIN, "msort", Ties((0, "input"), default_dim=0)),
    _ordering(PLAIN, "mode", Ties((0, "input"), (1, "dim"), indices=(1,)), grad_index=0),
    _ordering(PLAIN, "median", Ties((0, "input"), (1, "dim"), None, indices=(1,)), aliases=("nanmedian",)),
    BINARY.variant("type_as", upcast=False),
    # upstream 8.1.1 ULPStandard (17 names)
    *_members(
        ULP,
        "matmul/__matmul__ addbmm/addbmm_ addmm/addmm_ baddbmm/baddbmm_ bilinear bmm chain_matmul hspmm "
        "linear mm mv smm sspaddmm",
    ),
    # upstream 8.1.1 ThousandthStandard and AccumulativeErrorStandard
    CONV.variant("conv1d"),
    CONV.variant("conv2d"),
    ACCUMULATIVE.variant("test_api"),
    # replay facts of benchmark APIs
    PLAIN.variant("__getitem__", prepare=tuple_index),
    # writes through index tensors: drawn indices repeat no value (which duplicate's write a device
    # keeps is not defined); ours, 8.1.1 draws them with repeats
    PLAIN.variant(
        "__setitem__",
        prepare=tuple_index,
        prepare_spec=no_repeats((1, "key"), dtypes=INDEX_DTYPES),
        writes_self=True,  # compared: x after the write (8.1.1 compares the None it returns)
    ),
    PLAIN.variant(
        "scatter",
        aliases=("scatter_",),
        prepare_spec=no_repeats((2, "index"), dim=(1, "dim"), unless=(4, "reduce"), dtypes=INDEX_DTYPES),
    ),
    PLAIN.variant(
        "index_copy", aliases=("index_copy_",), prepare_spec=no_repeats((2, "index"), dtypes=INDEX_DTYPES)
    ),
    PLAIN.variant(
        "index_put",
        aliases=("index_put_",),
        prepare_spec=no_repeats((1, "indices"), unless=(3, "accumulate"), dtypes=INDEX_DTYPES),
    ),
    PLAIN.variant(
        "put",
        aliases=("put_",),
        prepare_spec=no_repeats((1, "index"), unless=(3, "accumulate"), dtypes=INDEX_DTYPES),
    ),
    *_members(NORM, "layer_norm group_norm batch_norm instance_norm rms_norm"),
    PLAIN.variant("repeat_interleave", backward_message=NO_BACKWARD_DATA),
    PLAIN.variant("masked_select", backward_message=NO_BACKWARD_UT),
    # class-index targets (argument 1): drawn from 0, so an ignore_index of -100 in Min draws no
    # out-of-range class
    PLAIN.variant(
        "cross_entropy",
        aliases=("nll_loss",),
        prepare_spec=class_index_target,
        prepare=as_dtype(1, ("torch.int32",), "int64"),
    ),
    *_members(
        RANDOM,
        "rand randn randint randperm rand_like randn_like randint_like bernoulli bernoulli_ normal normal_ "
        "uniform_ multinomial exponential_ random_ cauchy_ geometric_ log_normal_ poisson rrelu/rrelu_ "
        "gumbel_softmax fractional_max_pool2d/fractional_max_pool2d_with_indices "
        "fractional_max_pool3d/fractional_max_pool3d_with_indices",
    ),
    *_members(DROPOUT, "dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout"),
    # attention with its dropout (training): replayed without it, as dropout itself (ours; 8.1.1 compares
    # the device's random mask with the CPU's)
    PLAIN.variant("scaled_dot_product_attention", prepare=zero_probability(4, "dropout_p")),
    PLAIN.variant("multi_head_attention_forward", prepare=zero_probability(10, "dropout_p")),
    # +-inf replaced by the input dtype's limits, spelled out so that the float64 bench uses them too
    PLAIN.variant("nan_to_num", aliases=("nan_to_num_",), prepare=dtype_limits((2, "posinf"), (3, "neginf"))),
    # MoE experts: the group ends drawn from statistics, put back in increasing order
    PLAIN.variant("grouped_mm", prepare=ascending("offs")),
    PLAIN.variant("grid_sample", bench_keeps_fp32=argument_is(2, "mode", "nearest")),
    # the dumped torch.linalg names with no torch function of that meaning (torch.cond is control flow;
    # torch.solve, lstsq and matrix_rank are removed). Names torch shares with linalg (norm, svd, qr,
    # cross, ...) call torch's, as upstream: a record does not say which of the two was called.
    *_linalg(
        "vector_norm matrix_norm cond matrix_rank lu lu_factor svdvals solve lstsq inv pinv vecdot multi_dot "
        "householder_product tensorsolve cholesky_ex inv_ex solve_ex lu_factor_ex ldl_factor ldl_factor_ex"
    ),
    # torch_npu fused ops; grad_index follows 8.1.1's torch_ut_setting.json (only npu_fusion_attention)
    FUSION_ATTENTION.variant("npu_fusion_attention", reference=_npu("attention", "npu_fusion_attention")),
    NPU.variant("npu_rms_norm", autocast_casts=False, reference=_npu("normalization", "npu_rms_norm")),
    NPU.variant("npu_rotary_mul", reference=_npu("rotary", "npu_rotary_mul")),
    NPU.variant("npu_swiglu", reference=_npu("activation", "npu_swiglu")),
    # "fast_gelu": the name upstream's docs use
    NPU.variant("npu_fast_gelu", aliases=("fast_gelu",), reference=_npu("activation", "npu_fast_gelu")),
    NPU.variant("npu_scaled_masked_softmax", reference=_npu("softmax", "npu_scaled_masked_softmax")),
    NPU.variant("npu_confusion_transpose", reference=_npu("reorder", "npu_confusion_transpose")),
    NPU.variant("npu_linear", reference=_npu("matmul", "npu_linear")),
    NPU.variant("npu_mish", reference=_npu("activation", "npu_mish")),
    NPU_FORWARD_ONLY.variant(
        "npu_layer_norm_eval", autocast_casts=False, reference=_npu("normalization", "npu_layer_norm_eval")
    ),
    NPU_FORWARD_ONLY.variant(
        "npu_group_norm_silu", autocast_casts=False, reference=_npu("normalization", "npu_group_norm_silu")
    ),
    NPU_FORWARD_ONLY.variant(
        "npu_moe_gating_top_k_softmax", reference=_npu("softmax", "npu_moe_gating_top_k_softmax")
    ),
    NPU_FORWARD_ONLY.variant("npu_sort_v2", reference=_npu("reorder", "npu_sort_v2")),
    NPU_FORWARD_ONLY.variant("npu_apply_adam", reference=_npu("optimizer", "npu_apply_adam")),
    NPU_FORWARD_ONLY.variant("npu_apply_adam_w", reference=_npu("optimizer", "npu_apply_adam_w")),
    # MindSpeed ops (8.1.1 skips the prefix; msprobe replays them)
    FUSION_ATTENTION.variant(
        "npu_fusion_attention",
        types=("MindSpeed",),
        reference=_npu("attention", "mindspeed_npu_fusion_attention"),
    ),
    MINDSPEED.variant(
        "npu_rotary_position_embedding", reference=_npu("rotary", "npu_rotary_position_embedding")
    ),
)
