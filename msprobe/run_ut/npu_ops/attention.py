"""``npu_fusion_attention`` (torch_npu) and MindSpeed's v2 spelling: scaled dot-product attention.

Definition (torch_npu docs): ``out = softmax(mask(scale * (q·kᵀ + pse))) · v`` per head, with
``keep_prob = 1`` (no dropout). Every layout is brought to BNSD, the key/value heads are repeated
for GQA (``N_q / N_kv`` query heads share one kv head), and the result is returned in the query's
layout. A masked score gets ``-40000`` added, so a fully masked row still yields the
softmax of its raw scores rather than NaN.

Masks: ``True``/non-zero = "do not attend". Which positions are masked depends on ``sparse_mode``;
with ``atten_mask=None`` no mask at all is applied, whatever the mode (torch_npu: "sparse_mode,
pre_tockens and next_tockens take no effect"). Bands are measured as ``j - i`` (key index minus query
index) from the top-left corner, or from the bottom-right corner (offset ``S_kv - S_q``):

====  ===========================  =====================================================
mode  name                         masked positions
====  ===========================  =====================================================
0     defaultMask                  ``atten_mask`` | outside band(pre, next), top-left
1     allMask                      ``atten_mask`` as given
2     leftUpCausal                 ``j > i``
3     rightDownCausal              ``j > i + S_kv - S_q``
4     band                         outside band(pre, next), bottom-right
5     prefix (full mask)           ``atten_mask`` as given
6     prefix (compressed)          ``j > i + S_kv - S_q`` and ``j >= prefix[b]``
7     varlen, split rightDown      mode 3 per sequence, the last one mode 4 (TND only)
8     varlen, split leftUp         mode 2 per sequence, the first one mode 4 (TND only)
====  ===========================  =====================================================

For modes 2-4 and 6-8 the content of ``atten_mask`` (the kernel's compressed 2048×2048 pattern) is
not read; the mask is generated from the shapes.

Length (just over 400 lines): the nine sparse modes and four layouts of one kernel belong together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from msprobe.run_ut.npu_ops.precision import compute_dtype

MASK_VALUE = -40000.0
MAX_TOKENS = 2147483647
SOFTMAX_STAT_WIDTH = 8  # softmax_max / softmax_sum are broadcast over a trailing axis of 8
LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
COMPRESSED_MASK_MODES = frozenset({2, 3, 4, 6, 7, 8})
ATTEN_MASK_POSITION = 7  # index of atten_mask among torch_npu's positional parameters
SPARSE_MODE_POSITION = 16
SCORE_BLOCK_ELEMENTS = 1 << 24  # scores per block of query rows (see _attend)


def _to_bnsd(x: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        b, s, h = x.shape
        return x.reshape(b, s, heads, h // heads).transpose(1, 2)
    s, b, h = x.shape  # SBH
    return x.reshape(s, b, heads, h // heads).permute(1, 2, 0, 3)


def _from_bnsd(o: torch.Tensor, layout: str) -> torch.Tensor:
    b, n, s, d = o.shape
    if layout == "BNSD":
        return o
    if layout == "BSND":
        return o.transpose(1, 2)
    if layout == "BSH":
        return o.transpose(1, 2).reshape(b, s, n * d)
    return o.permute(2, 0, 1, 3).reshape(s, b, n * d)  # SBH


def _band(sq: int, skv: int, pre: int, nxt: int, offset: int, device: torch.device) -> torch.Tensor:
    """True outside ``-pre <= j - i - offset <= nxt``."""
    rel = torch.arange(skv, device=device)[None, :] - torch.arange(sq, device=device)[:, None] - offset
    return (rel > nxt) | (rel < -pre)


def _given(mask: torch.Tensor, sq: int, skv: int, device: torch.device) -> torch.Tensor:
    """The caller's mask (bool or uint8), cut to the block when it is larger (e.g. varlen ``maxS``)."""
    return mask.to(device).bool()[..., :sq, :skv]


