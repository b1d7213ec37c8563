"""Independent formulations of the fused ops, written from their definitions with numpy (fp64) and
plain loops. They share no code with ``msprobe.run_ut.npu_ops``: a bug there is not copied here."""

from __future__ import annotations

import math

import numpy as np


def fast_gelu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-1.702 * x))


def mish(x: np.ndarray) -> np.ndarray:
    return x * np.tanh(np.logaddexp(0.0, x))


def swiglu(x: np.ndarray, dim: int) -> np.ndarray:
    half = x.shape[dim] // 2
    a = np.take(x, range(half), axis=dim)
    b = np.take(x, range(half, 2 * half), axis=dim)
    return a / (1.0 + np.exp(-a)) * b


def rotary(x: np.ndarray, r1: np.ndarray, r2: np.ndarray, mode: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    rot = np.empty_like(x)
    for i in range(d):
        if mode == "half":
            rot[..., i] = -x[..., i + d // 2] if i < d // 2 else x[..., i - d // 2]
        else:
            rot[..., i] = -x[..., i + 1] if i % 2 == 0 else x[..., i - 1]
    return r1 * x + r2 * rot


def masked_softmax(x: np.ndarray, mask: np.ndarray, scale: float, fill: float) -> np.ndarray:
    s = np.where(mask, fill, x * scale)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rms_norm(x: np.ndarray, gamma: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    k = gamma.ndim
    rows = x.reshape(-1, gamma.size)
    rstd = np.array([1.0 / math.sqrt(float(np.dot(r, r)) / r.size + eps) for r in rows])
    y = (rows * rstd[:, None]).reshape(x.shape) * gamma
    return y, rstd.reshape(x.shape[: x.ndim - k] + (1,) * k)


def layer_norm(x: np.ndarray, k: int, w: np.ndarray | None, b: np.ndarray | None, eps: float) -> np.ndarray:
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def group_norm_silu(
    x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None, groups: int, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, c = x.shape[:2]
    per = c // groups
    out = np.empty_like(x, dtype=np.float64)
    mean = np.empty((n, groups))
    rstd = np.empty((n, groups))
    for i in range(n):
        for g in range(groups):
            block = x[i, g * per : (g + 1) * per]
            mu = block.mean()
            r = 1.0 / math.sqrt(((block - mu) ** 2).mean() + eps)
            mean[i, g], rstd[i, g] = mu, r
            for ch in range(g * per, (g + 1) * per):
                y = (x[i, ch] - mu) * r
                y = y * (1.0 if w is None else w[ch]) + (0.0 if b is None else b[ch])
                out[i, ch] = y / (1.0 + np.exp(-y))
    return out, mean, rstd


def moe_gating(
    x: np.ndarray, finished: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    e = x.shape[-1]
    rows = x.reshape(-1, e)
    r = rows.shape[0]
    y = np.empty((r, k))
    idx = np.empty((r, k), dtype=np.int64)
    row_idx = np.empty((r, k), dtype=np.int64)
    fin = None if finished is None else finished.reshape(-1)
    for i in range(r):
        p = np.exp(rows[i] - rows[i].max())
        p = p / p.sum()
        order = sorted(range(e), key=lambda j: (-p[j], j))[:k]
        for slot, j in enumerate(order):
            y[i, slot] = p[j]
            idx[i, slot] = e if fin is not None and fin[i] else j
            row_idx[i, slot] = slot * r + i
    lead = (*x.shape[:-1], k)
    return y.reshape(lead), idx.reshape(lead), row_idx.reshape(lead)


def apply_adam(var, m, v, b1p, b2p, lr, b1, b2, eps, g, nesterov):  # type: ignore[no-untyped-def]
    m_t = b1 * m + (1 - b1) * g
    v_t = b2 * v + (1 - b2) * g * g
    alpha = lr * math.sqrt(1 - b2p) / (1 - b1p)
    upd = (b1 * m_t + (1 - b1) * g) if nesterov else m_t
    return var - alpha * upd / (np.sqrt(v_t) + eps), m_t, v_t


def apply_adam_w(var, m, v, b1p, b2p, lr, wd, b1, b2, eps, g, max_v, amsgrad, maximize):  # type: ignore[no-untyped-def]
    g = -g if maximize else g
    m_t = b1 * m + (1 - b1) * g
    v_t = b2 * v + (1 - b2) * g * g
    m_hat = m_t / (1 - b1p * b1)
    v_den = np.maximum(max_v, v_t) if amsgrad else v_t
    v_hat = v_den / (1 - b2p * b2)
    return var - lr * m_hat / (np.sqrt(v_hat) + eps) - lr * wd * var, m_t, v_t


# --- attention -------------------------------------------------------------------------------------

BIG = 2147483647


def masked(
    mode: int, i: int, j: int, sq: int, skv: int, pre: int, nxt: int, given: bool, prefix: int
) -> bool:
    """Whether query row i may not see key column j, straight from the sparse_mode descriptions."""
    diag = skv - sq  # the bottom-right corner's diagonal
    if mode == 0:
        return given or j - i > nxt or i - j > pre
    if mode in (1, 5):
        return given
    if mode == 2:
        return j > i
    if mode == 3:
        return j > i + diag
    if mode == 4:
        return j - i - diag > nxt or i + diag - j > pre
    if mode == 6:
        return j > i + diag and j >= prefix
    raise AssertionError(mode)


def attention_bnsd(q, k, v, pse, mask_fn, scale, pse_first=True):  # type: ignore[no-untyped-def]
    """q (B, N, Sq, D), k/v (B, Nkv, Skv, D*); mask_fn(b, n, i, j) -> bool (None = no mask)."""
    bsz, heads, sq, _ = q.shape
    nkv, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    out = np.zeros((bsz, heads, sq, dv))
    for b in range(bsz):
        for n in range(heads):
            kn = n // (heads // nkv)
            for i in range(sq):
                s = np.array([float(np.dot(q[b, n, i], k[b, kn, j])) for j in range(skv)])
                if pse is not None:
                    p = np.broadcast_to(pse, (bsz, heads, sq, skv))[b, n, i]
                    s = (s + p) * scale if pse_first else s * scale + p
                else:
                    s = s * scale
                if mask_fn is not None:
                    s = s + np.array([-40000.0 if mask_fn(b, n, i, j) else 0.0 for j in range(skv)])
                w = np.exp(s - s.max())
                out[b, n, i] = (w / w.sum()) @ v[b, kn]
    return out
