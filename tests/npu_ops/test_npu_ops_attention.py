"""npu_fusion_attention against a per-(batch, head, query row) loop in fp64 with the masks written
element by element from the sparse_mode descriptions (``npu_oracles.masked``)."""

from __future__ import annotations

import npu_oracles as oracle
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_cases import TOLERANCE, dtypes, seeds, tensor

from msprobe.run_ut.npu_ops.attention import (
    compressed_mask,
    mindspeed_npu_fusion_attention,
    npu_fusion_attention,
    prepare_fusion_attention_inputs,
)


def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """BNSD array -> the given layout (numpy, independent of the reference's own conversion)."""
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(0, 2, 1, 3)
    if layout == "BSH":
        return x.transpose(0, 2, 1, 3).reshape(b, s, n * d)
    return x.transpose(2, 0, 1, 3).reshape(s, b, n * d)  # SBH


def rows_fully_masked(mask_fn, b: int, n: int, sq: int, skv: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    full = np.zeros((b, n, sq), dtype=bool)
    if mask_fn is None:
        return full
    for bi in range(b):
        for ni in range(n):
            for i in range(sq):
                full[bi, ni, i] = all(mask_fn(bi, ni, i, j) for j in range(skv))
    return full


def compare(result: torch.Tensor, expected: np.ndarray, dtype: torch.dtype, skip: np.ndarray) -> None:
    """Compare rows that are not fully masked (there the -40000 offset costs fp32/fp16 their precision,
    on the kernel as in the reference); fully masked rows must still be finite."""
    rtol, atol = TOLERANCE[dtype]
    got = result.detach().double().numpy()
    assert result.dtype == dtype
    assert np.isfinite(got).all()
    keep = ~skip
    np.testing.assert_allclose(got[keep], expected[keep], rtol=rtol * 4, atol=atol * 4)


@settings(max_examples=60)
@given(
    data=st.data(),
    seed=seeds,
    dtype=dtypes,
    layout=st.sampled_from(["BSH", "SBH", "BSND", "BNSD"]),
    mode=st.sampled_from([0, 1, 2, 3, 4, 5, 6]),
    with_pse=st.booleans(),
    scale=st.sampled_from([0.125, 0.5, 1.0]),
)
def test_dense_layouts(
    data: st.DataObject, seed: int, dtype: torch.dtype, layout: str, mode: int, with_pse: bool, scale: float
) -> None:
    b, sq, skv = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    nkv = data.draw(st.integers(1, 2), label="kv heads")
    n = nkv * data.draw(st.integers(1, 2), label="GQA group")
    d, dv = data.draw(st.sampled_from([(2, 2), (4, 4), (4, 2)]), label="(d, dv)")
    q = tensor(seed, (b, n, sq, d), dtype)
    k = tensor(seed + 1, (b, nkv, skv, d), dtype)
    v = tensor(seed + 2, (b, nkv, skv, dv), dtype)
    pse = tensor(
        seed + 3, data.draw(st.sampled_from([(b, n, sq, skv), (1, n, sq, skv), (b, n, 1, skv)])), dtype
    )
    pse = pse if with_pse else None
    mask_shape = data.draw(st.sampled_from([(b, n, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (sq, skv)]))
    given_mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(seed)) < 0.3
    pre = data.draw(st.sampled_from([oracle.BIG, 0, 1, 3, -1]), label="pre")
    nxt = data.draw(st.sampled_from([oracle.BIG, 0, 1, 2, -1]), label="next")
    prefix = [data.draw(st.integers(0, skv)) for _ in range(b)]
    atten_mask = compressed_mask(mode) if mode in (2, 3, 4, 6) else given_mask
    gm = np.broadcast_to(given_mask.numpy(), (b, n, sq, skv))

    def mask_fn(bi: int, ni: int, i: int, j: int) -> bool:
        return oracle.masked(mode, i, j, sq, skv, pre, nxt, bool(gm[bi, ni, i, j]), prefix[bi])

    expected = oracle.attention_bnsd(
        q.double().numpy(),
        k.double().numpy(),
        v.double().numpy(),
        None if pse is None else pse.double().numpy(),
        mask_fn,
        scale,
    )
    args = [
        torch.from_numpy(to_layout(t.numpy(), layout)).to(dtype) for t in (q.double(), k.double(), v.double())
    ]
    result = npu_fusion_attention(
        *args,
        n,
        layout,
        pse=pse,
        atten_mask=atten_mask,
        scale=scale,
        pre_tockens=pre,
        next_tockens=nxt,
        prefix=prefix,
        sparse_mode=mode,
    )
    assert len(result) == 7 and result[4:] == (0, 0, 0)
    skip = rows_fully_masked(mask_fn, b, n, sq, skv)
    skip_layout = to_layout(np.broadcast_to(skip[..., None], (b, n, sq, dv)), layout)
    compare(result[0], to_layout(expected, layout), dtype, skip_layout)
    assert result[1].shape == result[2].shape == (b, n, sq, 8)


@settings(max_examples=40)
@given(
    data=st.data(),
    seed=seeds,
    dtype=dtypes,
    mode=st.sampled_from([0, 1, 2, 3, 4, 7, 8]),
    softmax_layout=st.sampled_from(["", "TND"]),
)
def test_varlen_tnd(
    data: st.DataObject, seed: int, dtype: torch.dtype, mode: int, softmax_layout: str
) -> None:
    qlens = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3), label="q lengths")
    kvlens = [data.draw(st.integers(1, 4)) if lq else data.draw(st.integers(0, 4)) for lq in qlens]
    tail = data.draw(st.integers(0, 2), label="rows after the last sequence")
    nkv = data.draw(st.integers(1, 2))
    n, d = nkv * data.draw(st.integers(1, 2)), 4
    t_q, t_kv = sum(qlens) + tail, max(sum(kvlens), 1)
    q, k, v = (
        tensor(seed, (t_q, n, d), dtype),
        tensor(seed + 1, (t_kv, nkv, d), dtype),
        tensor(seed + 2, (t_kv, nkv, d), dtype),
    )
    pre, nxt = (
        data.draw(st.sampled_from([oracle.BIG, 2, 0])),
        data.draw(st.sampled_from([oracle.BIG, 0, -1, 1])),
    )
    max_s = max([*qlens, *kvlens, 1])
    given_mask = torch.rand(max_s, max_s, generator=torch.Generator().manual_seed(seed)) < 0.3
    atten_mask = compressed_mask(mode) if mode not in (0, 1) else given_mask
    qcum, kvcum = np.cumsum(qlens).tolist(), np.cumsum(kvlens).tolist()
    result = npu_fusion_attention(
        q,
        k,
        v,
        n,
        "TND",
        atten_mask=atten_mask,
        scale=0.5,
        pre_tockens=pre,
        next_tockens=nxt,
        actual_seq_qlen=qcum,
        actual_seq_kvlen=kvcum,
        sparse_mode=mode,
        softmax_layout=softmax_layout,
    )
    expected = np.zeros((t_q, n, d))
    skip = np.zeros((t_q, n, d), dtype=bool)
    live = [i for i, lq in enumerate(qlens) if lq > 0]
    q0 = kv0 = 0
    for idx, (lq, lk) in enumerate(zip(qlens, kvlens)):
        if lq:
            seq_mode = {7: 4 if idx == live[-1] else 3, 8: 4 if idx == live[0] else 2}.get(mode, mode)

            def mask_fn(bi: int, ni: int, i: int, j: int, m=seq_mode, lq=lq, lk=lk) -> bool:  # type: ignore[no-untyped-def]
                return oracle.masked(m, i, j, lq, lk, pre, nxt, bool(given_mask[i, j]), 0)

            qs = q[q0 : q0 + lq].double().numpy().transpose(1, 0, 2)[None]
            ks = k[kv0 : kv0 + lk].double().numpy().transpose(1, 0, 2)[None]
            vs = v[kv0 : kv0 + lk].double().numpy().transpose(1, 0, 2)[None]
            expected[q0 : q0 + lq] = oracle.attention_bnsd(qs, ks, vs, None, mask_fn, 0.5)[0].transpose(
                1, 0, 2
            )
            full = rows_fully_masked(mask_fn, 1, n, lq, lk)[0].T
            skip[q0 : q0 + lq] = full[..., None]
        q0, kv0 = q0 + lq, kv0 + lk
    compare(result[0], expected, dtype, skip)
    stat_shape = (t_q, n, 8) if softmax_layout == "TND" else (n, t_q, 8)
    assert result[1].shape == stat_shape


