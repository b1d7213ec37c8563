"""The fused NPU/MindSpeed entries of the API table: contents, name lookup, signatures, import isolation."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from npu_cases import FIFTEEN

from msprobe.run_ut import registry
from msprobe.run_ut.api_info import NO_BACKWARD_UT, ApiInfo
from msprobe.run_ut.npu_ops import lookup
from msprobe.run_ut.npu_ops.attention import MAX_TOKENS

FUSED_KEYS = {f"{t}.{n}" for t, n in registry.INDEX if t in ("NPU", "MindSpeed")}


def npu(name: str) -> ApiInfo:
    entry = registry.find("NPU", name)
    assert entry is not None, name
    return entry


def test_every_op_has_an_entry_under_its_own_name() -> None:
    for name in FIFTEEN:
        assert npu(name).name == name and callable(registry.resolve("NPU", name, npu(name)))
    extra = FUSED_KEYS - {f"NPU.{n}" for n in FIFTEEN}
    assert extra == {
        "NPU.fast_gelu",
        "MindSpeed.npu_fusion_attention",
        "MindSpeed.npu_rotary_position_embedding",
    }


def test_spec_grad_index_and_compared_outputs() -> None:
    """As upstream 8.1.1: npu_fusion_attention compares output 0 only and drives backward from it; the other
    ops have no grad_index in 8.1.1's torch_ut_setting.json."""
    fa = npu("npu_fusion_attention")
    assert fa.forward_outputs == (0,) and fa.grad_index == 0 and fa.backward_message is None
    assert all(npu(n).grad_index is None for n in FIFTEEN if n != "npu_fusion_attention")
    forward_only = {n for n in FIFTEEN if npu(n).backward_message == NO_BACKWARD_UT}
    assert forward_only == {
        "npu_apply_adam",
        "npu_apply_adam_w",
        "npu_layer_norm_eval",
        "npu_group_norm_silu",
        "npu_moe_gating_top_k_softmax",
        "npu_sort_v2",
    }


@pytest.mark.parametrize(
    ("api_name", "expected"),
    [
        ("NPU.npu_rms_norm.0", "npu_rms_norm"),
        ("NPU.npu_rms_norm", "npu_rms_norm"),
        ("NPU.npu_rms_norm.12.forward", "npu_rms_norm"),
        ("NPU.npu_fusion_attention.3.backward", "npu_fusion_attention"),
        ("npu_swiglu", "npu_swiglu"),
        ("fast_gelu", "npu_fast_gelu"),
        ("MindSpeed.npu_rotary_position_embedding.0", "npu_rotary_position_embedding"),
    ],
)
def test_lookup(api_name: str, expected: str) -> None:
    entry = lookup(api_name)
    assert entry is not None and entry.name == expected


def test_lookup_tells_torch_npu_and_mindspeed_apart() -> None:
    torch_npu, ms = lookup("NPU.npu_fusion_attention.0"), lookup("MindSpeed.npu_fusion_attention.0")
    assert torch_npu is not None and ms is not None and torch_npu.reference != ms.reference
    assert (
        "pse_type" in inspect.signature(registry.resolve("MindSpeed", "npu_fusion_attention", ms)).parameters
    )


@pytest.mark.parametrize(
    "api_name",
    ["Functional.linear.0", "Torch.npu_rms_norm.0", "NPU.npu_unknown_op.0", "MindSpeed.npu_gmm.0", ""],
)
def test_lookup_misses(api_name: str) -> None:
    assert lookup(api_name) is None


# Keyword parameters as torch_npu documents them (callers pass these by name).
SIGNATURES = {
    "npu_fusion_attention": (
        [
            "head_num",
            "input_layout",
            "pse",
            "padding_mask",
            "atten_mask",
            "scale",
            "keep_prob",
            "pre_tockens",
            "next_tockens",
            "inner_precise",
            "prefix",
            "actual_seq_qlen",
            "actual_seq_kvlen",
            "sparse_mode",
            "gen_mask_parallel",
            "sync",
        ],
        {
            "scale": 1.0,
            "keep_prob": 1.0,
            "pre_tockens": MAX_TOKENS,
            "next_tockens": MAX_TOKENS,
            "sparse_mode": 0,
        },
    ),
    "npu_rms_norm": (["gamma", "epsilon"], {"epsilon": 1e-6}),
    "npu_rotary_mul": (["r1", "r2", "rotary_mode"], {"rotary_mode": "half"}),
    "npu_swiglu": (["dim"], {"dim": -1}),
    "npu_scaled_masked_softmax": (
        ["mask", "scale", "fixed_triu_mask"],
        {"scale": 1.0, "fixed_triu_mask": False},
    ),
    "npu_confusion_transpose": (["perm", "shape", "transpose_first"], {}),
    "npu_linear": (["weight", "bias"], {"bias": None}),
    "npu_layer_norm_eval": (["normalized_shape", "weight", "bias", "eps"], {"weight": None, "eps": 1e-5}),
    "npu_group_norm_silu": (["weight", "bias", "group", "eps"], {"eps": 1e-5}),
    "npu_moe_gating_top_k_softmax": (["finished", "k"], {"finished": None, "k": 1}),
    "npu_sort_v2": (["dim", "descending", "out"], {"dim": -1, "descending": False}),
    "npu_apply_adam": (
        [
            "beta1_power",
            "beta2_power",
            "lr",
            "beta1",
            "beta2",
            "epsilon",
            "grad",
            "use_locking",
            "use_nesterov",
            "out",
        ],
        {},
    ),
    "npu_apply_adam_w": (
        [
            "beta1_power",
            "beta2_power",
            "lr",
            "weight_decay",
            "beta1",
            "beta2",
            "epsilon",
            "grad",
            "max_grad_norm",
            "amsgrad",
            "maximize",
            "out",
        ],
        {},
    ),
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature_matches_torch_npu(name: str) -> None:
    names, defaults = SIGNATURES[name]
    params = inspect.signature(registry.resolve("NPU", name, npu(name))).parameters
    listed = [p for p in params if p in names]
    assert listed == names, f"{name}: parameters {list(params)}"
    for key, value in defaults.items():
        assert params[key].default == value, f"{name}: default of {key}"


def test_fused_op_validates_at_construction() -> None:
    with pytest.raises(ValueError, match="grad_index"):
        ApiInfo("x", reference=abs, grad_index=0, backward_message=NO_BACKWARD_UT)
    with pytest.raises(ValueError, match="empty"):
        ApiInfo("x", reference=abs, forward_outputs=())


def test_import_never_touches_torch_npu(tmp_path: Path) -> None:
    """With a torch_npu that raises on import first on the path, msprobe and the table still import
    and a reference still runs."""
    stub = tmp_path / "torch_npu"
    stub.mkdir()
    (stub / "__init__.py").write_text("raise ImportError('stub torch_npu: must not be imported')\n")
    code = textwrap.dedent(
        """
        import sys
        import torch
        import msprobe
        import msprobe.run_ut.npu_ops as ops
        y, rstd = ops.lookup("NPU.npu_rms_norm.0").reference(torch.ones(2, 4), torch.ones(4))
        assert "torch_npu" not in sys.modules
        print("ok", tuple(y.shape))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok (2, 4)"


def test_references_run_on_meta_free_cpu_half() -> None:
    """Half-precision CPU tensors (the device side on a CPU host) work for a normalisation kernel."""
    y, rstd = npu("npu_rms_norm").reference(
        torch.ones(2, 4, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16)
    )
    assert y.dtype == torch.bfloat16 and rstd.dtype == torch.float32