def _block_mask(
    mode: int,
    mask: torch.Tensor | None,
    sq: int,
    skv: int,
    pre: int,
    nxt: int,
    prefix: Sequence[int] | None,
    device: torch.device,
) -> torch.Tensor | None:
    """Boolean mask broadcastable to ``(B, N, sq, skv)`` for one attention block (a batch, or one
    varlen sequence); ``None`` = attend everywhere."""
    if mask is None:
        return None
    right_down = skv - sq
    if mode == 0:
        return _given(mask, sq, skv, device) | _band(sq, skv, pre, nxt, 0, device)
    if mode in (1, 5):
        return _given(mask, sq, skv, device)
    if mode == 2:
        return _band(sq, skv, MAX_TOKENS, 0, 0, device)
    if mode == 3:
        return _band(sq, skv, MAX_TOKENS, 0, right_down, device)
    if mode == 4:
        return _band(sq, skv, pre, nxt, right_down, device)
    if mode == 6:
        if prefix is None:
            raise ValueError("npu_fusion_attention: sparse_mode=6 needs prefix")
        causal = _band(sq, skv, MAX_TOKENS, 0, right_down, device)
        cols = torch.arange(skv, device=device)
        prefix_cols = torch.stack([cols < p for p in prefix])[:, None, None, :]  # (B, 1, 1, skv)
        return causal & ~prefix_cols
    raise ValueError(f"npu_fusion_attention: sparse_mode={mode} is not supported for this layout")


