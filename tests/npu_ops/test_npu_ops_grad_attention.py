"""Gradients of npu_fusion_attention (torch_npu and MindSpeed spellings) against a per-(batch, head)
composite fp64 formulation read straight from each layout, with masks written element by element from
the sparse_mode descriptions (``npu_oracles.masked``): q, k, v and pse gradients for a random upstream
gradient, over layouts, GQA, sparse modes, bands, prefixes, pse shapes and order, scales, dtypes and
the blocked (checkpointed) evaluation."""

from __future__ import annotations

from unittest import mock

import grad_oracles as go
import npu_oracles as oracle
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_cases import dtypes, seeds, tensor

import msprobe.run_ut.npu_ops.attention as attention
from msprobe.run_ut.npu_ops.attention import (
    compressed_mask,
    mindspeed_npu_fusion_attention,
    npu_fusion_attention,
)

APIS = ("torch_npu", "mindspeed pse_type=1", "mindspeed pse_type=0")


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


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    seed=seeds,
    dtype=dtypes,
    layout=st.sampled_from(["BSH", "SBH", "BSND", "BNSD"]),
    mode=st.sampled_from([0, 1, 2, 3, 4, 5, 6]),
    api=st.sampled_from(APIS),
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
    q = tensor(seed, _layout_shape(layout, b, n, sq, d), dtype)
    k = tensor(seed + 1, _layout_shape(layout, b, nkv, skv, d), dtype)
    v = tensor(seed + 2, _layout_shape(layout, b, nkv, skv, dv), dtype)
    dy = tensor(seed + 3, _layout_shape(layout, b, n, sq, dv), dtype)
    pse_shape = data.draw(st.sampled_from([(b, n, sq, skv), (1, n, sq, skv), (b, n, 1, skv)]), label="pse")
    pse = tensor(seed + 4, pse_shape, dtype) if with_pse else None
    mask_shape = data.draw(st.sampled_from([(b, n, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (sq, skv)]))
    given_mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(seed)) < 0.3
    pre = data.draw(st.sampled_from([oracle.BIG, 0, 1, 3, -1]), label="pre")
    nxt = data.draw(st.sampled_from([oracle.BIG, 0, 1, 2, -1]), label="next")
    prefix = [data.draw(st.integers(0, skv), label="prefix") for _ in range(b)]
    atten_mask = (compressed_mask(mode) if mode in (2, 3, 4, 6) else given_mask) if with_mask else None

    gm = np.broadcast_to(given_mask.numpy(), (b, n, sq, skv))
    mask = None
    if with_mask:
        mask = go.explicit_mask(
            (b, n, sq, skv),
            lambda bi, h, i, j: oracle.masked(
                mode, i, j, sq, skv, pre, nxt, bool(gm[bi, h, i, j]), prefix[bi]
            ),
        )
        if dtype != torch.float64:
            # A fully masked row attends to its raw scores shifted by -40000, which costs fp32 its
            # precision (on the kernel too): give those rows no upstream gradient below fp64.
            for bi, h, i in zip(*np.nonzero(mask.all(dim=-1).numpy())):
                go.head(dy, layout, int(bi), int(h), dv)[int(i)] = 0

    def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pse: torch.Tensor | None) -> tuple:
        return _call(
            api, q, k, v, n, layout, pse=pse, atten_mask=atten_mask, scale=scale, pre=pre, nxt=nxt,
            prefix=prefix, sparse_mode=mode,
        )  # fmt: skip

    with _blocks(blocked):
        got = go.reference_vjp(reference, [q, k, v, pse], [dy])
    dims = (b, n, nkv, sq, skv, d, dv)
    pse_first = api != "mindspeed pse_type=0"

    def composite(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pse: torch.Tensor | None
    ) -> torch.Tensor:
        return go.dense_attention_loss(
            q, k, v, pse, dy, layout=layout, dims=dims, mask=mask, scale=scale, pse_first=pse_first
        )

    want = go.oracle_grads(composite, [q, k, v, pse])
    go.assert_grads_close(got, want, [dtype] * 4, f"{api} {layout} mode {mode}")


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    seed=seeds,
    dtype=dtypes,
    mode=st.sampled_from([0, 1, 2, 3, 4, 7, 8]),
    api=st.sampled_from(APIS[:2]),
    blocked=st.booleans(),
)
def test_varlen_tnd_grad(
    data: st.DataObject, seed: int, dtype: torch.dtype, mode: int, api: str, blocked: bool
) -> None:
    qlens = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3), label="q lengths")
    kvlens = [data.draw(st.integers(1, 4)) if lq else data.draw(st.integers(0, 4)) for lq in qlens]
    tail = data.draw(st.integers(0, 2), label="rows after the last sequence")
    nkv = data.draw(st.integers(1, 2), label="kv heads")
    n, d = nkv * data.draw(st.integers(1, 2), label="GQA group"), 4
    t_q, t_kv = sum(qlens) + tail, max(sum(kvlens), 1)
    q = tensor(seed, (t_q, n, d), dtype)
    k, v = tensor(seed + 1, (t_kv, nkv, d), dtype), tensor(seed + 2, (t_kv, nkv, d), dtype)
    dy = tensor(seed + 3, (t_q, n, d), dtype)
    pre = data.draw(st.sampled_from([oracle.BIG, 2, 0]), label="pre")
    nxt = data.draw(st.sampled_from([oracle.BIG, 0, -1, 1]), label="next")
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
                    m, i, j, lq, lk, pre, nxt, bool(given_mask[i, j]), 0
                ),
            )
            if dtype != torch.float64:  # as in test_dense_grad: no upstream gradient on fully masked rows
                dy[q0 : q0 + lq][mask.all(dim=-1)] = 0
            spans.append((q0, q0 + lq, kv0, kv0 + lk, mask))
        q0, kv0 = q0 + lq, kv0 + lk

    def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
        return _call(
            api, q, k, v, n, "TND", atten_mask=atten_mask, scale=0.5, pre=pre, nxt=nxt,
            actual_seq_qlen=np.cumsum(qlens).tolist(), actual_seq_kvlen=np.cumsum(kvlens).tolist(),
            sparse_mode=mode,
        )  # fmt: skip

    with _blocks(blocked):
        got = go.reference_vjp(reference, [q, k, v], [dy])
    want = go.oracle_grads(
        lambda q, k, v: go.varlen_attention_loss(q, k, v, dy, spans=spans, scale=0.5), [q, k, v]
    )
    go.assert_grads_close(got, want, [dtype] * 3, f"{api} TND mode {mode}")
