"""Regenerate ``fused_stats_dump/dump.json``: an 8.1.1-format statistics dump (spec dump.md §3.2)
with one forward record per NPU fused op, as torch_npu would be called in an LLM / diffusion model,
plus backward records for five differentiable ones.

No NPU is involved: the calls run through msprobe's own CPU references on random inputs, so the
statistics are self-consistent, not measured on Ascend hardware. Run from the repository root:
``.venv/bin/python tests/data/npu_ops/make_fused_stats_dump.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from msprobe.run_ut import registry
from msprobe.run_ut.npu_ops.attention import compressed_mask

OUT = Path(__file__).parent / "fused_stats_dump" / "dump.json"
bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32


def stat(t: torch.Tensor) -> dict[str, Any]:
    """Tensor encoding with 8.1.1 statistics rules."""
    enc: dict[str, Any] = {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape)}
    d = t.detach()
    if d.numel() == 0:
        enc.update(Max=None, Min=None, Mean=None, Norm=None)
    elif d.dtype == torch.bool:
        enc.update(Max=bool(d.any()), Min=bool(d.all()), Mean=None, Norm=None)
    else:
        if d.dtype == torch.float64 or not d.is_floating_point():
            d = d.float()
        enc.update(Max=d.max().item(), Min=d.min().item(), Mean=d.mean().item(), Norm=d.norm().item())
    enc["requires_grad"] = bool(t.requires_grad)
    return enc


def enc(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return stat(v)
    if v is None:
        return None
    if isinstance(v, list | tuple):
        return [enc(x) for x in v]
    return {"type": type(v).__name__, "value": v}


def rnd(shape: tuple[int, ...], dtype: torch.dtype, scale: float = 1.0, grad: bool = True) -> torch.Tensor:
    return (torch.randn(shape) * scale).to(dtype).requires_grad_(grad)


def calls() -> list[tuple[str, tuple, dict]]:
    b, s, n, d = 2, 128, 4, 64
    h = n * d
    t = 96  # TND tokens: sequences of 40, 56
    return [
        (
            "npu_fusion_attention",
            (rnd((b, s, h), bf16), rnd((b, s, h), bf16), rnd((b, s, h), bf16), n, "BSH"),
            {
                "atten_mask": compressed_mask(3),
                "scale": d**-0.5,
                "keep_prob": 1.0,
                "pre_tockens": 65536,
                "next_tockens": 0,
                "sparse_mode": 3,
            },
        ),
        (
            "npu_fusion_attention",
            (rnd((t, 8, d), fp16), rnd((t, 2, d), fp16), rnd((t, 2, d), fp16), 8, "TND"),
            {"scale": d**-0.5, "actual_seq_qlen": [40, 96], "actual_seq_kvlen": [40, 96], "sparse_mode": 0},
        ),
        (
            "npu_rms_norm",
            (rnd((b, s, h), bf16), rnd((h,), bf16, 0.1).add(1).detach().requires_grad_()),
            {"epsilon": 1e-06},
        ),
        (
            "npu_rotary_mul",
            (
                rnd((b, s, n, d), bf16),
                rnd((1, s, 1, d), bf16, 0.5, False).clamp(-1, 1),
                rnd((1, s, 1, d), bf16, 0.5, False).clamp(-1, 1),
            ),
            {},
        ),
        ("npu_swiglu", (rnd((b, s, 2 * h), bf16),), {"dim": -1}),
        ("npu_fast_gelu", (rnd((4, 1024), fp16),), {}),
        (
            "npu_scaled_masked_softmax",
            (rnd((b, n, s, s), fp16, 3.0), torch.rand(b, 1, s, s) < 0.2, d**-0.5, False),
            {},
        ),
        ("npu_confusion_transpose", (rnd((b, s, n, d), fp16), [0, 2, 1, 3], [b * n, s, d], True), {}),
        ("npu_linear", (rnd((256, 512), fp16), rnd((1024, 512), fp16, 0.05), rnd((1024,), fp16, 0.05)), {}),
        (
            "npu_layer_norm_eval",
            (rnd((4, s, h), fp32, 2.0, False), [h]),
            {"weight": rnd((h,), fp32, 0.1, False) + 1, "bias": rnd((h,), fp32, 0.1, False), "eps": 1e-05},
        ),
        (
            "npu_group_norm_silu",
            (
                rnd((b, 64, 16, 16), fp16, 1.0, False),
                rnd((64,), fp16, 1.0, False),
                rnd((64,), fp16, 1.0, False),
            ),
            {"group": 32, "eps": 1e-05},
        ),
        ("npu_mish", (rnd((8, 256), fp32, 2.0),), {}),
        ("npu_moe_gating_top_k_softmax", (rnd((256, 16), bf16, 1.0, False), torch.rand(256) < 0.1), {"k": 2}),
        ("npu_sort_v2", (rnd((16, 1024), fp32, 1.0, False),), {"dim": -1, "descending": True}),
        (
            "npu_apply_adam",
            (0.9**10, 0.999**10, 1e-3, 0.9, 0.999, 1e-8, rnd((1024,), fp32, 0.01, False), False, False),
            {
                "out": [
                    rnd((1024,), fp32, 0.02, False),
                    rnd((1024,), fp32, 0.001, False),
                    rnd((1024,), fp32, 1e-5, False).abs(),
                ]
            },
        ),
        (
            "npu_apply_adam_w",
            (
                0.9**9,
                0.999**9,
                1e-3,
                0.01,
                0.9,
                0.999,
                1e-8,
                rnd((1024,), fp32, 0.01, False),
                None,
                False,
                False,
            ),
            {
                "out": [
                    rnd((1024,), fp32, 0.02, False),
                    rnd((1024,), fp32, 0.001, False),
                    rnd((1024,), fp32, 1e-5, False).abs(),
                ]
            },
        ),
    ]


BACKWARD = {"npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul", "npu_swiglu", "npu_fast_gelu"}


def main() -> None:
    torch.manual_seed(811)
    data: dict[str, Any] = {}
    counters: dict[str, int] = {}
    for name, args, kwargs in calls():
        idx = counters[name] = counters.get(name, -1) + 1
        key = f"NPU.{name}.{idx}"
        record = {"input_args": enc(args), "input_kwargs": {k: enc(v) for k, v in kwargs.items()}}
        reference = registry.resolve("NPU", name, registry.lookup("NPU", name))
        assert reference is not None, name
        out = reference(*args, **kwargs)
        outs = list(out) if isinstance(out, tuple) else [out]
        data[f"{key}.forward"] = {**record, "is_recompute": False, "output": enc(outs)}
        if name in BACKWARD and idx == 0:
            leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
            grad = torch.randn(outs[0].shape).mul(1e-3).to(outs[0].dtype)
            outs[0].backward(grad)
            grads_in = [grad] + [None for o in outs[1:] if isinstance(o, torch.Tensor)]
            data[f"{key}.backward"] = {"input": enc(grads_in), "output": enc([leaf.grad for leaf in leaves])}
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    # the rest of an L1 rank folder (dump.md §3.1, §3.4): construct.json is {} at L1; no stacks recorded
    for companion in ("construct.json", "stack.json"):
        (OUT.parent / companion).write_text("{}\n")
    print(f"wrote {OUT} ({len(data)} records)")


if __name__ == "__main__":
    main()