def test_fully_masked_row_is_softmax_of_raw_scores() -> None:
    q, k, v = (tensor(i, (1, 1, 2, 4), torch.float64) for i in range(3))
    out = npu_fusion_attention(q, k, v, 1, "BNSD", atten_mask=torch.ones(2, 2, dtype=torch.bool), scale=0.5)[
        0
    ]
    expected = oracle.attention_bnsd(q.numpy(), k.numpy(), v.numpy(), None, None, 0.5)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_no_mask_means_full_attention_whatever_the_mode() -> None:
    q, k, v = (tensor(i, (1, 2, 3, 4), torch.float64) for i in range(3))
    full = npu_fusion_attention(q, k, v, 2, "BNSD")[0]
    for mode in (2, 3, 4):
        assert torch.equal(npu_fusion_attention(q, k, v, 2, "BNSD", sparse_mode=mode)[0], full)


def test_mindspeed_pse_type() -> None:
    q, k, v = (tensor(i, (1, 1, 3, 4), torch.float64) for i in range(3))
    pse = tensor(7, (1, 1, 3, 3), torch.float64)
    before = mindspeed_npu_fusion_attention(q, k, v, 1, "BNSD", pse=pse, scale=0.5, pse_type=1)[0]
    after = mindspeed_npu_fusion_attention(q, k, v, 1, "BNSD", pse=pse, scale=0.5, pse_type=0)[0]
    qn, kn, vn, pn = (t.numpy() for t in (q, k, v, pse))
    np.testing.assert_allclose(before.numpy(), oracle.attention_bnsd(qn, kn, vn, pn, None, 0.5), rtol=1e-10)
    np.testing.assert_allclose(
        after.numpy(), oracle.attention_bnsd(qn, kn, vn, pn, None, 0.5, False), rtol=1e-10
    )
    assert torch.equal(before, npu_fusion_attention(q, k, v, 1, "BNSD", pse=pse, scale=0.5)[0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keep_prob": 0.9}, "keep_prob"),
        ({"input_layout": "NSD"}, "input_layout"),
        ({"sparse_mode": 7, "atten_mask": torch.ones(2, 2, dtype=torch.bool)}, "varlen"),
        ({"head_num": 3}, "multiple"),
    ],
)
def test_refused_inputs(kwargs: dict, message: str) -> None:
    q = torch.ones(1, 2, 2, 4)
    call = {"head_num": 2, "input_layout": "BNSD", **kwargs}
    with pytest.raises(ValueError, match=message):
        npu_fusion_attention(q, q, q, **call)