def _attend_block(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pse: torch.Tensor | None,
    mask: torch.Tensor | None,
    scale: float,
    pse_before_scale: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    s = q @ k.transpose(-2, -1)
    if pse is None:
        s = s * scale
    elif pse_before_scale:
        s = (s + pse.to(s.dtype)) * scale
    else:
        s = s * scale + pse.to(s.dtype)
    if mask is not None:
        s = s + mask.to(s.dtype) * MASK_VALUE
    row_max = s.amax(dim=-1, keepdim=True)
    e = torch.exp(s - row_max.detach())
    row_sum = e.sum(dim=-1, keepdim=True)
    return (e / row_sum) @ v, row_max, row_sum


def _rows(t: torch.Tensor | None, start: int, stop: int) -> torch.Tensor | None:
    """Query rows ``start:stop`` of a tensor broadcast against ``(..., S_q, S_kv)``."""
    if t is None or t.dim() < 2 or t.shape[-2] == 1:
        return t
    return t[..., start:stop, :]


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pse: torch.Tensor | None,
    mask: torch.Tensor | None,
    scale: float,
    pse_before_scale: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BNSD attention in the compute dtype; returns ``(out, row max, row sum of exp)``.

    Long sequences are processed in blocks of query rows holding at most ``SCORE_BLOCK_ELEMENTS``
    scores, each block recomputed in backward (activation checkpointing) when a gradient is needed, so
    an 8k-token fp64 benchmark needs one block of scores in memory, not the whole ``S_q × S_kv`` matrix.
    """
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    b, n, sq, _ = q.shape
    rows = max(1, SCORE_BLOCK_ELEMENTS // max(1, b * n * k.shape[2]))
    if rows >= sq:
        return _attend_block(q, k, v, pse, mask, scale, pse_before_scale)
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, pse))
    parts = []
    for start in range(0, sq, rows):
        block = (
            q[:, :, start : start + rows],
            k,
            v,
            _rows(pse, start, start + rows),
            _rows(mask, start, start + rows),
        )
        if needs_grad:
            parts.append(checkpoint(_attend_block, *block, scale, pse_before_scale, use_reentrant=False))
        else:
            parts.append(_attend_block(*block, scale, pse_before_scale))
    out, row_max, row_sum = (torch.cat(p, dim=2) for p in zip(*parts))
    return out, row_max, row_sum


def _stat(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype).expand(*x.shape[:-1], SOFTMAX_STAT_WIDTH)


def _check(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: str, keep_prob: float
) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"npu_fusion_attention: input_layout {layout!r} is not one of {LAYOUTS}")
    if keep_prob != 1:
        raise ValueError(f"npu_fusion_attention: keep_prob={keep_prob} (dropout) cannot be replayed; only 1")
    if key.shape[:-1] != value.shape[:-1]:
        raise ValueError("npu_fusion_attention: key and value shapes differ beyond the last axis")
    if query.dim() != (3 if layout in ("BSH", "SBH", "TND") else 4):
        raise ValueError(f"npu_fusion_attention: query of shape {tuple(query.shape)} does not fit {layout}")


def _dense(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    head_num: int,
    layout: str,
    pse: torch.Tensor | None,
    atten_mask: torch.Tensor | None,
    opts: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    cd = compute_dtype(q.dtype)
    if layout in ("BSH", "SBH"):
        d = q.shape[-1] // head_num
        n_kv = k.shape[-1] // d
    else:
        n_kv = k.shape[2] if layout == "BSND" else k.shape[1]
    if head_num % n_kv:
        raise ValueError(
            f"npu_fusion_attention: {head_num} query heads are not a multiple of {n_kv} kv heads"
        )
    qb, kb, vb = (_to_bnsd(t.to(cd), layout, h) for t, h in ((q, head_num), (k, n_kv), (v, n_kv)))
    if opts["sparse_mode"] in (7, 8):
        raise ValueError("npu_fusion_attention: sparse_mode 7/8 are varlen modes (input_layout TND)")
    mask = _block_mask(
        opts["sparse_mode"],
        atten_mask,
        qb.shape[2],
        kb.shape[2],
        opts["pre"],
        opts["next"],
        opts["prefix"],
        q.device,
    )
    out, row_max, row_sum = _attend(qb, kb, vb, pse, mask, opts["scale"], opts["pse_before_scale"])
    return _from_bnsd(out, layout).to(q.dtype), row_max, row_sum


def _varlen_mode(mode: int, index: int, count: int) -> int:
    if mode == 7:
        return 4 if index == count - 1 else 3
    if mode == 8:
        return 4 if index == 0 else 2
    return mode


def _varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pse: torch.Tensor | None,
    atten_mask: torch.Tensor | None,
    opts: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TND: ``actual_seq_qlen``/``actual_seq_kvlen`` are cumulative ends; an end equal to the previous
    one is an empty sequence, a trailing 0 an absent one. Rows of ``T`` outside every sequence are 0."""
    qlen, kvlen = opts["qlen"], opts["kvlen"]
    if qlen is None or kvlen is None or len(qlen) != len(kvlen):
        raise ValueError(
            "npu_fusion_attention: TND needs actual_seq_qlen and actual_seq_kvlen of equal length"
        )
    if pse is not None:
        raise ValueError("npu_fusion_attention: pse with input_layout TND is not supported by the reference")
    if opts["sparse_mode"] in (5, 6):
        raise ValueError("npu_fusion_attention: prefix sparse modes are not defined for TND")
    cd = compute_dtype(q.dtype)
    t_q, n, _ = q.shape
    spans = []
    q0 = kv0 = 0
    for q_end, kv_end in zip(qlen, kvlen):
        if q_end == 0 and q0 > 0:  # trailing zeros: batches that take no part
            break
        spans.append((q0, int(q_end), kv0, int(kv_end)))
        q0, kv0 = int(q_end), int(kv_end)
    live = [sp for sp in spans if sp[1] > sp[0]]
    outs, maxes, sums = [], [], []
    for idx, (qs, qe, ks, ke) in enumerate(live):
        qb = q[qs:qe].to(cd).transpose(0, 1)[None]
        kb = k[ks:ke].to(cd).transpose(0, 1)[None]
        vb = v[ks:ke].to(cd).transpose(0, 1)[None]
        mode = _varlen_mode(opts["sparse_mode"], idx, len(live))
        mask = _block_mask(mode, atten_mask, qe - qs, ke - ks, opts["pre"], opts["next"], None, q.device)
        o, m, s = _attend(qb, kb, vb, None, mask, opts["scale"], True)
        outs.append(o[0].transpose(0, 1))
        maxes.append(m[0].transpose(0, 1))
        sums.append(s[0].transpose(0, 1))
    pad = t_q - q0  # spans are contiguous from row 0, so the live outputs cover rows [0, q0)
    out = torch.cat([*outs, q.new_zeros(pad, n, v.shape[-1], dtype=cd)])
    row_max = torch.cat([*maxes, q.new_zeros(pad, n, 1, dtype=cd)])
    row_sum = torch.cat([*sums, q.new_zeros(pad, n, 1, dtype=cd)])
    if opts["softmax_layout"] != "TND":  # default softmax layout for TND is N, T, 8
        row_max, row_sum = row_max.transpose(0, 1), row_sum.transpose(0, 1)
    return out.to(q.dtype), row_max, row_sum


def _run(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int, layout: str, **o: Any
) -> tuple:
    _check(query, key, value, layout, o.pop("keep_prob"))
    pse, atten_mask = o.pop("pse"), o.pop("atten_mask")
    if layout == "TND":
        out, row_max, row_sum = _varlen(query, key, value, pse, atten_mask, o)
    else:
        out, row_max, row_sum = _dense(query, key, value, head_num, layout, pse, atten_mask, o)
    stat_dtype = torch.float64 if row_max.dtype == torch.float64 else torch.float32
    softmax_out = query.new_empty(0)
    return out, _stat(row_max, stat_dtype), _stat(row_sum, stat_dtype), softmax_out, 0, 0, 0


def npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = MAX_TOKENS,
    next_tockens: int = MAX_TOKENS,
    inner_precise: int = 0,
    prefix: Sequence[int] | None = None,
    actual_seq_qlen: Sequence[int] | None = None,
    actual_seq_kvlen: Sequence[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
) -> tuple:
    """Returns torch_npu's 7 outputs: ``(attention_out, softmax_max, softmax_sum, softmax_out, seed,
    offset, numels)``; ``softmax_out`` is the reserved empty tensor, the three ints are 0 (no dropout).
    Only ``attention_out`` is compared. ``padding_mask``, ``inner_precise``,
    ``gen_mask_parallel`` and ``sync`` have no numerical meaning here."""
    return _run(
        query, key, value, head_num, input_layout, pse=pse, atten_mask=atten_mask, scale=scale,
        keep_prob=keep_prob, pre=pre_tockens, next=next_tockens, prefix=prefix, qlen=actual_seq_qlen,
        kvlen=actual_seq_kvlen, sparse_mode=sparse_mode, softmax_layout=softmax_layout, pse_before_scale=True,
    )  # fmt: skip


def mindspeed_npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    *,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tokens: int = MAX_TOKENS,
    next_tokens: int = MAX_TOKENS,
    inner_precise: int = 0,
    prefix: Sequence[int] | None = None,
    actual_seq_qlen: Sequence[int] | None = None,
    actual_seq_kvlen: Sequence[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    pse_type: int = 1,
    q_start_idx: Sequence[int] | None = None,
    kv_start_idx: Sequence[int] | None = None,
) -> tuple:
    """MindSpeed ``npu_fusion_attention`` (v2): ``pse_type`` 1 adds ``pse`` before the scale, 0 after;
    2/3 (alibi generated inside the kernel from slopes) are not supported."""
    if pse is not None and pse_type not in (0, 1):
        raise ValueError(f"npu_fusion_attention (MindSpeed): pse_type={pse_type} is not supported")
    return _run(
        query, key, value, head_num, input_layout, pse=pse, atten_mask=atten_mask, scale=scale,
        keep_prob=keep_prob, pre=pre_tokens, next=next_tokens, prefix=prefix, qlen=actual_seq_qlen,
        kvlen=actual_seq_kvlen, sparse_mode=sparse_mode, softmax_layout="", pse_before_scale=pse_type == 1,
    )  # fmt: skip


def compressed_mask(sparse_mode: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The fixed mask torch_npu expects for ``sparse_mode`` 2/3/4/7/8 (2048×2048 ``triu(1)``) and 6
    (3072×2048: that triangle over a 1024-row block whose right half is masked)."""
    tri = torch.ones(2048, 2048, dtype=torch.bool, device=device).triu(diagonal=1)
    if sparse_mode != 6:
        return tri
    block = torch.zeros(1024, 2048, dtype=torch.bool, device=device)
    block[:, 1024:] = True
    return torch.cat([tri, block])


def prepare_fusion_attention_inputs(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """For the inputs, drawn from statistics or read from files: an ``atten_mask`` under a compressed
    sparse mode is replaced by the mask the kernel expects (upstream 8.1.1 does this for modes 2/3/4;
    6/7/8 likewise), which a real mask under that mode already is."""
    mode = kwargs.get("sparse_mode", args[SPARSE_MODE_POSITION] if len(args) > SPARSE_MODE_POSITION else 0)
    if mode not in COMPRESSED_MASK_MODES:
        return args, kwargs
    if isinstance(kwargs.get("atten_mask"), torch.Tensor):
        kwargs = {**kwargs, "atten_mask": compressed_mask(mode, kwargs["atten_mask"].device)}
    elif len(args) > ATTEN_MASK_POSITION and isinstance(args[ATTEN_MASK_POSITION], torch.Tensor):
        fixed = compressed_mask(mode, args[ATTEN_MASK_POSITION].device)
        args = (*args[:ATTEN_MASK_POSITION], fixed, *args[ATTEN_MASK_POSITION + 1 :])
    return args, kwargs
