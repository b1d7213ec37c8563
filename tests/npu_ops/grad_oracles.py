"""Gradient oracles for the differentiable fused ops, independent of ``msprobe.run_ut.npu_ops``.

Two kinds, both in fp64 torch and sharing no code with the references:

* closed-form vector-Jacobian products (``*_vjp``), derived by hand from each op's definition;
* composite formulations (attention) written per (batch, head) from the layout's definition, with
  masks written element by element (``npu_oracles.masked``), differentiated by autograd.

``reference_vjp`` differentiates a reference the same way for a given upstream gradient, and
``assert_grads_close`` compares the two with tolerances by dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

# (rtol, atol) of a reference gradient (input dtype) against the fp64 oracle fed the same rounded
# inputs. atol is relative to the largest oracle entry of that gradient (an entry is a sum that may
# cancel to ~0), but not below SCALE_FLOOR: the gradients here are O(0.1-10), and one that cancels
# as a whole (rms_norm over a single element, attention over a single key) is rounding noise of
# terms of size ~1. Half dtypes: fp32 inside, rounded once or twice (swiglu's gate) to the input dtype.
GRAD_TOLERANCE = {
    torch.float64: (1e-9, 1e-10),
    torch.float32: (5e-5, 5e-5),
    torch.float16: (4e-3, 4e-3),
    torch.bfloat16: (3e-2, 3e-2),
}
# fp64 (the exact comparison, the one that catches small gradient errors) drawn twice as often.
grad_dtypes = st.sampled_from([torch.float64, torch.float64, torch.float32, torch.float16, torch.bfloat16])
SCALE_FLOOR = 1e-2
FAST_GELU_ALPHA = 1.702  # written from the op's definition y = x * sigmoid(1.702 x)
ATTENTION_MASK_VALUE = -40000.0
SOFTMAX_MASK_VALUE = -10000.0


def _grad(outs: list[torch.Tensor], wrt: list[torch.Tensor], cots: list | None) -> Sequence:
    if not outs:
        return [None] * len(wrt)
    return torch.autograd.grad(outs, wrt, cots, allow_unused=True)


def reference_vjp(
    fn: Callable[..., object],
    inputs: Sequence[torch.Tensor | None],
    cotangents: Sequence[torch.Tensor | None],
) -> list[torch.Tensor | None]:
    """Gradients of ``sum_i <cotangents[i], fn(*inputs)[i]>`` w.r.t. each non-None input (autograd),
    ``None`` for an input that is ``None``; outputs with a ``None`` cotangent take no gradient."""
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    pairs = [(o, c) for o, c in zip(outs, cotangents) if c is not None]
    for o, c in pairs:
        assert isinstance(o, torch.Tensor) and o.dtype == c.dtype and o.shape == c.shape, (o, c)
    pairs = [(o, c) for o, c in pairs if o.requires_grad]  # an output that depends on no input: 0
    wrt = [t for t in leaves if t is not None]
    grads = _grad([o for o, _ in pairs], wrt, [c for _, c in pairs])
    it = iter(grads)
    return [None if t is None else next(it) for t in leaves]


def oracle_grads(loss_fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor | None]) -> list:
    """Autograd gradients of a scalar fp64 ``loss_fn(*inputs)`` (inputs cast to fp64)."""
    leaves = [None if t is None else t.detach().double().requires_grad_() for t in inputs]
    wrt = [t for t in leaves if t is not None]
    loss = loss_fn(*leaves)
    grads = _grad([loss] if loss.requires_grad else [], wrt, None)
    it = iter(grads)
    return [None if t is None else next(it) for t in leaves]


def assert_grads_close(
    got: Sequence,
    want: Sequence,
    dtypes: Sequence[torch.dtype],
    what: str = "",
    floors: Sequence[float] | None = None,
) -> None:
    """Each reference gradient has its input's dtype and matches the fp64 oracle (a missing reference
    gradient counts as zeros). ``floors``: per gradient, the size of the terms its entries are sums
    of, where those may cancel far below it (atol is relative to the larger of that and the entries)."""
    assert len(got) == len(want)
    floors = [0.0] * len(want) if floors is None else floors
    for i, (g, w, dt, floor) in enumerate(zip(got, want, dtypes, floors)):
        if w is None and g is None:  # no such input, or neither side depends on it
            continue
        w = torch.zeros_like(g, dtype=torch.float64) if w is None else w.detach().double()
        if g is None:
            g = torch.zeros_like(w)
        else:
            assert g.dtype == dt, f"{what} grad {i}: dtype {g.dtype}, expected {dt}"
        rtol, atol = GRAD_TOLERANCE[dt]
        scale = max(float(w.abs().max()) if w.numel() else 0.0, floor, SCALE_FLOOR)
        torch.testing.assert_close(
            g.detach().double(), w, rtol=rtol, atol=atol * scale, msg=lambda m, i=i: f"{what} grad {i}: {m}"
        )


def sum_to(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Adjoint of broadcasting ``shape`` up to ``t.shape``: sum over the broadcast axes."""
    lead = t.dim() - len(shape)
    t = t.sum(dim=tuple(range(lead))) if lead else t
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and t.shape[i] != 1)
    return t.sum(dim=axes, keepdim=True) if axes else t


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