def test_prepare_inputs_replaces_compressed_masks() -> None:
    q = torch.ones(1, 1, 4, 4)
    random_mask = torch.rand(2048, 2048) < 0.5
    for mode, rows in ((3, 2048), (6, 3072)):
        args, kwargs = prepare_fusion_attention_inputs(
            (q, q, q, 1, "BNSD"), {"atten_mask": random_mask, "sparse_mode": mode}
        )
        fixed = kwargs["atten_mask"]
        assert fixed.shape == (rows, 2048) and torch.equal(
            fixed[:2048], torch.ones(2048, 2048).bool().triu(1)
        )
    args, kwargs = prepare_fusion_attention_inputs(
        (q, q, q, 1, "BNSD"), {"atten_mask": random_mask, "sparse_mode": 1}
    )
    assert kwargs["atten_mask"] is random_mask
    positional = (q, q, q, 1, "BNSD", None, None, random_mask, 1.0, 1.0, 9, 9, 0, None, None, None, 2)
    args, _ = prepare_fusion_attention_inputs(positional, {})
    assert torch.equal(args[7], compressed_mask(2)) and len(args) == len(positional)


@pytest.mark.parametrize("layout", ["BSH", "BNSD", "TND"])
def test_gradcheck(layout: str) -> None:
    if layout == "TND":
        q, k, v = (tensor(i, (5, 2, 3), torch.float64).requires_grad_() for i in range(3))
        fn = lambda q, k, v: npu_fusion_attention(  # noqa: E731
            q,
            k,
            v,
            2,
            "TND",
            atten_mask=compressed_mask(3),
            actual_seq_qlen=[2, 5],
            actual_seq_kvlen=[3, 5],
            sparse_mode=3,
            scale=0.7,
        )[0]
        assert torch.autograd.gradcheck(fn, (q, k, v))
        return
    shape = (1, 3, 4) if layout == "BSH" else (1, 2, 3, 2)
    q, k, v = (tensor(i, shape, torch.float64).requires_grad_() for i in range(3))
    pse = tensor(5, (1, 2, 3, 3), torch.float64).requires_grad_()
    mask = torch.tensor([[False, True, False], [False, False, True], [True, False, False]])
    fn = lambda q, k, v, p: npu_fusion_attention(q, k, v, 2, layout, pse=p, atten_mask=mask, scale=0.4)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, pse))


