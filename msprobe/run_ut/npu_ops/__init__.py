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

from msprobe.formats.record_names import MINDSPEED_PREFIX, NPU_PREFIX, split_op_name
from msprobe.run_ut import registry
from msprobe.run_ut.api_info import ApiInfo


def lookup(api_name: str) -> ApiInfo | None:
    """The table entry of a fused op with a CPU reference, for a dump name (``NPU.npu_rms_norm.0``,
    ``MindSpeed.npu_fusion_attention.3``, with or without the call index and ``.forward``/``.backward``)
    or a bare op name (``npu_rms_norm``, an ``NPU`` op); None for anything else, other prefixes
    (``Functional.``, ``Torch.``) and ops without a reference included."""
    prefix, op = split_op_name(api_name)
    prefix = NPU_PREFIX if prefix is None else prefix
    if prefix not in (NPU_PREFIX, MINDSPEED_PREFIX):
        return None
    entry = registry.find(prefix, op)
    return entry if entry is not None and entry.reference is not None else None


__all__ = ["lookup"]