# --- element-wise activations ----------------------------------------------------------------------


def fast_gelu_vjp(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """d/dx [x σ(αx)] = σ(αx) + αx σ(αx)(1 − σ(αx))."""
    s = _sigmoid(FAST_GELU_ALPHA * x)
    return dy * (s + FAST_GELU_ALPHA * x * s * (1 - s))


def mish_vjp(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """d/dx [x tanh(softplus x)] = tanh(sp) + x (1 − tanh²(sp)) σ(x)."""
    t = torch.tanh(torch.logaddexp(torch.zeros_like(x), x))
    return dy * (t + x * (1 - t * t) * _sigmoid(x))


def swiglu_vjp(x: torch.Tensor, dim: int, dy: torch.Tensor) -> torch.Tensor:
    """y = a σ(a) b: dA = dy b (σ(a) + a σ(a)(1 − σ(a))), dB = dy a σ(a); halves along ``dim``."""
    half = x.shape[dim] // 2
    a, b = x.narrow(dim, 0, half), x.narrow(dim, half, half)
    s = _sigmoid(a)
    return torch.cat((dy * b * (s + a * s * (1 - s)), dy * a * s), dim=dim)


# --- rms norm --------------------------------------------------------------------------------------


def rms_norm_vjp(
    x: torch.Tensor, gamma: torch.Tensor, eps: float, dy: torch.Tensor, drstd: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """r = (Σx²/n + ε)^-½ over gamma's axes, y = x r γ. With h = dy γ:
    dx = r h − x r³ Σ(h x)/n  (− x r³/n · drstd),   dγ = Σ_leading dy x r."""
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    n = math.prod(gamma.shape)
    r = 1.0 / torch.sqrt((x * x).sum(dim=dims, keepdim=True) / n + eps)
    h = dy * gamma
    dx = r * h - x * r**3 * (h * x).sum(dim=dims, keepdim=True) / n
    if drstd is not None:
        dx = dx - x * r**3 / n * drstd
    dgamma = (dy * x * r).reshape(-1, *gamma.shape).sum(dim=0)
    return dx, dgamma


def rms_norm_term_sizes(x: torch.Tensor, gamma: torch.Tensor, eps: float, dy: torch.Tensor) -> list[float]:
    """Sizes of the terms of ``rms_norm_vjp``'s sums: ``r h`` for dx (over one element, dx = r h ε/(x²+ε)
    cancels to ~0), ``Σ|dy x r|`` for dγ."""
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    r = 1.0 / torch.sqrt((x * x).mean(dim=dims, keepdim=True) + eps)
    dgamma_terms = (dy * x * r).abs().reshape(-1, *gamma.shape).sum(dim=0)
    return [float((r * dy * gamma).abs().max()), float(dgamma_terms.max())]


# --- rotary ----------------------------------------------------------------------------------------


def _rotation(d: int, mode: str) -> tuple[list[int], list[float]]:
    """rotate(x)[i] = sign[i] * x[src[i]]: half = cat(−x2, x1), interleave = (x0, x1) → (−x1, x0)."""
    src, sign = [], []
    for i in range(d):
        if mode == "half":
            src.append(i + d // 2 if i < d // 2 else i - d // 2)
            sign.append(-1.0 if i < d // 2 else 1.0)
        else:
            src.append(i + 1 if i % 2 == 0 else i - 1)
            sign.append(-1.0 if i % 2 == 0 else 1.0)
    return src, sign


def rotary_vjp(
    x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, mode: str, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """y = r1 x + r2 rot(x): dx = r1 dy + rotᵀ(r2 dy), dr1 = Σ dy x, dr2 = Σ dy rot(x) (broadcast axes)."""
    src, sign = _rotation(x.shape[-1], mode)
    sgn = torch.tensor(sign, dtype=x.dtype)
    rot_x = x[..., src] * sgn
    z = r2 * dy * sgn
    rot_t = torch.zeros_like(z).index_add_(-1, torch.tensor(src), z)  # rotᵀ(w)[src[i]] += sign[i] w[i]
    return r1 * dy + rot_t, sum_to(dy * x, r1.shape), sum_to(dy * rot_x, r2.shape)


# --- softmax, linear, transpose --------------------------------------------------------------------


def scaled_masked_softmax_vjp(
    x: torch.Tensor, mask: torch.Tensor, scale: float, dy: torch.Tensor
) -> torch.Tensor:
    """y = softmax(where(mask, −10000, s x)): dx = s · where(mask, 0, y (dy − Σ dy y))."""
    z = torch.where(mask, torch.full_like(x, SOFTMAX_MASK_VALUE), x * scale)
    e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    y = e / e.sum(dim=-1, keepdim=True)
    dz = y * (dy - (dy * y).sum(dim=-1, keepdim=True))
    return scale * torch.where(mask, torch.zeros_like(dz), dz)


def linear_vjp(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """y = x wᵀ + b over the last axis: dx = dy w, dw = Σ_rows dyᵀ x, db = Σ_rows dy."""
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    db = None if bias is None else dy2.sum(dim=0)
    return (dy2 @ w).reshape(x.shape), dy2.T @ x2, db


def confusion_transpose_vjp(
    in_shape: Sequence[int],
    perm: Sequence[int],
    shape: Sequence[int],
    transpose_first: bool,
    dy: torch.Tensor,
) -> torch.Tensor:
    """Pure data movement: output element ``o`` is input element ``src[o]`` (found by pushing the
    input's flat indices through the op in numpy), so dx = scatter-add of dy at ``src``."""
    idx = np.arange(math.prod(in_shape)).reshape(in_shape)
    src = idx.transpose(perm).reshape(shape) if transpose_first else idx.reshape(shape).transpose(perm)
    flat = torch.from_numpy(np.ascontiguousarray(src).ravel())
    dx = torch.zeros(math.prod(in_shape), dtype=dy.dtype).index_add_(0, flat, dy.reshape(-1))
    return dx.reshape(tuple(in_shape))


def explicit_mask(shape: Sequence[int], masked: Callable[..., bool]) -> torch.Tensor:
    """Bool tensor of ``shape`` with ``masked(*index)`` at every index, written element by element."""
    out = np.zeros(tuple(shape), dtype=bool)
    for index in np.ndindex(*shape):
        out[index] = masked(*(int(i) for i in index))
    return torch.from_numpy(out)


# --- attention -------------------------------------------------------------------------------------


def head(x: torch.Tensor, layout: str, b: int, n: int, d: int) -> torch.Tensor:
    """The (S, D) matrix of batch ``b``, head ``n`` read straight from a dense layout (a view)."""
    if layout == "BNSD":
        return x[b, n]
    if layout == "BSND":
        return x[b, :, n]
    if layout == "BSH":
        return x[b, :, n * d : (n + 1) * d]
    if layout == "SBH":
        return x[:, b, n * d : (n + 1) * d]
    raise AssertionError(layout)


def head_attention(
    qh: torch.Tensor,
    kh: torch.Tensor,
    vh: torch.Tensor,
    pse: torch.Tensor | None,
    mask: torch.Tensor | None,
    scale: float,
    pse_first: bool,
) -> torch.Tensor:
    """One head: softmax over keys of ``scale·(q·kᵀ + pse)`` (or ``scale·q·kᵀ + pse``), −40000 added
    where ``mask`` is True, times v."""
    s = qh @ kh.T
    if pse is None:
        s = s * scale
    elif pse_first:
        s = (s + pse) * scale
    else:
        s = s * scale + pse
    if mask is not None:
        s = s + mask.double() * ATTENTION_MASK_VALUE
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    return (e / e.sum(dim=-1, keepdim=True)) @ vh


def dense_attention_loss(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pse: torch.Tensor | None,
    dy: torch.Tensor,
    *,
    layout: str,
    dims: tuple[int, int, int, int, int, int, int],
    mask: torch.Tensor | None,
    scale: float,
    pse_first: bool,
) -> torch.Tensor:
    """``<dy, attention_out>`` head by head; ``dims = (B, N, N_kv, S_q, S_kv, D, D_v)``; query head
    ``n`` reads kv head ``n // (N / N_kv)``; ``mask`` is a full (B, N, S_q, S_kv) bool tensor."""
    b, n, nkv, sq, skv, d, dv = dims
    total = q.new_zeros(())
    for bi in range(b):
        for h in range(n):
            kvh = h // (n // nkv)
            p = None if pse is None else pse.expand(b, n, sq, skv)[bi, h]
            o = head_attention(
                head(q, layout, bi, h, d),
                head(k, layout, bi, kvh, d),
                head(v, layout, bi, kvh, dv),
                p,
                None if mask is None else mask[bi, h],
                scale,
                pse_first,
            )
            total = total + (head(dy, layout, bi, h, dv).double() * o).sum()
    return total


def varlen_attention_loss(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dy: torch.Tensor,
    *,
    spans: Sequence[tuple[int, int, int, int, torch.Tensor | None]],
    scale: float,
) -> torch.Tensor:
    """TND: ``<dy, out>`` over the sequences ``(q_start, q_end, kv_start, kv_end, mask)``; rows of
    ``T`` outside every sequence take no part (their output is 0)."""
    n, nkv = q.shape[1], k.shape[1]
    total = q.new_zeros(())
    for qs, qe, ks, ke, mask in spans:
        for h in range(n):
            kvh = h // (n // nkv)
            o = head_attention(q[qs:qe, h], k[ks:ke, kvh], v[ks:ke, kvh], None, mask, scale, True)
            total = total + (dy[qs:qe, h].double() * o).sum()
    return total


def head_attention_vjp(
    qh: torch.Tensor,
    kh: torch.Tensor,
    vh: torch.Tensor,
    pse: torch.Tensor | None,
    mask: torch.Tensor | None,
    scale: float,
    pse_first: bool,
    do: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Closed-form gradients (no autograd) of ``<do, head_attention(...)>`` in fp64, P = softmax(S):
    dV = Pᵀ dO,  dS = P ∘ (dO Vᵀ − rowsum(dO ∘ P V)),  dQ = c dS K,  dK = c dSᵀ Q  (c = scale),
    dpse = c dS (pse before the scale) or dS (after)."""
    s = qh @ kh.T
    if pse is None:
        s = s * scale
    elif pse_first:
        s = (s + pse) * scale
    else:
        s = s * scale + pse
    if mask is not None:
        s = s + mask.double() * ATTENTION_MASK_VALUE
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    probs = e / e.sum(dim=-1, keepdim=True)
    ds = probs * (do @ vh.T - (do * (probs @ vh)).sum(dim=-1, keepdim=True))
    return scale * ds @ kh, scale * ds.T @ qh, probs.T @ do, scale * ds if pse_first else ds


def dense_attention_vjp(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pse: torch.Tensor | None,
    dy: torch.Tensor,
    *,
    layout: str,
    dims: tuple[int, int, int, int, int, int, int],
    mask: torch.Tensor | None,
    scale: float,
    pse_first: bool,
) -> list[torch.Tensor | None]:
    """Closed-form gradients of ``dense_attention_loss``: ``head_attention_vjp`` per (batch, head),
    summed over the query heads sharing a kv head and over pse's broadcast axes."""
    b, n, nkv, sq, skv, d, dv = dims
    q, k, v, dy = q.double(), k.double(), v.double(), dy.double()
    grads = [torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)]
    dpse = torch.zeros(b, n, sq, skv, dtype=torch.float64)
    for bi in range(b):
        for h in range(n):
            kvh = h // (n // nkv)
            p = None if pse is None else pse.double().expand(b, n, sq, skv)[bi, h]
            dq, dk, dvv, dpse[bi, h] = head_attention_vjp(
                head(q, layout, bi, h, d),
                head(k, layout, bi, kvh, d),
                head(v, layout, bi, kvh, dv),
                p,
                None if mask is None else mask[bi, h],
                scale,
                pse_first,
                head(dy, layout, bi, h, dv),
            )
            head(grads[0], layout, bi, h, d).add_(dq)
            head(grads[1], layout, bi, kvh, d).add_(dk)
            head(grads[2], layout, bi, kvh, dv).add_(dvv)
    return [*grads, None if pse is None else sum_to(dpse, pse.shape)]


def varlen_attention_vjp(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dy: torch.Tensor,
    *,
    spans: Sequence[tuple[int, int, int, int, torch.Tensor | None]],
    scale: float,
) -> list[torch.Tensor]:
    """Closed-form gradients of ``varlen_attention_loss`` (rows outside every sequence get 0)."""
    q, k, v, dy = q.double(), k.double(), v.double(), dy.double()
    n, nkv = q.shape[1], k.shape[1]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for qs, qe, ks, ke, mask in spans:
        for h in range(n):
            kvh = h // (n // nkv)
            gq, gk, gv, _ = head_attention_vjp(
                q[qs:qe, h], k[ks:ke, kvh], v[ks:ke, kvh], None, mask, scale, True, dy[qs:qe, h]
            )
            dq[qs:qe, h] += gq
            dk[ks:ke, kvh] += gk
            dv[ks:ke, kvh] += gv
    return [dq, dk, dv]
