"""CPU reference functions for the NPU fused operators (torch_npu and MindSpeed), one module per kind.

An ``NPU.<op>.N`` record cannot be replayed with the original kernel anywhere but on an Ascend NPU.
Each op has a pure-torch reference here with the same signature as ``torch_npu.<op>`` (differentiable,
any float dtype, any device). Which outputs are compared, which output receives the backward gradient
and how generated inputs are fixed are the op's entry in the API table
(:mod:`msprobe.run_ut.api_table`), like every other API's. Importing this package never imports
``torch_npu``.

Semantics and limits of every reference: ``docs/npu_ops.md``.
"""

from __future__ import annotations

from msprobe.run_ut import registry
from msprobe.run_ut.api_info import ApiInfo

NPU_PREFIX = "NPU"
MINDSPEED_PREFIX = "MindSpeed"


def lookup(api_name: str) -> ApiInfo | None:
    """The table entry of a fused op with a CPU reference, for a dump name (``NPU.npu_rms_norm.0``,
    ``MindSpeed.npu_fusion_attention.3``, with or without the call index and ``.forward``/``.backward``)
    or a bare op name (``npu_rms_norm``, an ``NPU`` op); None for anything else, other prefixes
    (``Functional.``, ``Torch.``) and ops without a reference included."""
    parts = api_name.split(".")
    if parts[-1] in ("forward", "backward"):
        parts = parts[:-1]
    if len(parts) > 1 and parts[-1].isdigit():
        parts = parts[:-1]
    if len(parts) == 1:
        prefix, op = NPU_PREFIX, parts[0]
    else:
        prefix, op = parts[0], ".".join(parts[1:])
    if prefix not in (NPU_PREFIX, MINDSPEED_PREFIX):
        return None
    entry = registry.find(prefix, op)
    return entry if entry is not None and entry.reference is not None else None


__all__ = ["MINDSPEED_PREFIX", "NPU_PREFIX", "lookup"]
