"""Softmax kernels: ``npu_scaled_masked_softmax`` and ``npu_moe_gating_top_k_softmax``."""

from __future__ import annotations

import torch

from msprobe.run_ut.npu_ops.precision import upcast

SCALED_SOFTMAX_MASK_VALUE = -10000.0  # value written at masked positions before the softmax


def npu_scaled_masked_softmax(
    x: torch.Tensor, mask: torch.Tensor | None, scale: float = 1.0, fixed_triu_mask: bool = False
) -> torch.Tensor:
    """``softmax(masked_fill(x * scale, mask, -10000), -1)`` in fp32 (or fp64), cast back.

    ``mask`` is True (non-zero) where a score is dropped; ``fixed_triu_mask`` replaces it by the
    causal mask ``triu(ones(S_q, S_k), 1)``.
    """
    xf = upcast(x) * scale
    if fixed_triu_mask:
        sq, sk = x.shape[-2], x.shape[-1]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=x.device).triu(diagonal=1)
    if mask is not None:
        xf = xf.masked_fill(mask.to(device=x.device).bool(), SCALED_SOFTMAX_MASK_VALUE)
    return torch.softmax(xf, dim=-1).to(x.dtype)


def npu_moe_gating_top_k_softmax(
    x: torch.Tensor, finished: torch.Tensor | None = None, k: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Softmax over experts, then the top ``k`` per row.

    Returns ``(y, expert_idx, row_idx)``: ``y`` the top-k probabilities in ``x``'s dtype, ``expert_idx``
    their expert numbers (int32; ties go to the lower expert number; rows whose ``finished`` flag is
    True get ``num_expert``), ``row_idx[r, j] = j * rows + r`` (int32), all shaped ``x.shape[:-1] + (k,)``.
    """
    num_expert = x.shape[-1]
    if not 0 <= k <= num_expert:
        raise ValueError(f"npu_moe_gating_top_k_softmax: k={k} not in [0, {num_expert}]")
    lead = x.shape[:-1]
    rows = x[..., 0].numel()
    probs = torch.softmax(upcast(x).reshape(rows, num_expert), dim=-1)
    order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices[:, :k]
    y = probs.gather(-1, order).to(x.dtype)
    expert_idx = order.to(torch.int32)
    if finished is not None:
        done = finished.reshape(rows, 1).to(device=x.device).bool()
        expert_idx = torch.where(done, torch.full_like(expert_idx, num_expert), expert_idx)
    row_idx = torch.arange(rows * k, dtype=torch.int32, device=x.device).reshape(k, rows).t()
    shape = (*lead, k)
    return y.reshape(shape), expert_idx.reshape(shape), row_idx.reshape(shape)
