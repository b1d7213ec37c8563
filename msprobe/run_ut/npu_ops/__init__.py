"""CPU reference functions for the NPU fused operators, and the table the replay stage consumes.

An ``NPU.<op>.N`` record cannot be replayed with the original kernel anywhere but on an Ascend NPU.
Each entry of :data:`FUSED_OPS` names a pure-torch reference with the same signature as
``torch_npu.<op>`` (differentiable, any float dtype, any device), which outputs are compared, and
which output receives the backward gradient. Importing this package never imports ``torch_npu``.

Semantics and limits of every reference: ``docs/npu_ops.md``; spec ``run_ut_compare.md`` §4.3-4.4.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from msprobe.run_ut.npu_ops.activation import npu_fast_gelu, npu_mish, npu_swiglu
from msprobe.run_ut.npu_ops.attention import (
    mindspeed_npu_fusion_attention,
    npu_fusion_attention,
    prepare_fusion_attention_inputs,
)
from msprobe.run_ut.npu_ops.matmul import npu_linear
from msprobe.run_ut.npu_ops.normalization import npu_group_norm_silu, npu_layer_norm_eval, npu_rms_norm
from msprobe.run_ut.npu_ops.optimizer import npu_apply_adam, npu_apply_adam_w
from msprobe.run_ut.npu_ops.reorder import npu_confusion_transpose, npu_sort_v2
from msprobe.run_ut.npu_ops.rotary import npu_rotary_mul, npu_rotary_position_embedding
from msprobe.run_ut.npu_ops.softmax import npu_moe_gating_top_k_softmax, npu_scaled_masked_softmax

PrepareInputs = Callable[[tuple, dict], tuple[tuple, dict]]


@dataclass(frozen=True)
class FusedOp:
    name: str  # torch_npu attribute, e.g. "npu_rms_norm"
    reference: Callable[..., Any]  # same signature as torch_npu.<name>
    forward_outputs: tuple[int, ...] | None  # indices of outputs that are compared (None = all)
    grad_index: int | None  # output that receives the backward gradient (spec grad_index)
    backward: bool = True  # whether backward is checked at all
    prepare_inputs: PrepareInputs | None = None
    # fixes inputs generated from statistics (int/bool masks, index tensors, shapes the op needs)

    def __post_init__(self) -> None:
        if self.grad_index is not None and not self.backward:
            raise ValueError(f"{self.name}: grad_index given for an op whose backward is not checked")
        if self.forward_outputs is not None and not self.forward_outputs:
            raise ValueError(f"{self.name}: forward_outputs is empty (use None for 'all')")


NPU_PREFIX = "NPU"
MINDSPEED_PREFIX = "MindSpeed"

# One entry per op. grad_index follows 8.1.1's torch_ut_setting.json (only npu_fusion_attention has
# one); backward=False for kernels without a backward in torch_npu (inference / optimizer / out=).
_ENTRIES = (
    FusedOp(
        "npu_fusion_attention", npu_fusion_attention, (0,), 0, prepare_inputs=prepare_fusion_attention_inputs
    ),
    FusedOp("npu_rms_norm", npu_rms_norm, None, None),
    FusedOp("npu_rotary_mul", npu_rotary_mul, None, None),
    FusedOp("npu_swiglu", npu_swiglu, None, None),
    FusedOp("npu_fast_gelu", npu_fast_gelu, None, None),
    FusedOp("npu_scaled_masked_softmax", npu_scaled_masked_softmax, None, None),
    FusedOp("npu_confusion_transpose", npu_confusion_transpose, None, None),
    FusedOp("npu_linear", npu_linear, None, None),
    FusedOp("npu_mish", npu_mish, None, None),
    FusedOp("npu_layer_norm_eval", npu_layer_norm_eval, None, None, backward=False),
    FusedOp("npu_group_norm_silu", npu_group_norm_silu, None, None, backward=False),
    FusedOp("npu_moe_gating_top_k_softmax", npu_moe_gating_top_k_softmax, None, None, backward=False),
    FusedOp("npu_sort_v2", npu_sort_v2, None, None, backward=False),
    FusedOp("npu_apply_adam", npu_apply_adam, None, None, backward=False),
    FusedOp("npu_apply_adam_w", npu_apply_adam_w, None, None, backward=False),
)

# MindSpeed ops (``MindSpeed.<op>.N`` records; 8.1.1 skips that prefix, spec §3.3) keyed with it,
# because ``mindspeed.ops.npu_fusion_attention`` has another signature than torch_npu's.
_MINDSPEED_ENTRIES = (
    FusedOp(
        "npu_fusion_attention",
        mindspeed_npu_fusion_attention,
        (0,),
        0,
        prepare_inputs=prepare_fusion_attention_inputs,
    ),
    FusedOp("npu_rotary_position_embedding", npu_rotary_position_embedding, None, None),
)

# Alias the docs use for npu_fast_gelu (spec §4.4: "doc says fast_gelu").
_ALIASES = {"fast_gelu": "npu_fast_gelu"}

FUSED_OPS: Mapping[str, FusedOp] = MappingProxyType(
    {
        **{op.name: op for op in _ENTRIES},
        **{f"{MINDSPEED_PREFIX}.{op.name}": op for op in _MINDSPEED_ENTRIES},
        **{alias: {op.name: op for op in _ENTRIES}[target] for alias, target in _ALIASES.items()},
    }
)


def lookup(api_name: str) -> FusedOp | None:
    """Entry for a dump name (``NPU.npu_rms_norm.0``, ``MindSpeed.npu_fusion_attention.3``, with or
    without the call index and ``.forward``/``.backward``) or a bare op name (``npu_rms_norm``);
    None for anything else, other prefixes (``Functional.``, ``Torch.``) included."""
    parts = api_name.split(".")
    if parts[-1] in ("forward", "backward"):
        parts = parts[:-1]
    if len(parts) > 1 and parts[-1].isdigit():
        parts = parts[:-1]
    if len(parts) == 1:
        return FUSED_OPS.get(parts[0])
    prefix, op = parts[0], ".".join(parts[1:])
    if prefix == NPU_PREFIX:
        return FUSED_OPS.get(op)
    if prefix == MINDSPEED_PREFIX:
        return FUSED_OPS.get(f"{MINDSPEED_PREFIX}.{op}")
    return None


__all__ = ["FUSED_OPS", "MINDSPEED_PREFIX", "NPU_PREFIX", "FusedOp", "PrepareInputs", "lookup"]
