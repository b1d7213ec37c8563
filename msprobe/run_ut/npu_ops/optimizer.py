"""Optimizer-step kernels: ``npu_apply_adam`` and ``npu_apply_adam_w``.

Both update ``out=(var, m, v)`` in place, as torch_npu does, and return those three tensors. They are
forward-only (no autograd through an optimizer step). Scalars may be Python numbers or 0-dim tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from msprobe.run_ut.npu_ops.precision import upcast


def _state(out: Sequence[torch.Tensor] | None, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if out is None or len(out) != 3:
        raise ValueError(f"{name}: out=(var, m, v) with three tensors is required")
    var, m, v = out
    return var, m, v


def _write(
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor], new: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        for dst, src in zip(out, new):
            dst.copy_(src.to(dst.dtype))
    return out


def _num(x: Any) -> Any:
    """A 0-dim tensor scalar becomes a Python number (keeps the update in the operands' dtype)."""
    return x.item() if isinstance(x, torch.Tensor) and x.numel() == 1 else x


def npu_apply_adam(
    beta1_power: Any,
    beta2_power: Any,
    lr: Any,
    beta1: Any,
    beta2: Any,
    epsilon: Any,
    grad: torch.Tensor,
    use_locking: bool = False,
    use_nesterov: bool = False,
    out: Sequence[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ApplyAdam: ``m += (g - m)(1-b1)``, ``v += (g² - v)(1-b2)``, ``lr_t = lr·sqrt(1-b2^t)/(1-b1^t)``,
    ``var -= lr_t·m/(sqrt(v)+eps)`` (Nesterov: ``lr_t·(b1·m + (1-b1)·g)/(sqrt(v)+eps)``).

    ``beta*_power`` are the powers of the current step; ``use_locking`` has no numerical effect.
    """
    state = _state(out, "npu_apply_adam")
    var, m, v = (upcast(t) for t in state)
    g = grad.to(var.dtype)
    b1p, b2p, lr, b1, b2, eps = (_num(s) for s in (beta1_power, beta2_power, lr, beta1, beta2, epsilon))
    m_new = m + (g - m) * (1 - b1)
    v_new = v + (g * g - v) * (1 - b2)
    lr_t = lr * math.sqrt(1 - b2p) / (1 - b1p)
    step = b1 * m_new + (1 - b1) * g if use_nesterov else m_new
    var_new = var - lr_t * step / (v_new.sqrt() + eps)
    return _write(state, (var_new, m_new, v_new))


def npu_apply_adam_w(
    beta1_power: Any,
    beta2_power: Any,
    lr: Any,
    weight_decay: Any,
    beta1: Any,
    beta2: Any,
    epsilon: Any,
    grad: torch.Tensor,
    max_grad_norm: torch.Tensor | None = None,
    amsgrad: bool = False,
    maximize: bool = False,
    out: Sequence[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ApplyAdamW (decoupled weight decay). ``beta*_power`` are the powers of the *previous* step; the
    kernel multiplies them by ``beta*`` once. With ``amsgrad`` the denominator uses
    ``max(max_grad_norm, v)`` (the running maximum of ``v`` the caller passes); ``v`` itself is stored
    un-maximised.
    """
    state = _state(out, "npu_apply_adam_w")
    var, m, v = (upcast(t) for t in state)
    g = grad.to(var.dtype)
    if maximize:
        g = -g
    b1p, b2p, lr, wd, b1, b2, eps = (
        _num(s) for s in (beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon)
    )
    m_new = b1 * m + (1 - b1) * g
    v_new = b2 * v + (1 - b2) * g * g
    bias1 = 1 - b1p * b1
    bias2 = 1 - b2p * b2
    v_used = v_new
    if amsgrad:
        if max_grad_norm is None:
            raise ValueError("npu_apply_adam_w: amsgrad=True needs the max_grad_norm tensor")
        v_used = torch.maximum(max_grad_norm.to(var.dtype), v_new)
    denom = (v_used / bias2).sqrt() + eps
    var_new = var * (1 - lr * wd) - lr * (m_new / bias1) / denom
    return _write(state, (var_new, m_new, v_new))
