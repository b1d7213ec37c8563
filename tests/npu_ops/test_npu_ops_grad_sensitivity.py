"""The gradient comparisons can fail: each ``check_*`` of the gradient tests is run with its reference
replaced by one with the same forward values whose gradient is off by a relative ``GRADIENT_ERROR``
(one part in a million in fp64, a few times the tolerance in the other dtypes), and must then fail."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import test_npu_ops_grad_attention as att
import test_npu_ops_grad_elementwise as elt
import torch
from test_npu_ops_grad_attention import Dense, Varlen

from msprobe.run_ut import registry

GRADIENT_ERROR = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 1e-1}


def scaled_gradient(fn: Callable[..., Any], factor: float) -> Callable[..., Any]:
    """``fn`` with the same outputs, whose vector-Jacobian product is multiplied by ``factor``."""

    def scale(o: Any) -> Any:
        if isinstance(o, torch.Tensor) and o.requires_grad:
            return o.detach() + factor * (o - o.detach())
        return o

    def wrong(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        return tuple(scale(o) for o in out) if isinstance(out, tuple) else scale(out)

    return wrong


DENSE = Dense("BSND", 6, "torch_npu", (2, 4, 2, 3, 5, 4, 2), (2, 4, 3, 5), (2, 1, 3, 5), 1, 0, [1, 4])
DENSE_MS = Dense("SBH", 0, "mindspeed pse_type=0", (1, 2, 1, 4, 3, 2, 2), (1, 2, 4, 3), (4, 3), blocked=True)
VARLEN = Varlen(8, "torch_npu", [3, 0, 2], [4, 2, 2], 1, (4, 2), pre=1, nxt=0, blocked=True)
VARLEN_MS = Varlen(3, "mindspeed pse_type=1", [2, 3], [3, 3], 0, (2, 2))

# (module, reference name there, check(dtype))
CASES: dict[str, tuple[Any, str, Callable[[torch.dtype], None]]] = {
    "fast_gelu": (elt, "npu_fast_gelu", lambda dt: elt.check_activations(0, (3, 4), dt, 1.0, True)),
    "mish": (elt, "npu_mish", lambda dt: elt.check_activations(0, (3, 4), dt, 1.0, True)),
    "swiglu": (elt, "npu_swiglu", lambda dt: elt.check_swiglu(0, (3, 4), 1, dt)),
    "rms_norm": (elt, "npu_rms_norm", lambda dt: elt.check_rms_norm(0, (2, 3, 4), 2, dt, 1e-5, True)),
    "rotary_mul": (
        elt,
        "npu_rotary_mul",
        lambda dt: elt.check_rotary(0, (2, 2, 3, 4), (1, 1, 3, 4), dt, "interleave", False),
    ),
    "rotary_position_embedding": (
        elt,
        "npu_rotary_position_embedding",
        lambda dt: elt.check_rotary(0, (2, 2, 3, 4), (2, 1, 3, 4), dt, "half", True),
    ),
    "scaled_masked_softmax": (
        elt,
        "npu_scaled_masked_softmax",
        lambda dt: elt.check_scaled_masked_softmax(0, (2, 2, 3, 4), dt, 0.5, "b1"),
    ),
    "linear": (elt, "npu_linear", lambda dt: elt.check_linear(0, (2, 3), 4, 5, dt, True)),
    "confusion_transpose": (
        elt,
        "npu_confusion_transpose",
        lambda dt: elt.check_confusion_transpose(0, (2, 3, 4), (2, 0, 1), dt, False),
    ),
    "fusion_attention": (att, "npu_fusion_attention", lambda dt: att.check_dense(DENSE, 0, dt)),
    "fusion_attention_tnd": (att, "npu_fusion_attention", lambda dt: att.check_varlen(VARLEN, 0, dt)),
    "mindspeed_fusion_attention": (
        att,
        "mindspeed_npu_fusion_attention",
        lambda dt: att.check_dense(DENSE_MS, 0, dt),
    ),
    "mindspeed_fusion_attention_tnd": (
        att,
        "mindspeed_npu_fusion_attention",
        lambda dt: att.check_varlen(VARLEN_MS, 0, dt),
    ),
}


@pytest.mark.parametrize("dtype", list(GRADIENT_ERROR), ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_wrong_gradient_is_caught(case: str, dtype: torch.dtype) -> None:
    module, name, check = CASES[case]
    check(dtype)  # the genuine reference passes this very comparison
    wrong = scaled_gradient(getattr(module, name), 1 + GRADIENT_ERROR[dtype])
    with mock.patch.object(module, name, wrong), pytest.raises(AssertionError):
        check(dtype)


def test_every_differentiable_table_entry_has_its_gradient_checked() -> None:
    """A fused table entry whose backward is checked (NPU and MindSpeed entries, aliases) whose reference
    is not among the references above would have no gradient test: the table and this file must agree."""
    checked = {getattr(module, name) for module, name, _ in CASES.values()}
    differentiable = {
        f"{api_type}.{name}": registry.resolve(api_type, name, op)
        for (api_type, name), op in registry.INDEX.items()
        if api_type in ("NPU", "MindSpeed") and op.reference is not None and op.backward_message is None
    }
    assert "MindSpeed.npu_fusion_attention" in differentiable and "NPU.fast_gelu" in differentiable
    missing = sorted(key for key, ref in differentiable.items() if ref not in checked)
    assert not missing, f"no gradient check for {missing}"
    assert checked <= set(differentiable.values()), "a checked reference is not a differentiable entry"