@pytest.mark.parametrize("layout", ["BNSD", "TND"])
def test_query_blocks_change_nothing(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocked (and checkpointed) evaluation equals the one-block result, forward and gradient."""
    import msprobe.run_ut.npu_ops.attention as attention

    if layout == "TND":
        shape, kw = (7, 2, 3), {"actual_seq_qlen": [3, 7], "actual_seq_kvlen": [4, 7]}
        kw |= {"atten_mask": torch.rand(4, 4, generator=torch.Generator().manual_seed(3)) < 0.4}
    else:
        shape, kw = (
            (2, 2, 7, 3),
            {"atten_mask": torch.rand(2, 1, 7, 7, generator=torch.Generator().manual_seed(3)) < 0.4},
        )
        kw |= {"pse": tensor(9, (1, 2, 7, 7), torch.float64).requires_grad_()}

    def run() -> tuple[torch.Tensor, ...]:
        q, k, v = (tensor(i, shape, torch.float64).requires_grad_() for i in range(3))
        out = npu_fusion_attention(q, k, v, 2, layout, scale=0.3, **kw)
        (out[0] * tensor(5, out[0].shape, torch.float64)).sum().backward()
        return (out[0], out[1], *(t.grad for t in (q, k, v)))

    whole = run()
    monkeypatch.setattr(attention, "SCORE_BLOCK_ELEMENTS", 5)
    blocked = run()
    for a, b in zip(whole, blocked):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    with torch.no_grad():  # blocked without autograd: the plain loop, no checkpoint
        q, k, v = (tensor(i, shape, torch.float64) for i in range(3))
        torch.testing.assert_close(
            npu_fusion_attention(q, k, v, 2, layout, scale=0.3, **kw)[0], whole[0].detach()
        )


@pytest.mark.parametrize(("mode", "causal"), [(0, False), (1, False), (2, True), (3, True)])
def test_agrees_with_torch_sdpa(mode: int, causal: bool) -> None:
    """A second independent formulation: torch's scaled_dot_product_attention (square S, so modes 2
    and 3 are both the ordinary causal mask), with GQA expanded by hand."""
    q = tensor(0, (2, 4, 6, 8), torch.float64)
    k, v = tensor(1, (2, 2, 6, 8), torch.float64), tensor(2, (2, 2, 6, 8), torch.float64)
    keep = torch.rand(2, 1, 6, 6, generator=torch.Generator().manual_seed(4)) < 0.7
    keep[..., 0] = True  # no fully masked row: SDPA would return NaN there
    mask = None if causal else ~keep
    atten_mask = compressed_mask(mode) if causal else mask
    got = npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=atten_mask, scale=0.3, sparse_mode=mode)[0]
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, kk, vv, attn_mask=None if causal else keep, is_causal=causal, scale=0.3
    )
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
