"""Gradients of npu_fusion_attention (torch_npu and MindSpeed spellings) against a per-(batch, head)
composite fp64 formulation read straight from each layout, with masks written element by element from
the sparse_mode descriptions (``npu_oracles.masked``): q, k, v and pse gradients for a random upstream
gradient, over layouts, GQA, sparse modes, bands, prefixes, pse shapes and order, scales, dtypes and
the blocked (checkpointed) evaluation; plus every (layout, sparse_mode, API) once in fp64. Dense
and TND gradients are also checked against the closed-form attention backward (``*_attention_vjp``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from unittest import mock

import grad_oracles as go
import npu_oracles as oracle
import numpy as np
import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st
from npu_cases import seeds, tensor

import msprobe.run_ut.npu_ops.attention as attention
from msprobe.run_ut.npu_ops.attention import (
    compressed_mask,
    mindspeed_npu_fusion_attention,
    npu_fusion_attention,
)

APIS = ("torch_npu", "mindspeed pse_type=1", "mindspeed pse_type=0")
apis = st.sampled_from([APIS[0], *APIS])  # torch_npu's spelling (the common one) twice as often


def _call(api: str, *args: object, pre: int, nxt: int, **kw: object) -> tuple:
    if api == "torch_npu":
        return npu_fusion_attention(*args, pre_tockens=pre, next_tockens=nxt, **kw)
    pse_type = 1 if api.endswith("1") else 0
    return mindspeed_npu_fusion_attention(*args, pre_tokens=pre, next_tokens=nxt, pse_type=pse_type, **kw)


def _layout_shape(layout: str, b: int, n: int, s: int, d: int) -> tuple[int, ...]:
    return {"BNSD": (b, n, s, d), "BSND": (b, s, n, d), "BSH": (b, s, n * d), "SBH": (s, b, n * d)}[layout]


def _blocks(blocked: bool) -> mock._patch:
    """Tiny query-row blocks (several checkpointed blocks per call) or the default one block."""
    return mock.patch.object(
        attention, "SCORE_BLOCK_ELEMENTS", 3 if blocked else attention.SCORE_BLOCK_ELEMENTS
    )


@dataclass(frozen=True)
class Dense:
    """One dense case: sizes, options, and which of the optional inputs there are."""

    layout: str
    mode: int
    api: str
    dims: tuple[int, int, int, int, int, int, int]  # (B, N, N_kv, S_q, S_kv, D, D_v)
    pse_shape: tuple[int, ...] | None
    mask_shape: tuple[int, ...] | None  # of the given atten_mask; None = no atten_mask at all
    pre: int = oracle.BIG
    nxt: int = oracle.BIG
    prefix: list[int] = field(default_factory=list)
    scale: float = 0.5
    blocked: bool = False


def check_dense(case: Dense, seed: int, dtype: torch.dtype) -> None:
    b, n, nkv, sq, skv, d, dv = case.dims
    layout, mode = case.layout, case.mode
    q = tensor(seed, _layout_shape(layout, b, n, sq, d), dtype)
    k = tensor(seed + 1, _layout_shape(layout, b, nkv, skv, d), dtype)
    v = tensor(seed + 2, _layout_shape(layout, b, nkv, skv, dv), dtype)
    dy = tensor(seed + 3, _layout_shape(layout, b, n, sq, dv), dtype)
    pse = None if case.pse_shape is None else tensor(seed + 4, case.pse_shape, dtype)
    atten_mask = mask = None
    if case.mask_shape is not None:
        given_mask = torch.rand(case.mask_shape, generator=torch.Generator().manual_seed(seed)) < 0.3
        atten_mask = compressed_mask(mode) if mode in (2, 3, 4, 6) else given_mask
        gm = np.broadcast_to(given_mask.numpy(), (b, n, sq, skv))
        prefix = case.prefix or [0] * b
        mask = go.explicit_mask(
            (b, n, sq, skv),
            lambda bi, h, i, j: oracle.masked(
                mode, i, j, sq, skv, case.pre, case.nxt, bool(gm[bi, h, i, j]), prefix[bi]
            ),
        )
        if dtype != torch.float64:
            # A fully masked row attends to its raw scores shifted by -40000, which costs fp32 its
            # precision (on the kernel too): give those rows no upstream gradient below fp64.
            for bi, h, i in zip(*np.nonzero(mask.all(dim=-1).numpy())):
                go.head(dy, layout, int(bi), int(h), dv)[int(i)] = 0

    def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pse: torch.Tensor | None) -> tuple:
        return _call(
            case.api, q, k, v, n, layout, pse=pse, atten_mask=atten_mask, scale=case.scale, pre=case.pre,
            nxt=case.nxt, prefix=case.prefix or None, sparse_mode=mode,
        )  # fmt: skip

    def composite(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pse: torch.Tensor | None
    ) -> torch.Tensor:
        return go.dense_attention_loss(
            q, k, v, pse, dy, layout=layout, dims=case.dims, mask=mask, scale=case.scale,
            pse_first=case.api != "mindspeed pse_type=0",
        )  # fmt: skip

    with _blocks(case.blocked):
        got = go.reference_vjp(reference, [q, k, v, pse], [dy])
    want = go.oracle_grads(composite, [q, k, v, pse])
    go.assert_grads_close(got, want, [dtype] * 4, f"{case} {dtype}")
    closed_form = go.dense_attention_vjp(
        q, k, v, pse, dy, layout=layout, dims=case.dims, mask=mask, scale=case.scale,
        pse_first=case.api != "mindspeed pse_type=0",
    )  # fmt: skip
    go.assert_grads_close(got, closed_form, [dtype] * 4, f"{case} {dtype} (closed form)")


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    seed=seeds,
    dtype=go.grad_dtypes,
    layout=st.sampled_from(["BSH", "SBH", "BSND", "BNSD"]),
    mode=st.sampled_from([0, 1, 2, 3, 4, 5, 6]),
    api=apis,
    with_pse=st.booleans(),
    with_mask=st.sampled_from([True, True, True, False]),
    scale=st.sampled_from([0.125, 0.5, 1.0]),
    blocked=st.booleans(),
)
def test_dense_grad(
    data: st.DataObject,
    seed: int,
    dtype: torch.dtype,
    layout: str,
    mode: int,
    api: str,
    with_pse: bool,
    with_mask: bool,
    scale: float,
    blocked: bool,
) -> None:
    b, sq, skv = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    nkv = data.draw(st.integers(1, 2), label="kv heads")
    n = nkv * data.draw(st.integers(1, 2), label="GQA group")
    d, dv = data.draw(st.sampled_from([(2, 2), (4, 4), (4, 2)]), label="(d, dv)")
    pse_shape = data.draw(st.sampled_from([(b, n, sq, skv), (1, n, sq, skv), (b, n, 1, skv)]), label="pse")
    mask_shape = data.draw(st.sampled_from([(b, n, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (sq, skv)]))
    case = Dense(
        layout,
        mode,
        api,
        (b, n, nkv, sq, skv, d, dv),
        pse_shape if with_pse else None,
        mask_shape if with_mask else None,
        pre=data.draw(st.sampled_from([oracle.BIG, 0, 1, 3, -1]), label="pre"),
        nxt=data.draw(st.sampled_from([oracle.BIG, 0, 1, 2, -1]), label="next"),
        prefix=[data.draw(st.integers(0, skv), label="prefix") for _ in range(b)],
        scale=scale,
        blocked=blocked,
    )
    event(f"{api} {dtype}")
    event(f"{layout} sparse_mode {mode if with_mask else None} GQA {n // nkv}")
    check_dense(case, seed, dtype)


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_dense_grad_every_layout_and_mode(layout: str, mode: int) -> None:
    """Each combination at least once in fp64, whatever hypothesis draws: GQA (4 query heads on 2 kv
    heads), S_q != S_kv (the corners differ), a band, per-batch prefixes, a full pse, both APIs."""
    for i, api in enumerate(APIS):
        case = Dense(layout, mode, api, (2, 4, 2, 3, 5, 4, 2), (2, 4, 3, 5), (2, 1, 3, 5), 1, 0, [1, 4])
        check_dense(case, 10 * mode + i, torch.float64)


@dataclass(frozen=True)
class Varlen:
    mode: int
    api: str
    qlens: list[int]
    kvlens: list[int]
    tail: int  # rows of T after the last sequence
    heads: tuple[int, int]  # (N, N_kv)
    pre: int = oracle.BIG
    nxt: int = oracle.BIG
    blocked: bool = False


def check_varlen(case: Varlen, seed: int, dtype: torch.dtype) -> None:
    mode, qlens, kvlens, (n, nkv), d = case.mode, case.qlens, case.kvlens, case.heads, 4
    t_q, t_kv = sum(qlens) + case.tail, max(sum(kvlens), 1)
    q = tensor(seed, (t_q, n, d), dtype)
    k, v = tensor(seed + 1, (t_kv, nkv, d), dtype), tensor(seed + 2, (t_kv, nkv, d), dtype)
    dy = tensor(seed + 3, (t_q, n, d), dtype)
    max_s = max([*qlens, *kvlens, 1])
    given_mask = torch.rand(max_s, max_s, generator=torch.Generator().manual_seed(seed)) < 0.3
    atten_mask = compressed_mask(mode) if mode not in (0, 1) else given_mask

    live = [i for i, lq in enumerate(qlens) if lq > 0]
    spans = []
    q0 = kv0 = 0
    for idx, (lq, lk) in enumerate(zip(qlens, kvlens)):
        if lq:
            seq_mode = {7: 4 if idx == live[-1] else 3, 8: 4 if idx == live[0] else 2}.get(mode, mode)
            mask = go.explicit_mask(
                (lq, lk),
                lambda i, j, m=seq_mode, lq=lq, lk=lk: oracle.masked(
                    m, i, j, lq, lk, case.pre, case.nxt, bool(given_mask[i, j]), 0
                ),
            )
            if dtype != torch.float64:  # as in check_dense: no upstream gradient on fully masked rows
                dy[q0 : q0 + lq][mask.all(dim=-1)] = 0
            spans.append((q0, q0 + lq, kv0, kv0 + lk, mask))
        q0, kv0 = q0 + lq, kv0 + lk

    def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
        return _call(
            case.api, q, k, v, n, "TND", atten_mask=atten_mask, scale=0.5, pre=case.pre, nxt=case.nxt,
            actual_seq_qlen=np.cumsum(qlens).tolist(), actual_seq_kvlen=np.cumsum(kvlens).tolist(),
            sparse_mode=mode,
        )  # fmt: skip

    with _blocks(case.blocked):
        got = go.reference_vjp(reference, [q, k, v], [dy])
    want = go.oracle_grads(
        lambda q, k, v: go.varlen_attention_loss(q, k, v, dy, spans=spans, scale=0.5), [q, k, v]
    )
    go.assert_grads_close(got, want, [dtype] * 3, f"{case} {dtype}")
    closed_form = go.varlen_attention_vjp(q, k, v, dy, spans=spans, scale=0.5)
    go.assert_grads_close(got, closed_form, [dtype] * 3, f"{case} {dtype} (closed form)")


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    seed=seeds,
    dtype=go.grad_dtypes,
    mode=st.sampled_from([0, 1, 2, 3, 4, 7, 8]),
    api=st.sampled_from(APIS[:2]),
    blocked=st.booleans(),
)
def test_varlen_tnd_grad(
    data: st.DataObject, seed: int, dtype: torch.dtype, mode: int, api: str, blocked: bool
) -> None:
    qlens = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3), label="q lengths")
    qlens = qlens if any(qlens) else [1, *qlens[1:]]  # at least one sequence with a gradient
    kvlens = [data.draw(st.integers(1, 4)) if lq else data.draw(st.integers(0, 4)) for lq in qlens]
    nkv = data.draw(st.integers(1, 2), label="kv heads")
    case = Varlen(
        mode,
        api,
        qlens,
        kvlens,
        data.draw(st.integers(0, 2), label="rows after the last sequence"),
        (nkv * data.draw(st.integers(1, 2), label="GQA group"), nkv),
        pre=data.draw(st.sampled_from([oracle.BIG, 2, 0]), label="pre"),
        nxt=data.draw(st.sampled_from([oracle.BIG, 0, -1, 1]), label="next"),
        blocked=blocked,
    )
    event(f"{api} {dtype}")
    event(f"sparse_mode {mode}, {sum(1 for lq in qlens if lq)} sequences")
    check_varlen(case, seed, dtype)


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4, 7, 8])
def test_varlen_grad_every_mode(mode: int) -> None:
    """Each TND mode once in fp64: three sequences (one empty in q), a tail row, GQA, a band."""
    for i, api in enumerate(APIS[:2]):
        case = Varlen(mode, api, [3, 0, 2, 4], [4, 2, 2, 3], 1, (4, 2), pre=1, nxt=0, blocked=bool(i))
        check_varlen(case, 10 * mode + i, torch.float64)
