"""Triton ragged paged attention (CUDA): split-KV with a fixed split size, combined in a fixed order.

Same semantics as ops/attention.py: query row r of sequence row_seq[r] attends to positions
0 .. row_kv_len[r]-1 of that sequence. Every row is computed on its own with a reduction order that depends
only on its kv_len, so results are batch-invariant. All inputs are tensors: the launch is CUDA-graph safe
(the grid is sized for the longest possible context; splits past a row's kv_len exit at once).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.engine.context import BLOCK_ROWS
from sparkdec.ops import gluon_split, stamps
from sparkdec.ops.stamps import stamp, stamp_after, stamp_value
from sparkdec.ops.triton_gemm import pdl_args, pdl_launch_early, pdl_release, pdl_wait

_BLOCK_ROWS_P2 = tl.constexpr(triton.next_power_of_2(BLOCK_ROWS))  # a row block's rows, padded for tl.arange

SPLIT = 128  # keys per split (fixed: part of the reduction order)
# positions below FINE_END are split in FINE_SPLIT keys (twice the programs for short contexts), the rest in SPLIT
# keys: 4B decode replay 3.26 -> 3.20 ms at 1k, 3.84 -> 3.74 at 8k (attention_fine_splits_ab_h200_2026-11-30.json;
# 64-key splits throughout were slower at 8k, attention_split_chain_order_ab_*). Fixed positions, the same for
# every row: part of the reduction order. FINE_END 0: SPLIT keys throughout.
FINE_SPLIT = 64
FINE_END = 2048
# splits the combine reduces at a time (fixed: part of the reduction order). 32, not 16: a lone row's short graph (32
# split programs per kv head) reduces one chunk, not two; 4B decode replay at 1k 2.439 -> 2.421 ms, at 8k 3.202 ->
# 3.156 (three and two runs each; comb_w2_ab_h200_2026-12-05_session42.json)
CHUNK = 32
BLOCK_N = 64  # keys per inner step (a divisor of SPLIT)
SPLIT_BLOCK_N = BLOCK_N  # the split kernel's step (part of the reduction order: decode and verify rows share it)
SPLIT_WARPS = 4  # the split kernel's warps (sets the tile's register layout, so also part of the reduction order)
# programs per (row block, kv head); each takes every PROGRAMS-th split (no effect on bits). A lone decode row gets
# more (H200, 8k context: replay 3.95 -> 3.84 ms); for verify blocks 64 was slower (4.20 -> 4.29 ms at 8 rows).
# Session 30, 128 for a lone row (only graphs with more than 64 splits see it: the long graph past 3072 keys): 4B
# decode at 8k 3.247/3.243 -> 3.225/3.228 ms/token, at 4k 2.956/2.954 -> 2.953/2.949, the same tokens
# (p128_ab_h200_2026-12-02_session30.json)
PROGRAMS = 32
PROGRAMS_ONE_ROW = 128
# query rows (row x head of the kv group) per tile, the same for every call. NOTE: not smaller for a lone decode
# row: the softmax row sums reduce over the keys in an order set by the tile's register layout, so a smaller
# tile changed decode rows' bits against verify rows' (142 differing tokens in the H200 spec == plain test)
QUERY_TILE = 64
# three split schedules with the same operations, all off: 4B decode replay, 1 row at 1k / 8k, base 2.657 / 3.313 ms
# (load_schedules_ab_h200_2026-12-01_session20.json; the 1k row replays the short graph, engine/graphs.SHORT_BOUNDS)
# - programs with no key to reduce end at once instead of waiting for the previous kernel: 2.662 / 3.498
SPLIT_DEAD_EXIT = False
# - a step's values loaded together with its keys (the compiled kernel otherwise issues the values' loads only after
#   the keys have arrived and been staged for the first dot, PTX for sm_90): 2.668 / 3.317
SPLIT_KV_TOGETHER = False
# - the page ids of a program's first step loaded before its PDL wait: 2.769 / 3.498 (session 15: slower too)
SPLIT_PAGES_EARLY = False
SPLIT_STAGES = None  # the split kernel's software-pipeline stages (None: Triton's default)
# the split kernel's register cap per thread (None: ptxas's choice, 230 for sm_90 with 4 warps, so two programs per
# SM; 168 fits three with 112 bytes of stack spill, 128 four with 384). Registers never change an operation: the same
# bits. Staged (session 21, off): alone at 8k a lone row's split streams its 33.5 MB per layer at about 1.9 TB/s,
# 512 programs in about two waves (attention_alone_h200_2026-12-01_session21.json)
SPLIT_MAXNREG = None
# (session 16-17: a split's two steps of keys and values loaded before its first products, one memory round trip per
# 128-key split, was slower on the H200: 4B decode replay 2.78 -> 2.81 ms at 1k, 3.36 -> 3.54 at 8k; removed,
# combine_while_ab_h200_2026-11-30_session17.json, code in commit 8a05291)
# a layer's split kernel in Gluon with keys copied before the PDL wait (ops/gluon_split.py; the Triton kernel's
# bits: H200 tests pass). Off: 4B decode replay at 1k 2.70 -> 2.66 ms (with the q/k norm + RoPE kernel at PDL mode
# 3, so that the copies run during the qkv product), but 8-row verify 2.87 -> 2.92-2.96 and 8k 3.25 -> 3.43-3.60
# (rope3_ab_h200_2026-11-30_session16*.json). On only in the short graphs up to 2048 keys (engine/graphs.SHORT_BOUNDS,
# sessions 21 and 24). SPLIT_MAXNREG applies to the Triton split only.
GLUON_SPLIT = False
GLUON_PROGRAMS = 64  # the Gluon split's programs per (row block, kv head), each walking the splits p, p + 64, ...
GLUON_BLOCK_LAST = False  # its grid with the row blocks last: a graph's unused row blocks launch after the live ones
# where every split is a fine one (a window of at most FINE_END keys) the Gluon split's programs keep buffers for one
# 64-key step: 48 KB of shared memory instead of 80, so that more of the o product's programs (launched during the
# chain, filling their rings before their wait) are resident beside them. Same operations, same bits (H200 test
# passed). Set by the short graphs sized for their bound (engine/graphs.SHORT_BOUNDS and SHORT_SIZED; session 24: 1k
# 2.580 -> 2.572/2.577 ms/token sized, sized_ab_h200_2026-12-01_session24.json; under the 40k window it never engages).
GLUON_ONE_STEP = False
# the Gluon split stores its partial weighted values from the wgmma accumulator's registers, not after a layout
# conversion through shared memory (the same values; gluon_split._store_partials): 4B decode at 1k 2.498 -> 2.469-2.476
# ms/token, 8-row replay -1.1%, the same tokens (store_direct_ab_h200_2026-12-01_session28.json)
GLUON_STORE_DIRECT = True
# (measured, not kept) session 28's new-row merge with one barrier less (GLUON_LEAN_MERGE): 4B decode at 1k equal,
# 2.500/2.493 -> 2.503/2.492 ms/token (lean_merge_ab_h200_2026-12-01_session29.json; code in 427688a). Session 29: the
# Gluon split past the short graphs with each later split copied while the one before is reduced (GLUON_PIPE, two
# buffer sets, one program per SM; the Triton split's bits): 8k decode 3.265/3.260 -> 4.259/4.265 ms/token at 16
# programs per kv head, 4.114 at 32; unpipelined at 32 programs 3.586 (gluon_pipe_ab_h200_2026-12-01_session29.json;
# code in 45fdb03). A split's arithmetic, not its loads, bounds a program walking several splits. Session 30: the
# Gluon split in a swapped form for 1-2 rows (GLUON_SWAP: keys as wgmma's 64 rows, S^T [64 keys, 8 rows], the row sums
# in the 64-row tile's order; the same bits, an eighth of the products): 4B decode at 1k 2.502/2.499 -> 2.541/2.536
# ms/token (swap_ab_h200_2026-12-02_session30.json; code in c86fb9e). So not the arithmetic's size either. Session 31:
# the one-step split on one warp for at most 8 rows (GLUON_WARP1: mma.sync m16n8k16 on a 16-row tile, 36 KB, no
# warpgroup operations; the same bits): 1k decode 2.501/2.505 -> 2.605/2.603 ms/token
# (warp1_ab_h200_2026-12-02_session31.json; code in 0a9fa9a).
COMBINE_UNROLL = True  # the combine's chunk loops unrolled (same bits; its loads can all be issued at once): 4B decode
# replay 2.855 -> 2.840 ms at 1k, 3.465 -> 3.401 at 8k (attention_combine_unroll_ab_h200_2026-11-30.json)
# ... its first COMBINE_STATIC_CHUNKS chunks (CHUNK splits each: 16 until session 42, then 32); the rest loop, stopping at the row's own splits.
# Unrolling every chunk of a grid sized for Qwen3's own 40k window (the engine's default) made 4B decode 4.06
# ms/token at 1k and 4.58 at 8k, verify(8) 5.3 / 6.0 ms (2.76 / 3.43 with a window of ctx + 1024); 2 chunks: 2.85 /
# 3.44, 2.90 / 3.67 (0, 1, 4, 8: slower), and unchanged with the small window
# (combine_static_ab_h200_2026-11-30_session16.json)
COMBINE_STATIC_CHUNKS = 2
# the rest as a while loop ending at the row's own chunks rather than a loop over every chunk of the grid testing each
# (same operations: same bits). 4B decode with the 40k window, replay at 1k 2.78 -> 2.71-2.72 ms (2.70 with a window
# of ctx + 1024), at 8k 3.36 -> 3.34 (combine_while_ab_h200_2026-11-30_session17.json)
COMBINE_WHILE = True
# the unrolled chunks' loads issued together before the first reduction (same operations): 4B decode replay at 8k
# 3.313 -> 3.232 ms, 8 rows 3.611 -> 3.581; at 1k within 0.01 (load_schedules_ab_h200_2026-12-01_session20.json)
COMBINE_PRELOAD = True
# the combine's warps (one program per row and head): they set its reductions' order, and every row is combined by
# this kernel, so any count keeps a row's bits batch-independent
COMBINE_WARPS = 4


@triton.jit
def _split_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, len_ptr, lead_ptr, nrow_ptr, acc_ptr, ml_ptr, scale,
                  stride_qt, stride_qh, stride_ks, stride_kh, stride_bt, page_size, num_splits, num_heads, num_rows,
                  GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, ROWS: tl.constexpr, PASSES: tl.constexpr,
                  D: tl.constexpr,
                  D_PAD: tl.constexpr, SPLIT_N: tl.constexpr, FINE_N: tl.constexpr, FINE_SPLITS: tl.constexpr,
                  BLOCK: tl.constexpr, PROGRAMS: tl.constexpr, ITERS: tl.constexpr, PDL: tl.constexpr,
                  DEAD_EXIT: tl.constexpr, KV_TOGETHER: tl.constexpr, PAGES_EARLY: tl.constexpr, stamp_ptr,
                  STAMPS: tl.constexpr):
    stamp(stamp_ptr, 0, STAMPS)
    pdl_launch_early(PDL)
    kvh = tl.program_id(1)
    # NOTE: the row blocks are staged before the forward (never written by the previous kernel): read them while
    # it drains. (An L2 prefetch of the keys and values here was slower: l2_kv_prefetch_ab_h200_2026-11-30.json;
    # loading the first step's old keys into registers here much slower: attention_preload_early_onepass_ab_*)
    lead, n_rows, has_block, seq = row_block(lead_ptr, nrow_ptr, seq_ptr, num_rows)
    busy = True
    start0 = split_start(tl.program_id(2), SPLIT_N, FINE_N, FINE_SPLITS)
    if DEAD_EXIT or PAGES_EARLY:  # the block's kv lengths are staged too
        rr = tl.arange(0, _BLOCK_ROWS_P2)
        block_len = tl.max(tl.load(len_ptr + tl.maximum(lead, 0) + rr, mask=has_block & (rr < n_rows), other=0), 0)
    if DEAD_EXIT:  # a program none of whose splits holds a key reads nothing the previous kernel wrote: it ends at
        # once, without waiting (program (0, 0, 0) always waits, so that this grid never ends before the previous one)
        first = (tl.program_id(0) == 0) & (tl.program_id(1) == 0) & (tl.program_id(2) == 0)
        busy = (start0 < block_len) | first
    pages0 = tl.zeros([BLOCK], tl.int64)
    if PAGES_EARLY:  # the page ids of the program's first step (block tables are staged): one round trip before the
        # wait instead of after it (rows past a pass's own keys are masked when the keys are loaded)
        pos0 = start0 + tl.arange(0, BLOCK)
        pages0 = tl.load(bt_ptr + seq * stride_bt + pos0 // page_size, mask=has_block & (pos0 < block_len),
                         other=0).to(tl.int64)
    if busy:
        pdl_wait(PDL)
        stamp(stamp_ptr, 1, STAMPS)
        if has_block:
            # NOTE: a block of more than ROWS rows runs in further passes of ROWS rows (QUERY_TILE // GROUP_PAD)
            for pas in range(0, PASSES):
                row, head, live, lens, max_len, q, d, dm = query_tile(q_ptr, len_ptr, lead, n_rows, pas * ROWS, kvh,
                                                                      stride_qt, stride_qh, GROUP, GROUP_PAD, ROWS, D,
                                                                      D_PAD)
                if STAMPS:  # column 4: the rows' kv lengths have arrived (the query tile is loaded beside them)
                    stamp_after(stamp_ptr, 4, max_len, pas == 0, STAMPS)
                # NOTE: a fixed number of programs per (block, kv head) walk the splits p, p + PROGRAMS, ...: the
                # grid stays small when a graph sizes it for the longest context; each split is reduced on its own
                for j in range(0, ITERS):
                    split = tl.program_id(2) + j * PROGRAMS
                    start = split_start(split, SPLIT_N, FINE_N, FINE_SPLITS)
                    if start < max_len:
                        steps = tl.where(split < FINE_SPLITS, FINE_N // BLOCK, SPLIT_N // BLOCK)
                        _split_body(q, lens, row, head, live, k_ptr, v_ptr, bt_ptr, acc_ptr, ml_ptr, scale, stride_ks,
                                    stride_kh, stride_bt, page_size, num_splits, num_heads, kvh, seq, max_len, split,
                                    start, steps, d, dm, ROWS * GROUP_PAD, D, D_PAD, BLOCK, SPLIT_N // BLOCK,
                                    KV_TOGETHER, PAGES_EARLY, pages0, (pas == 0) & (j == 0), stamp_ptr, STAMPS)
    if STAMPS:  # column 3: does the program's first split hold a key of the block's first row
        stamp_value(stamp_ptr, split_start(tl.program_id(2), SPLIT_N, FINE_N, FINE_SPLITS)
                    < tl.load(len_ptr + tl.maximum(lead, 0)), STAMPS)
    stamp(stamp_ptr, 2, STAMPS)
    pdl_release(PDL)


@triton.jit
def load_keys(k_ptr, v_ptr, bt_ptr, stride_ks, stride_kh, stride_bt, page_size, kvh, seq, pos, keep, d, dm):
    """Keys and values at positions pos (a step) of one sequence for kv head kvh, [BLOCK, D_PAD] each; rows where
    keep is false are zeros and read nothing."""
    page = tl.load(bt_ptr + seq * stride_bt + pos // page_size, mask=keep, other=0)
    return keys_at(k_ptr, v_ptr, stride_ks, stride_kh, page_size, kvh, page, pos, keep, d, dm)


@triton.jit
def keys_at(k_ptr, v_ptr, stride_ks, stride_kh, page_size, kvh, page, pos, keep, d, dm):
    """load_keys with the positions' page ids already loaded."""
    slot = page.to(tl.int64) * page_size + pos % page_size
    kv_mask = keep[:, None] & dm[None, :]
    k = tl.load(k_ptr + slot[:, None] * stride_ks + kvh * stride_kh + d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + slot[:, None] * stride_ks + kvh * stride_kh + d[None, :], mask=kv_mask, other=0.0)
    return k, v


