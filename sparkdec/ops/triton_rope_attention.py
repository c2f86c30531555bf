"""Attention split kernel fused with q/k norm + RoPE + K/V store (CUDA, Triton): generated rows straight from qkv.

For decode, verify and drafter-block rows (prompt rows keep ops/triton_fused.qkv_rope_store and the prefill kernel).
One launch replaces qkv_rope_store and ops/triton_attention's split kernel; triton_attention's combine finishes.
- A program normalises and rotates its own query rows (the tile is QUERY_TILE (row, head) pairs for every call).
- The keys and values this forward adds (the rows of the call: key p of a sequence is new when the row
  lead + p - position(lead) is a row of the same sequence at position p) are computed from qkv by every program
  whose step holds them, stored in the cache, and read back from it into the step's tile, so a tile holds the same
  keys in the same places whichever of them are new (decode and verify rows get the same bits).
- Every older key of a program's first step is loaded before the PDL wait: it never depends on the qkv product.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.engine.context import BLOCK_ROWS
from sparkdec.env import flag
from sparkdec.ops import triton_attention as ta
from sparkdec.ops.triton_attention import row_block, split_start
from sparkdec.ops.triton_gemm import pdl_args, pdl_release, pdl_wait

# on by default where the CUDA path runs; SPARKDEC_ROPE_ATTENTION=0 keeps qkv_rope_store + the split kernel.
# Read at every call (A/B runs patch it). The two paths give different bits: an engine uses one of them throughout
ENABLED = flag("SPARKDEC_ROPE_ATTENTION", True)
QUERY_TILE = 32  # (row, head) pairs per tile, the same for every call (part of each row's reduction order)
NEW_TILE = 16  # new keys computed per pass of a step
PRELOAD = True  # the first step's older keys loaded before the PDL wait


@triton.jit
def _norm_rope(src, mask, w_ptr, cos_ptr, sin_ptr, pos, eps, stride_cos, h, hm, HALF: tl.constexpr):
    """Rows of one head read at src (first half; the second at src + HALF) -> RMSNorm with w, then rotated at
    positions pos: (lo, hi) halves in the activation dtype. The arithmetic of qkv_rope_store, per row."""
    dt = src.dtype.element_ty
    a = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt((tl.sum(a * a, 1) + tl.sum(b * b, 1)) / (2 * HALF) + eps)
    w1 = tl.load(w_ptr + h, mask=hm, other=0.0)
    w2 = tl.load(w_ptr + HALF + h, mask=hm, other=0.0)
    a = (w1[None, :] * (a * inv[:, None]).to(dt)).to(dt).to(tl.float32)
    b = (w2[None, :] * (b * inv[:, None]).to(dt)).to(dt).to(tl.float32)
    off = pos[:, None] * stride_cos + h[None, :]
    c1 = tl.load(cos_ptr + off, mask=mask, other=0.0).to(dt).to(tl.float32)
    c2 = tl.load(cos_ptr + off + HALF, mask=mask, other=0.0).to(dt).to(tl.float32)
    s1 = tl.load(sin_ptr + off, mask=mask, other=0.0).to(dt).to(tl.float32)
    s2 = tl.load(sin_ptr + off + HALF, mask=mask, other=0.0).to(dt).to(tl.float32)
    return (a * c1 - b * s1).to(dt), (b * c2 + a * s2).to(dt)


@triton.jit
def _slot_offsets(bt_ptr, stride_bt, stride_ks, stride_kh, page_size, kvh, seq, pos, keep):
    """Element offsets of kv head kvh at key positions pos of a sequence in the caches [slots, Hkv, D]."""
    page = tl.load(bt_ptr + seq * stride_bt + pos // page_size, mask=keep, other=0)
    return (page.to(tl.int64) * page_size + pos % page_size) * stride_ks + kvh * stride_kh


@triton.jit
def _load_halves(k_ptr, v_ptr, off, keep, h, hm, HALF: tl.constexpr):
    """Keys and values at element offsets off (rows where keep is false: zeros) -> k_lo, k_hi, v_lo, v_hi."""
    m = keep[:, None] & hm[None, :]
    o = off[:, None] + h[None, :]
    return (tl.load(k_ptr + o, mask=m, other=0.0), tl.load(k_ptr + o + HALF, mask=m, other=0.0),
            tl.load(v_ptr + o, mask=m, other=0.0), tl.load(v_ptr + o + HALF, mask=m, other=0.0))


@triton.jit
def _new_keys(pos, seq, lead, lead_pos, block_len, seq_ptr, pos_ptr, num_rows):
    """Which key positions pos [BLOCK] are this forward's (a row of the call holds them) -> (mask, their rows)."""
    row = lead + (pos - lead_pos)
    cand = (row >= 0) & (row < num_rows) & (pos < block_len)
    same = tl.load(seq_ptr + row, mask=cand, other=-1) == seq
    at = tl.load(pos_ptr + row, mask=cand, other=-1) == pos
    return cand & same & at, row