@triton.jit
def split_start(split, SPLIT_N: tl.constexpr, FINE_N: tl.constexpr, FINE_SPLITS: tl.constexpr):
    """The first key of a split: FINE_SPLITS splits of FINE_N keys, then splits of SPLIT_N keys."""
    return tl.where(split < FINE_SPLITS, split * FINE_N, FINE_SPLITS * FINE_N + (split - FINE_SPLITS) * SPLIT_N)


@triton.jit
def splits_covering(length, SPLIT_N: tl.constexpr, FINE_N: tl.constexpr, FINE_SPLITS: tl.constexpr):
    """How many splits hold keys 0 .. length - 1 (num_splits on the device)."""
    fine = FINE_SPLITS * FINE_N
    return tl.where(length <= fine, tl.cdiv(length, FINE_N), FINE_SPLITS + tl.cdiv(length - fine, SPLIT_N))


def num_splits(length: int) -> int:
    """Splits holding keys 0 .. length - 1: FINE_SPLIT-key splits below FINE_END, then SPLIT-key splits."""
    fine = min(length, FINE_END)
    return triton.cdiv(fine, FINE_SPLIT) + triton.cdiv(max(length - FINE_END, 0), SPLIT)


@triton.jit
def row_block(lead_ptr, nrow_ptr, seq_ptr, num_rows):
    """This program's row block: (first row, rows, whether there is one, its sequence's block-table row). Blocks
    are clipped to the call's num_rows: a graph of a small tier reads a prefix of the blocks staged for a larger
    one (lead -1: none). All staged before the forward: safe to read before the PDL wait."""
    lead = tl.load(lead_ptr + tl.program_id(0))
    n_rows = tl.minimum(tl.load(nrow_ptr + tl.program_id(0)), num_rows - lead)
    return lead, n_rows, (lead >= 0) & (lead < num_rows), tl.load(seq_ptr + tl.maximum(lead, 0))


@triton.jit
def query_tile(q_ptr, len_ptr, lead, n_rows, r0, kvh, stride_qt, stride_qh, GROUP: tl.constexpr,
               GROUP_PAD: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr):
    """Query rows r0 .. r0 + ROWS - 1 of the block at `lead` (n_rows rows) for kv head kvh: tile row i is
    (row r0 + i // GROUP_PAD, head kvh * GROUP + i % GROUP_PAD). -> rows, heads, live mask, kv lens,
    their max (0 past the block's rows: nothing to do), the queries [ROWS * GROUP_PAD, D_PAD], d, d mask."""
    i = tl.arange(0, ROWS * GROUP_PAD)
    d = tl.arange(0, D_PAD)
    dm = d < D
    head = kvh * GROUP + i % GROUP_PAD
    row = lead + r0 + i // GROUP_PAD
    live = (r0 + i // GROUP_PAD < n_rows) & (i % GROUP_PAD < GROUP)
    lens = tl.load(len_ptr + row, mask=live, other=0)
    q = tl.load(q_ptr + row[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=live[:, None] & dm[None, :], other=0.0)
    return row, head, live, lens, tl.max(lens, 0), q, d, dm


@triton.jit
def _split_body(q, lens, row, head, live, k_ptr, v_ptr, bt_ptr, acc_ptr, ml_ptr, scale, stride_ks, stride_kh,
                stride_bt, page_size, num_splits, num_heads, kvh, seq, max_len, split, start, steps, d, dm,
                QR: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK: tl.constexpr, MAX_STEPS: tl.constexpr,
                KV_TOGETHER: tl.constexpr, PAGES_EARLY: tl.constexpr, pages0, early, stamp_ptr, STAMPS: tl.constexpr):
    """One split for the query rows of a block: partial softmax state (max, sum, weighted values) to the
    workspace. STAMPS: the program's first step stamps its page ids, keys and values, and products (columns 5-7)."""
    m_i = tl.full([QR], float("-inf"), tl.float32)
    l_i = tl.zeros([QR], tl.float32)
    acc = tl.zeros([QR, D_PAD], tl.float32)
    for i in range(0, MAX_STEPS):  # NOTE: a fine split stops early (a runtime bound: not in the interpreter)
        if i < steps:
            pos = start + i * BLOCK + tl.arange(0, BLOCK)
            if PAGES_EARLY:  # the first step's page ids may have been loaded before the wait (early)
                keep = pos < max_len
                use0 = early & (i == 0)
                page = tl.where(use0, pages0, tl.load(bt_ptr + seq * stride_bt + pos // page_size,
                                                      mask=keep & (use0 == 0), other=0).to(tl.int64))
                k, v = keys_at(k_ptr, v_ptr, stride_ks, stride_kh, page_size, kvh, page, pos, keep, d, dm)
            elif STAMPS:  # load_keys, with the page ids' arrival stamped (a reduction each stamp adds)
                keep = pos < max_len
                page = tl.load(bt_ptr + seq * stride_bt + pos // page_size, mask=keep, other=0)
                stamp_after(stamp_ptr, 5, tl.max(page, 0), early & (i == 0), STAMPS)
                k, v = keys_at(k_ptr, v_ptr, stride_ks, stride_kh, page_size, kvh, page, pos, keep, d, dm)
                kv_max = tl.max(tl.max(k.to(tl.float32) + v.to(tl.float32), 1), 0)
                stamp_after(stamp_ptr, 6, kv_max, early & (i == 0), STAMPS)
            else:
                k, v = load_keys(k_ptr, v_ptr, bt_ptr, stride_ks, stride_kh, stride_bt, page_size, kvh, seq, pos,
                                 pos < max_len, d, dm)
            if KV_TOGETHER:  # a select that needs both (and always picks k): the values' loads are issued before the
                # keys are staged in shared memory for the first dot, not after (one memory round trip, not two)
                k = tl.where(max_len < 0, v, k)
            m_i, l_i, acc = attend_step(q, lens, m_i, l_i, acc, k, v, pos, scale)
            if STAMPS:
                stamp_after(stamp_ptr, 7, tl.max(tl.max(acc, 1), 0), early & (i == 0), STAMPS)
    base = (row.to(tl.int64) * num_heads + head) * num_splits + split  # int64: large workspaces
    tl.store(acc_ptr + base[:, None] * D + d[None, :], acc, mask=live[:, None] & dm[None, :])
    tl.store(ml_ptr + base * 2, m_i, mask=live)
    tl.store(ml_ptr + base * 2 + 1, l_i, mask=live)


@triton.jit
def attend_step(q, lens, m_i, l_i, acc, k, v, pos, scale):
    """Online softmax over one step of keys k, values v [BLOCK, D_PAD] at positions pos for a tile of query rows
    -> new (max, sum, weighted values). Each query row masks the keys past its own kv_len (lens); its arithmetic
    is the same whatever the other rows of the tile are (a fully masked step leaves its state bit-for-bit
    unchanged)."""
    s = tl.dot(q, tl.trans(k)).to(tl.float32) * scale  # [QR, BLOCK]
    s = tl.where(pos[None, :] < lens[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet stays finite (never read)
    alpha = tl.exp(m_i - m_use)
    p = tl.exp(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
    return m_new, l_i, acc


@triton.jit
def _combine_kernel(acc_ptr, ml_ptr, len_ptr, out_ptr, stride_ot, stride_oh, num_heads, num_splits,
                    SPLIT_N: tl.constexpr, FINE_N: tl.constexpr, FINE_SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                    CHUNKS: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, STATIC: tl.constexpr,
                    WHILE: tl.constexpr, PRELOAD: tl.constexpr, PDL: tl.constexpr, stamp_ptr,
                    STAMPS: tl.constexpr):
    stamp(stamp_ptr, 0, STAMPS)
    pdl_launch_early(PDL)
    row = tl.program_id(0)
    h = tl.program_id(1)
    # staged before the forward: read before the wait
    used = splits_covering(tl.load(len_ptr + row), SPLIT_N, FINE_N, FINE_SPLITS)
    pdl_wait(PDL)
    stamp(stamp_ptr, 1, STAMPS)
    sp = tl.arange(0, CHUNK)
    d = tl.arange(0, D_PAD)
    dm = d < D
    base = (row.to(tl.int64) * num_heads + h) * num_splits
    out = _combine_splits(acc_ptr, ml_ptr, base, used, sp, d, dm, CHUNK, CHUNKS, D, D_PAD, STATIC, WHILE, PRELOAD)
    tl.store(out_ptr + row * stride_ot + h * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=dm)
    stamp(stamp_ptr, 2, STAMPS)


@triton.jit
def _combine_splits(acc_ptr, ml_ptr, base, used, sp, d, dm, CHUNK: tl.constexpr, CHUNKS: tl.constexpr,
                    D: tl.constexpr, D_PAD: tl.constexpr, STATIC: tl.constexpr, WHILE: tl.constexpr,
                    PRELOAD: tl.constexpr = False):
    """The splits' maximum first, then the weighted sums. (A one-pass form rescaling as the maximum grows was no
    faster: attention_preload_early_onepass_ab_h200_2026-11-30.json)
    NOTE: fixed-size chunks of splits, summed chunk after chunk; a chunk past the row's own splits leaves the sums
    untouched: the order and the operations depend on nothing but the row itself (not on how many splits the grid
    was sized for). The first STATIC chunks are unrolled, so that the compiler can issue their loads at once instead
    of one memory round trip per chunk; the rest loop, each stopping at once past the row's splits (same bits).
    PRELOAD (STATIC 1 or 2): those chunks' maxima, sums and values all loaded before the first reduction; compiled
    as above, a chunk's values are loaded only after the maxima's reduction and the chunk before it (its barriers)."""
    n_chunks = tl.cdiv(used, CHUNK)
    m = tl.full([CHUNK], float("-inf"), tl.float32)
    if PRELOAD:
        m0, l0, p0 = _chunk_loads(acc_ptr, ml_ptr, base, used, sp, d, dm, 0, CHUNK, D)
        m = tl.maximum(m, m0)
        if STATIC > 1:
            m1, l1, p1 = _chunk_loads(acc_ptr, ml_ptr, base, used, sp, d, dm, 1, CHUNK, D)
            m = tl.maximum(m, m1)
    else:
        for c in tl.static_range(STATIC):
            m = tl.maximum(m, _chunk_max(ml_ptr, base, used, sp, c, CHUNK))
    last = tl.minimum(n_chunks, CHUNKS)  # (n_chunks <= CHUNKS whenever row_kv_len <= max_kv_len, as callers vouch)
    if WHILE:  # the loop ends at the row's own chunks (no dead iterations in a grid sized for a long window)
        c = STATIC
        while c < last:
            m = tl.maximum(m, _chunk_max(ml_ptr, base, used, sp, c, CHUNK))
            c += 1
    else:
        for c in range(STATIC, CHUNKS):
            if c < n_chunks:
                m = tl.maximum(m, _chunk_max(ml_ptr, base, used, sp, c, CHUNK))
    m_max = tl.max(m, 0)
    total = tl.zeros([1], tl.float32)
    acc = tl.zeros([D_PAD], tl.float32)
    if PRELOAD:
        total, acc = _chunk_add(m0, l0, p0, used, sp, 0, m_max, total, acc, CHUNK)
        if STATIC > 1:
            total, acc = _chunk_add(m1, l1, p1, used, sp, 1, m_max, total, acc, CHUNK)
    else:
        for c in tl.static_range(STATIC):
            total, acc = _chunk_fold(acc_ptr, ml_ptr, base, used, sp, d, dm, c, m_max, total, acc, CHUNK, D)
    if WHILE:
        c = STATIC
        while c < last:
            total, acc = _chunk_fold(acc_ptr, ml_ptr, base, used, sp, d, dm, c, m_max, total, acc, CHUNK, D)
            c += 1
    else:
        for c in range(STATIC, CHUNKS):
            if c < n_chunks:
                total, acc = _chunk_fold(acc_ptr, ml_ptr, base, used, sp, d, dm, c, m_max, total, acc, CHUNK, D)
    return acc / total


@triton.jit
def _chunk_max(ml_ptr, base, used, sp, c, CHUNK: tl.constexpr):
    """The maxima of chunk c's splits (-inf past the used ones)."""
    live = c * CHUNK + sp < used
    return tl.load(ml_ptr + (base + c * CHUNK + sp) * 2, mask=live, other=float("-inf"))


@triton.jit
def _chunk_fold(acc_ptr, ml_ptr, base, used, sp, d, dm, c, m_max, total, acc, CHUNK: tl.constexpr, D: tl.constexpr):
    """Chunk c's splits added to the running (sum of weights [1], weighted values); a chunk past the used splits
    leaves both exactly as they were. (_chunk_loads + _chunk_add do the same operations for COMBINE_PRELOAD; this
    form is kept as it was, so that the shipped kernel compiles exactly as measured.)"""
    idx = base + c * CHUNK + sp
    live = c * CHUNK + sp < used
    w = tl.where(live, tl.exp(tl.load(ml_ptr + idx * 2, mask=live, other=float("-inf")) - m_max), 0.0)
    parts = tl.load(acc_ptr + idx[:, None] * D + d[None, :], mask=live[:, None] & dm[None, :], other=0.0)
    keep = c * CHUNK < used
    total = tl.where(keep, total + tl.sum(w * tl.load(ml_ptr + idx * 2 + 1, mask=live, other=0.0), 0), total)
    return total, tl.where(keep, acc + tl.sum(parts * w[:, None], 0), acc)


@triton.jit
def _chunk_loads(acc_ptr, ml_ptr, base, used, sp, d, dm, c, CHUNK: tl.constexpr, D: tl.constexpr):
    """Chunk c's split maxima (-inf past the used ones), sums and weighted values [CHUNK, D_PAD]."""
    idx = base + c * CHUNK + sp
    live = c * CHUNK + sp < used
    mc = tl.load(ml_ptr + idx * 2, mask=live, other=float("-inf"))
    parts = tl.load(acc_ptr + idx[:, None] * D + d[None, :], mask=live[:, None] & dm[None, :], other=0.0)
    return mc, tl.load(ml_ptr + idx * 2 + 1, mask=live, other=0.0), parts


@triton.jit
def _chunk_add(mc, lc, parts, used, sp, c, m_max, total, acc, CHUNK: tl.constexpr):
    """_chunk_fold's sums from chunk c's loaded maxima, sums and values."""
    live = c * CHUNK + sp < used
    w = tl.where(live, tl.exp(mc - m_max), 0.0)
    keep = c * CHUNK < used
    total = tl.where(keep, total + tl.sum(w * lc, 0), total)
    return total, tl.where(keep, acc + tl.sum(parts * w[:, None], 0), acc)


WORKSPACE_BYTES = 1 << 29  # eager calls whose split workspace would exceed this run in row ranges


def triton_paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                           row_seq: torch.Tensor, row_kv_len: torch.Tensor, page_size: int, max_kv_len: int,
                           scale: float, row_kv_len_host: list[int] | None = None,
                           blocks: tuple[torch.Tensor, torch.Tensor] | None = None,
                           blocks_host: list[tuple[int, int]] | None = None,
                           out: torch.Tensor | None = None,
                           first_written: torch.Tensor | None = None) -> torch.Tensor:
    """q [T, Hq, D]; caches [slots, Hkv, D]; block_tables [S, P]; row_seq, row_kv_len [T] -> [T, Hq, D].
    blocks = (lead [G], rows [G]) int32: row blocks (consecutive rows of one sequence, engine/context.py) whose
    key/value loads are shared, one per program row (lead -1: none); None: every row alone.
    row_kv_len_host, blocks_host (eager calls): the same on the host; a long prefill chunk then runs in row
    ranges on block boundaries whose workspace stays under WORKSPACE_BYTES (the same bits: rows never
    depend on each other). out: where to write (a fresh tensor if None). first_written [T] int64 (staged before
    the forward): each row's own position, where the caller vouches that the forward writes no key of a row's
    sequence but its rows' own (a layer's attention); given, the Gluon split kernel (GLUON_SPLIT) copies the keys
    before a block's first row before its PDL wait."""
    t, hq, d = q.shape
    out = torch.empty_like(q) if out is None else out
    if blocks is None:
        ones = torch.ones(t, dtype=torch.int32, device=q.device)
        blocks = (torch.arange(t, dtype=torch.int32, device=q.device), ones)
        blocks_host = blocks_host or [(r, 1) for r in range(t)]
    per_row = hq * num_splits(max_kv_len) * (d + 2) * 4
    if row_kv_len_host is None or blocks_host is None or t * per_row <= WORKSPACE_BYTES:
        _attend(q, k_cache, v_cache, block_tables, row_seq, row_kv_len, page_size, max_kv_len, scale, out, blocks,
                first_written)
        return out
    for group in _block_ranges(blocks_host, max(BLOCK_ROWS, WORKSPACE_BYTES // per_row)):
        r0, r1 = group[0][0], group[-1][0] + group[-1][1]
        lead = torch.tensor([a - r0 for a, _ in group], dtype=torch.int32).to(q.device, non_blocking=True)
        rows = torch.tensor([n for _, n in group], dtype=torch.int32).to(q.device, non_blocking=True)
        _attend(q[r0:r1], k_cache, v_cache, block_tables, row_seq[r0:r1], row_kv_len[r0:r1], page_size,
                max(row_kv_len_host[r0:r1]), scale, out[r0:r1], (lead, rows),
                None if first_written is None else first_written[r0:r1])
    return out


def _block_ranges(blocks: list[tuple[int, int]], max_rows: int) -> list[list[tuple[int, int]]]:
    """Consecutive row blocks grouped into runs of at most max_rows rows (a block is never cut)."""
    groups, cur, n = [], [], 0
    for blk in blocks:
        if cur and n + blk[1] > max_rows:
            groups.append(cur)
            cur, n = [], 0
        cur.append(blk)
        n += blk[1]
    return groups + ([cur] if cur else [])


def split_layout(t: int, max_kv_len: int) -> tuple[dict, int, int, int]:
    """Splits for rows seeing at most max_kv_len keys -> (the FINE constexprs, splits, programs per (row block,
    kv head), ITERS: the splits each program walks)."""
    # a split runs at most SPLIT // SPLIT_BLOCK_N steps: a larger fine split would drop keys
    assert FINE_END % FINE_SPLIT == 0 and FINE_SPLIT % SPLIT_BLOCK_N == 0 and SPLIT % SPLIT_BLOCK_N == 0
    assert FINE_END == 0 or FINE_SPLIT <= SPLIT
    splits = num_splits(max_kv_len)
    fine = dict(SPLIT_N=SPLIT, FINE_N=FINE_SPLIT, FINE_SPLITS=FINE_END // FINE_SPLIT)
    # NOTE: loop bounds are compile-time constants, rounded up to powers of two so that a growing context
    # compiles a handful of variants, not one per split count (extra iterations find no keys and skip)
    splits_pow2 = triton.next_power_of_2(splits)
    programs = min(splits_pow2, PROGRAMS_ONE_ROW if t == 1 else PROGRAMS)
    return fine, splits, programs, splits_pow2 // programs


def combine(acc: torch.Tensor, ml: torch.Tensor, row_kv_len: torch.Tensor, out: torch.Tensor, splits: int,
            fine: dict) -> None:
    """The splits' partials (acc, ml) of every row and head, reduced in a fixed order -> out [T, Hq, D]."""
    t, hq, d = out.shape
    chunks = triton.next_power_of_2(triton.cdiv(splits, CHUNK))  # (a power of two: few compiled variants)
    static = min(chunks, COMBINE_STATIC_CHUNKS) if COMBINE_UNROLL else 0
    _combine_kernel[(t, hq)](acc, ml, row_kv_len, out, out.stride(0), out.stride(1), hq, splits, **fine,
                             CHUNK=CHUNK, CHUNKS=chunks, D=d, D_PAD=max(16, triton.next_power_of_2(d)),
                             STATIC=static, WHILE=COMBINE_WHILE, PRELOAD=COMBINE_PRELOAD and 1 <= static <= 2,
                             num_warps=COMBINE_WARPS, **pdl_args("combine"), **stamps.args("combine", acc))


def _attend(q, k_cache, v_cache, block_tables, row_seq, row_kv_len, page_size: int, max_kv_len: int, scale: float,
            out: torch.Tensor, blocks: tuple[torch.Tensor, torch.Tensor], first_written=None) -> None:
    t, hq, d = q.shape
    hkv = k_cache.shape[1]
    group = hq // hkv
    group_pad = triton.next_power_of_2(group)
    fine, splits, programs, iters = split_layout(t, max_kv_len)
    acc = torch.empty(t * hq * splits * d, dtype=torch.float32, device=q.device)
    ml = torch.empty(t * hq * splits * 2, dtype=torch.float32, device=q.device)
    lead, rows = blocks
    rows_per_pass = max(1, QUERY_TILE // group_pad)
    passes = triton.cdiv(BLOCK_ROWS, rows_per_pass)
    if (GLUON_SPLIT and first_written is not None and SPLIT_BLOCK_N == gluon_split.BLOCK and SPLIT_WARPS == 4
            and SPLIT == gluon_split.BLOCK * gluon_split.MAX_STEPS and FINE_SPLIT == gluon_split.BLOCK
            and gluon_split.supports(q, k_cache, v_cache, group_pad, rows_per_pass, passes)):
        g_programs = min(programs * iters, GLUON_PROGRAMS)  # (programs * iters: the splits, rounded to a power of 2)
        grid = (g_programs, hkv, lead.shape[0]) if GLUON_BLOCK_LAST else (lead.shape[0], hkv, g_programs)
        gluon_split._gluon_split_kernel[grid](
            q, k_cache, v_cache, block_tables, row_seq, row_kv_len, lead, rows, acc, ml, first_written, scale,
            q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), block_tables.stride(0), page_size, splits,
            hq, t, GROUP=group, GROUP_PAD=group_pad, **fine, PROGRAMS=g_programs,
            ITERS=triton.cdiv(programs * iters, g_programs), BLOCK_LAST=GLUON_BLOCK_LAST,
            STEPS=1 if GLUON_ONE_STEP and max_kv_len <= FINE_END else gluon_split.MAX_STEPS,
            STORE_DIRECT=GLUON_STORE_DIRECT, num_warps=4, **pdl_args("split"))
    else:
        _split_kernel[(lead.shape[0], hkv, programs)](
            q, k_cache, v_cache, block_tables, row_seq, row_kv_len, lead, rows, acc, ml, scale, q.stride(0),
            q.stride(1), k_cache.stride(0), k_cache.stride(1), block_tables.stride(0), page_size, splits, hq, t,
            GROUP=group, GROUP_PAD=group_pad, ROWS=rows_per_pass, PASSES=passes, D=d,
            D_PAD=max(16, triton.next_power_of_2(d)), **fine, BLOCK=SPLIT_BLOCK_N, PROGRAMS=programs,
            ITERS=iters, DEAD_EXIT=SPLIT_DEAD_EXIT, KV_TOGETHER=SPLIT_KV_TOGETHER, PAGES_EARLY=SPLIT_PAGES_EARLY,
            num_warps=SPLIT_WARPS,
            **({} if SPLIT_STAGES is None else {"num_stages": SPLIT_STAGES}),
            **({} if SPLIT_MAXNREG is None else {"maxnreg": SPLIT_MAXNREG}), **pdl_args("split"),
            **stamps.args("split", acc))
    combine(acc, ml, row_kv_len, out, splits, fine)