@triton.jit
def _store_new(new, row, pos, qkv_ptr, kw_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr, bt_ptr, eps, stride_t, stride_cos,
               stride_bt, stride_ks, stride_kh, page_size, kvh, seq, h, hm, NUM_Q: tl.constexpr,
               NUM_KV: tl.constexpr, HALF: tl.constexpr, BLOCK: tl.constexpr, NEW_TILE: tl.constexpr):
    """The new keys of a step (mask new over its BLOCK positions, a contiguous run) normed, rotated and stored with
    their values, NEW_TILE at a time."""
    first = tl.min(tl.where(new, pos, pos + BLOCK), 0)
    count = tl.sum(new.to(tl.int32), 0)
    row0 = tl.min(tl.where(new, row, row + BLOCK), 0)
    for c in range(0, BLOCK // NEW_TILE):
        j = c * NEW_TILE + tl.arange(0, NEW_TILE)
        keep = j < count  # NOTE: the loop bound is a constant; passes past the run store nothing
        p = first + j
        r = (row0 + j).to(tl.int64)
        m = keep[:, None] & hm[None, :]
        src = qkv_ptr + r[:, None] * stride_t + (NUM_Q + kvh) * 2 * HALF + h[None, :]
        lo, hi = _norm_rope(src, m, kw_ptr, cos_ptr, sin_ptr, p, eps, stride_cos, h, hm, HALF)
        off = _slot_offsets(bt_ptr, stride_bt, stride_ks, stride_kh, page_size, kvh, seq, p, keep)
        dst = off[:, None] + h[None, :]
        tl.store(k_ptr + dst, lo, mask=m)
        tl.store(k_ptr + dst + HALF, hi, mask=m)
        vsrc = src + NUM_KV * 2 * HALF
        tl.store(v_ptr + dst, tl.load(vsrc, mask=m, other=0.0), mask=m)
        tl.store(v_ptr + dst + HALF, tl.load(vsrc + HALF, mask=m, other=0.0), mask=m)


@triton.jit
def _attend(q_lo, q_hi, lens, m_i, l_i, acc_lo, acc_hi, k_lo, k_hi, v_lo, v_hi, pos, scale):
    """ops/triton_attention.attend_step over head-dim halves: online softmax over one step of keys."""
    s = tl.dot(q_hi, tl.trans(k_hi), tl.dot(q_lo, tl.trans(k_lo))) * scale  # [QR, BLOCK]
    s = tl.where(pos[None, :] < lens[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet stays finite (never read)
    alpha = tl.exp(m_i - m_use)
    p = tl.exp(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    pv = p.to(v_lo.dtype)
    acc_lo = acc_lo * alpha[:, None] + tl.dot(pv, v_lo)
    acc_hi = acc_hi * alpha[:, None] + tl.dot(pv, v_hi)
    return m_new, l_i, acc_lo, acc_hi


@triton.jit
def _step(k_lo, k_hi, v_lo, v_hi, pos, q_lo, q_hi, lens, m_i, l_i, acc_lo, acc_hi, scale, qkv_ptr, kw_ptr, cos_ptr,
          sin_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, pos_ptr, eps, stride_t, stride_cos, stride_bt, stride_ks, stride_kh,
          page_size, kvh, seq, lead, lead_pos, block_len, num_rows, h, hm, NUM_Q: tl.constexpr,
          NUM_KV: tl.constexpr, HALF: tl.constexpr, BLOCK: tl.constexpr, NEW_TILE: tl.constexpr):
    """One step of keys: the older ones already in k_lo .. v_hi (zeros where new); the new ones computed, stored and
    read back into their places; then the online softmax."""
    new, row = _new_keys(pos, seq, lead, lead_pos, block_len, seq_ptr, pos_ptr, num_rows)
    if tl.max(new.to(tl.int32), 0) > 0:
        _store_new(new, row, pos, qkv_ptr, kw_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr, bt_ptr, eps, stride_t,
                   stride_cos, stride_bt, stride_ks, stride_kh, page_size, kvh, seq, h, hm, NUM_Q, NUM_KV, HALF,
                   BLOCK, NEW_TILE)
        tl.debug_barrier()  # the program's own stores are visible to all its threads
        # NOTE: page lookups are masked by position only: a mask derived from the loaded row checks breaks
        # Triton 3.6's layout pass ("mask type matches ptr type") when the row arrays are int64
        off = _slot_offsets(bt_ptr, stride_bt, stride_ks, stride_kh, page_size, kvh, seq, pos, pos < block_len)
        n_lo, n_hi, nv_lo, nv_hi = _load_halves(k_ptr, v_ptr, off, new, h, hm, HALF)
        sel = new[:, None]
        k_lo, k_hi = tl.where(sel, n_lo, k_lo), tl.where(sel, n_hi, k_hi)
        v_lo, v_hi = tl.where(sel, nv_lo, v_lo), tl.where(sel, nv_hi, v_hi)
    return _attend(q_lo, q_hi, lens, m_i, l_i, acc_lo, acc_hi, k_lo, k_hi, v_lo, v_hi, pos, scale)


@triton.jit
def _old_step(pos, max_len, seq, lead, lead_pos, block_len, seq_ptr, pos_ptr, num_rows, k_ptr, v_ptr, bt_ptr,
              stride_bt, stride_ks, stride_kh, page_size, kvh, h, hm, HALF: tl.constexpr):
    """The keys and values at positions pos older than this forward (zeros elsewhere)."""
    new, _ = _new_keys(pos, seq, lead, lead_pos, block_len, seq_ptr, pos_ptr, num_rows)
    keep = (pos < max_len) & ~new
    off = _slot_offsets(bt_ptr, stride_bt, stride_ks, stride_kh, page_size, kvh, seq, pos, pos < max_len)  # NOTE below
    return _load_halves(k_ptr, v_ptr, off, keep, h, hm, HALF)


@triton.jit
def _rope_split_kernel(qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, len_ptr,
                       lead_ptr, nrow_ptr, acc_ptr, ml_ptr, scale, eps, stride_t, stride_cos, stride_ks, stride_kh,
                       stride_bt, page_size, num_splits, num_rows, NUM_Q: tl.constexpr, NUM_KV: tl.constexpr,
                       GROUP_PAD: tl.constexpr, ROWS: tl.constexpr, PASSES: tl.constexpr, HALF: tl.constexpr,
                       HALF_PAD: tl.constexpr, SPLIT_N: tl.constexpr, FINE_N: tl.constexpr,
                       FINE_SPLITS: tl.constexpr, BLOCK: tl.constexpr, PROGRAMS: tl.constexpr, ITERS: tl.constexpr,
                       NEW_TILE: tl.constexpr, PRE: tl.constexpr, PDL: tl.constexpr):
    kvh = tl.program_id(1)
    # NOTE: the row blocks, positions, sequences, kv lens and block tables are staged before the forward, and the
    # keys older than the forward's rows were written before it: all read before the wait
    lead, n_rows, has_block, seq = row_block(lead_ptr, nrow_ptr, seq_ptr, num_rows)
    first = tl.maximum(lead, 0)
    lead_pos = tl.load(pos_ptr + first)
    block_len = tl.load(len_ptr + first + tl.maximum(n_rows - 1, 0))  # the block's last row sees the most keys
    block_len = tl.where(has_block, block_len, 0)
    h = tl.arange(0, HALF_PAD)
    hm = h < HALF
    pos0 = split_start(tl.program_id(2), SPLIT_N, FINE_N, FINE_SPLITS) + tl.arange(0, BLOCK)
    if PRE:
        k_lo, k_hi, v_lo, v_hi = _old_step(pos0, block_len, seq, lead, lead_pos, block_len, seq_ptr, pos_ptr,
                                           num_rows, k_ptr, v_ptr, bt_ptr, stride_bt, stride_ks, stride_kh, page_size,
                                           kvh, h, hm, HALF)
        pre_pass = 0
    else:
        k_lo = tl.zeros([BLOCK, HALF_PAD], k_ptr.dtype.element_ty)
        k_hi, v_lo, v_hi = k_lo, k_lo, k_lo
        pre_pass = -1  # no pass takes them
    pdl_wait(PDL)
    if has_block:
        for pas in range(0, PASSES):
            if pas * ROWS < n_rows:
                _pass(pas * ROWS, pas == pre_pass, k_lo, k_hi, v_lo, v_hi, qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr,
                      pos_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, len_ptr, acc_ptr, ml_ptr, scale, eps, stride_t,
                      stride_cos, stride_ks, stride_kh, stride_bt, page_size, num_splits, num_rows, kvh, seq, lead,
                      n_rows, lead_pos, block_len, h, hm, NUM_Q, NUM_KV, GROUP_PAD, ROWS, HALF, SPLIT_N, FINE_N,
                      FINE_SPLITS, BLOCK, PROGRAMS, ITERS, NEW_TILE, HALF_PAD)
    pdl_release(PDL)


@triton.jit
def _pass(r0, use_pre, k_lo, k_hi, v_lo, v_hi, qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, k_ptr, v_ptr,
          bt_ptr, seq_ptr, len_ptr, acc_ptr, ml_ptr, scale, eps, stride_t, stride_cos, stride_ks, stride_kh, stride_bt,
          page_size, num_splits, num_rows, kvh, seq, lead, n_rows, lead_pos, block_len, h, hm, NUM_Q: tl.constexpr,
          NUM_KV: tl.constexpr, GROUP_PAD: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
          SPLIT_N: tl.constexpr, FINE_N: tl.constexpr, FINE_SPLITS: tl.constexpr, BLOCK: tl.constexpr,
          PROGRAMS: tl.constexpr, ITERS: tl.constexpr, NEW_TILE: tl.constexpr, HALF_PAD: tl.constexpr):
    """Query rows r0 .. r0 + ROWS - 1 of the block against this program's splits; partials to the workspace. The
    first split's first step takes the keys loaded before the wait when use_pre."""
    GROUP: tl.constexpr = NUM_Q // NUM_KV
    i = tl.arange(0, ROWS * GROUP_PAD)
    head = kvh * GROUP + i % GROUP_PAD
    row = lead + r0 + i // GROUP_PAD
    live = (r0 + i // GROUP_PAD < n_rows) & (i % GROUP_PAD < GROUP)
    lens = tl.load(len_ptr + row, mask=live, other=0)
    max_len = tl.max(lens, 0)
    qpos = tl.load(pos_ptr + row, mask=live, other=0)
    qm = live[:, None] & hm[None, :]
    src = qkv_ptr + row[:, None].to(tl.int64) * stride_t + head[:, None] * 2 * HALF + h[None, :]
    q_lo, q_hi = _norm_rope(src, qm, qw_ptr, cos_ptr, sin_ptr, qpos, eps, stride_cos, h, hm, HALF)
    for j in range(0, ITERS):
        split = tl.program_id(2) + j * PROGRAMS
        start = split_start(split, SPLIT_N, FINE_N, FINE_SPLITS)
        if start < max_len:
            steps = tl.where(split < FINE_SPLITS, FINE_N // BLOCK, SPLIT_N // BLOCK)
            m_i = tl.full([ROWS * GROUP_PAD], float("-inf"), tl.float32)
            l_i = tl.zeros([ROWS * GROUP_PAD], tl.float32)
            acc_lo = tl.zeros([ROWS * GROUP_PAD, HALF_PAD], tl.float32)
            acc_hi = tl.zeros([ROWS * GROUP_PAD, HALF_PAD], tl.float32)
            for s in range(0, SPLIT_N // BLOCK):
                if s < steps:
                    pos = start + s * BLOCK + tl.arange(0, BLOCK)
                    if use_pre & (j == 0) & (s == 0):
                        a_lo, a_hi, b_lo, b_hi = k_lo, k_hi, v_lo, v_hi
                    else:
                        a_lo, a_hi, b_lo, b_hi = _old_step(pos, max_len, seq, lead, lead_pos, block_len, seq_ptr,
                                                           pos_ptr, num_rows, k_ptr, v_ptr, bt_ptr, stride_bt,
                                                           stride_ks, stride_kh, page_size, kvh, h, hm, HALF)
                    m_i, l_i, acc_lo, acc_hi = _step(a_lo, a_hi, b_lo, b_hi, pos, q_lo, q_hi, lens, m_i, l_i, acc_lo,
                                                     acc_hi, scale, qkv_ptr, kw_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr,
                                                     bt_ptr, seq_ptr, pos_ptr, eps, stride_t, stride_cos, stride_bt,
                                                     stride_ks, stride_kh, page_size, kvh, seq, lead, lead_pos,
                                                     block_len, num_rows, h, hm, NUM_Q, NUM_KV, HALF, BLOCK, NEW_TILE)
            base = (row.to(tl.int64) * NUM_Q + head) * num_splits + split  # int64: large workspaces
            dst = acc_ptr + base[:, None] * (2 * HALF) + h[None, :]
            tl.store(dst, acc_lo, mask=qm)
            tl.store(dst + HALF, acc_hi, mask=qm)
            tl.store(ml_ptr + base * 2, m_i, mask=live)
            tl.store(ml_ptr + base * 2 + 1, l_i, mask=live)


def rope_attention(qkv: torch.Tensor, num_q: int, num_kv: int, q_weight: torch.Tensor, k_weight: torch.Tensor,
                   eps: float, cos: torch.Tensor, sin: torch.Tensor, ctx, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   scale: float) -> torch.Tensor:
    """qkv [T, (num_q + 2 num_kv) * D] (q heads, k heads, v heads) -> attention out [T, num_q, D]; every row's key
    and value stored in the caches. Generated rows (before ctx.prompt_row) take the fused kernel; prompt rows
    qkv_rope_store and the prefill kernel."""
    from sparkdec.ops.triton_fused import qkv_rope_store
    from sparkdec.ops.triton_prefill import triton_prefill_attention

    t, d = qkv.shape[0], k_cache.shape[2]
    out = torch.empty(t, num_q, d, dtype=qkv.dtype, device=qkv.device)
    p = t if ctx.prompt_row is None else ctx.prompt_row
    if p:
        args = (qkv, num_q, num_kv, q_weight, k_weight, eps, cos, sin, ctx, k_cache, v_cache, scale)
        host, blocks_host = ctx.row_kv_len_host, ctx.blocks_host
        per_row = num_q * ta.num_splits(ctx.max_kv_len) * (d + 2) * 4
        if host is None or blocks_host is None or p * per_row <= ta.WORKSPACE_BYTES:
            _launch(*args, 0, p, ctx.block_lead, ctx.block_rows, ctx.max_kv_len if host is None else max(host[:p]),
                    out)
        else:  # a long eager call: row ranges on block boundaries (the same bits: rows never depend on each other)
            for group in ta._block_ranges(blocks_host, max(BLOCK_ROWS, ta.WORKSPACE_BYTES // per_row)):
                r0, r1 = group[0][0], group[-1][0] + group[-1][1]
                lead = torch.tensor([a - r0 for a, _ in group], dtype=torch.int32).to(qkv.device, non_blocking=True)
                rows = torch.tensor([n for _, n in group], dtype=torch.int32).to(qkv.device, non_blocking=True)
                _launch(*args, r0, r1, lead, rows, max(host[r0:r1]), out)
    if p < t:
        q = torch.empty_like(out)
        q[p:] = qkv_rope_store(qkv[p:], num_q, num_kv, q_weight, k_weight, eps, cos, sin, ctx.positions[p:],
                               ctx.slot_mapping[p:], k_cache, v_cache)
        triton_prefill_attention(q, k_cache, v_cache, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ctx.page_size,
                                 ctx.max_kv_len, scale, (ctx.prompt_lead, ctx.prompt_rows), out)
    return out


def _launch(qkv, num_q, num_kv, q_weight, k_weight, eps, cos, sin, ctx, k_cache, v_cache, scale, r0: int, r1: int,
            lead, rows, max_kv_len: int, out: torch.Tensor) -> None:
    """The fused split kernel and the combine for rows r0 .. r1 - 1 (row blocks lead/rows relative to r0)."""
    t, hkv, d = r1 - r0, num_kv, k_cache.shape[2]
    if lead is None:  # every row alone
        lead = torch.arange(t, dtype=torch.int32, device=qkv.device)
        rows = torch.ones(t, dtype=torch.int32, device=qkv.device)
    group_pad = triton.next_power_of_2(num_q // num_kv)
    rows_per_pass = max(1, QUERY_TILE // group_pad)
    fine, splits, programs, iters = ta.split_layout(t, max_kv_len)
    acc = torch.empty(t * num_q * splits * d, dtype=torch.float32, device=qkv.device)
    ml = torch.empty(t * num_q * splits * 2, dtype=torch.float32, device=qkv.device)
    kv_len = ctx.row_kv_len[r0:r1]
    _rope_split_kernel[(lead.shape[0], hkv, programs)](
        qkv[r0:r1], q_weight, k_weight, cos, sin, ctx.positions[r0:r1], k_cache, v_cache, ctx.block_tables,
        ctx.row_seq[r0:r1], kv_len, lead, rows, acc, ml, scale, eps, qkv.stride(0), cos.stride(0), k_cache.stride(0),
        k_cache.stride(1), ctx.block_tables.stride(0), ctx.page_size, splits, t, NUM_Q=num_q, NUM_KV=num_kv,
        GROUP_PAD=group_pad, ROWS=rows_per_pass, PASSES=triton.cdiv(BLOCK_ROWS, rows_per_pass), HALF=d // 2,
        HALF_PAD=max(16, triton.next_power_of_2(d // 2)), **fine, BLOCK=ta.SPLIT_BLOCK_N, PROGRAMS=programs,
        ITERS=iters, NEW_TILE=NEW_TILE, PRE=PRELOAD, num_warps=ta.SPLIT_WARPS, **pdl_args("split"))
    ta.combine(acc, ml, kv_len, out[r0:r1], splits, fine)
