"""Hopper (sm_90) attention split kernel in Gluon: triton_attention's split kernel with its keys and values copied to
shared memory before the PDL wait (triton_attention.GLUON_SPLIT: on only in the lone row's short graph up to 1280
keys, engine/graphs.SHORT_BOUNDS; measured in sessions 16 and 21, see there).

The Triton split kernel loads a split's keys and values only after its wait, so every decode layer pays an HBM round
trip after the q/k norm + RoPE kernel ends. Here each program starts cp.async copies of its split's keys and values
(their page ids and kv lengths are staged before the forward) before it waits, and after the wait loads over them
only the rows the forward itself wrote: positions from the block's first row's position on, which the RoPE kernel
(the one kernel still running at launch) just stored. The caller passes those positions (first_written); a layer's
own keys are the only keys of the sequence its forward writes. A block that continues a sequence's rows (more than
BLOCK_ROWS of them in the forward) copies nothing before the wait.

The arithmetic is the Triton kernel's, written out with the layouts Triton chose for it on sm_90 (its TTGIR): q and
keys in shared memory, S = q K^T by wgmma m64n64k16, the online softmax in that accumulator's layout, P from registers
into wgmma m64n128k16 accumulating onto acc * alpha. So a row's partials are the Triton kernel's bits
(tests/test_gpu.py, passed on the H200). A program's first split is copied before the wait; its later ones (split +
PROGRAMS, ...) after it, one after another. Compiled for sm_90 in CPU CI.

WARP1 (triton_attention.GLUON_WARP1, staged, off): the one-step form for calls of at most CR rows on one warp, a
16-row tile and mma.sync m16n8k16 (_attend_warp): each row gets the lanes and registers that one warp of the 64-row
wgmma tile gives it, so the same reductions in the same order; no warpgroup operations, proxy fences or CTA-wide
barriers; the operands chunked by 32 head dims, and the forward's new rows merged in two CR-row chunks, so that one
warp's registers hold them.
"""
from __future__ import annotations

import triton

try:  # the same gate as ops/gluon_gemv.py: only the triton version checked on the H200 runs Gluon
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    AVAILABLE = triton.__version__.startswith("3.6")
except ImportError:  # pragma: no cover - depends on the installed triton
    AVAILABLE = False

QR = 64  # query rows per tile (rows x heads of the kv group): the Triton kernel's QUERY_TILE
D = 128  # head dim
BLOCK = 64  # keys per step: triton_attention.SPLIT_BLOCK_N
MAX_STEPS = 2  # steps of the longest split (SPLIT // BLOCK; the loads after the wait are written out for 2)
QR1 = 16  # query rows per tile in the one-warp form (WARP1: one mma.sync tile of rows, the 64-row tile's per-warp rows)
CR = 8  # rows the one-warp form loads after its wait: at most CR rows a forward writes in a split (calls of <= CR rows)
DC = 32  # head dims per operand chunk in the one-warp form (its registers hold a [DC, BLOCK] key chunk at a time)

if AVAILABLE:
    _QR, _D, _BLOCK, _MAX_STEPS, _QR1, _DC, _CR = (gl.constexpr(v) for v in (QR, D, BLOCK, MAX_STEPS, QR1, DC, CR))

    @gluon.jit
    def _split_start(split, SPLIT_N: gl.constexpr, FINE_N: gl.constexpr, FINE_SPLITS: gl.constexpr):
        """The first key of a split (triton_attention.split_start)."""
        return gl.where(split < FINE_SPLITS, split * FINE_N,
                        FINE_SPLITS * FINE_N + (split - FINE_SPLITS) * SPLIT_N)

    @gluon.jit
    def _slots(bt_ptr, seq, pos, keep, stride_bt, page_size):
        """Cache slots [BLOCK] of positions pos of one sequence (0 where keep is false). Block tables are staged
        before the forward: safe to read before the PDL wait."""
        page = gl.load(bt_ptr + seq * stride_bt + pos // page_size, mask=keep, other=0)
        return page.to(gl.int64) * page_size + pos % page_size

    @gluon.jit
    def _slot_offsets(slot, kvh, stride_ks, stride_kh, LD: gl.constexpr):
        """Element offsets [BLOCK, D] of kv head kvh's keys (and values) at cache slots slot [BLOCK]."""
        d = gl.arange(0, _D, layout=gl.SliceLayout(0, LD))
        return slot[:, None] * stride_ks + kvh * stride_kh + d[None, :]

    @gluon.jit
    def _kv_offsets(bt_ptr, seq, pos, keep, kvh, stride_ks, stride_kh, stride_bt, page_size, LD: gl.constexpr):
        """Element offsets [BLOCK, D] of kv head kvh's keys (and values) at positions pos of one sequence."""
        return _slot_offsets(_slots(bt_ptr, seq, pos, keep, stride_bt, page_size), kvh, stride_ks, stride_kh, LD)

    @gluon.jit
    def _copy_keys(k_ptr, v_ptr, bt_ptr, k_dst, v_dst, seq, pos, keep, kvh, stride_ks, stride_kh, stride_bt,
                   page_size, LD: gl.constexpr):
        """cp.async of the keys and values at positions pos [BLOCK] (rows where keep is false become zeros)."""
        off = _kv_offsets(bt_ptr, seq, pos, keep, kvh, stride_ks, stride_kh, stride_bt, page_size, LD)
        async_copy.async_copy_global_to_shared(k_dst, k_ptr + off, mask=keep[:, None])
        async_copy.async_copy_global_to_shared(v_dst, v_ptr + off, mask=keep[:, None])

    @gluon.jit
    def _load_new(k_ptr, v_ptr, slot, new, kvh, stride_ks, stride_kh, LD: gl.constexpr):
        """The rows the forward wrote (new) at cache slots slot [BLOCK], into registers (zeros elsewhere)."""
        off = _slot_offsets(slot, kvh, stride_ks, stride_kh, LD)
        return (gl.load(k_ptr + off, mask=new[:, None], other=0.0),
                gl.load(v_ptr + off, mask=new[:, None], other=0.0))

    @gluon.jit
    def _store_over(k_dst, v_dst, k_new, v_new, new, LD: gl.constexpr):
        """The new rows written over the copies made before the wait (the copies already landed)."""
        k_dst.store(gl.where(new[:, None], k_new, k_dst.load(LD)))
        v_dst.store(gl.where(new[:, None], v_new, v_dst.load(LD)))

    @gluon.jit
    def _gluon_split_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, len_ptr, lead_ptr, nrow_ptr, acc_ptr, ml_ptr,
                            first_ptr, scale, stride_qt, stride_qh, stride_ks, stride_kh, stride_bt, page_size,
                            num_splits, num_heads, num_rows, GROUP: gl.constexpr, GROUP_PAD: gl.constexpr,
                            SPLIT_N: gl.constexpr, FINE_N: gl.constexpr, FINE_SPLITS: gl.constexpr,
                            PROGRAMS: gl.constexpr, ITERS: gl.constexpr, BLOCK_LAST: gl.constexpr,
                            PDL: gl.constexpr, STEPS: gl.constexpr = _MAX_STEPS,
                            STORE_DIRECT: gl.constexpr = False, WARP1: gl.constexpr = False):
        # WARP1: one warp, a 16-row tile and mma.sync (m16n8k16), whose accumulator gives each row the lanes and
        # registers one warp of the 64-row wgmma tile gives it: the same reductions in the same order (launch with
        # num_warps=1; the one-step form only, STEPS 1; a program may walk later splits, ITERS > 1)
        LD: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [1 if WARP1 else 4, 1], [1, 0])  # [rows, D] bf16, 16 B
        if WARP1:
            S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
            O_L: gl.constexpr = S_L
        else:
            S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, _BLOCK, 16])
            O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, _D, 16])
        P_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)
        TILE: gl.constexpr = _QR1 if WARP1 else _QR
        if PDL == 3:  # the next kernel may launch at once (its own wait still waits for this whole grid)
            gdc_launch_dependents()
        kvh = gl.program_id(1)
        if BLOCK_LAST:  # grid (programs, kv heads, row blocks): a graph's unused row blocks launch after the live ones
            blk = gl.program_id(2)
            split = gl.program_id(0)  # the first of the splits split, split + PROGRAMS, ... this program reduces
        else:  # grid (row blocks, kv heads, programs)
            blk = gl.program_id(0)
            split = gl.program_id(2)
        # the row block, its rows' kv lengths and positions: all staged before the forward
        lead = gl.load(lead_ptr + blk)
        n_rows = gl.minimum(gl.load(nrow_ptr + blk), num_rows - lead)
        has_block = (lead >= 0) & (lead < num_rows)
        seq = gl.load(seq_ptr + gl.maximum(lead, 0))
        si = gl.arange(0, TILE, layout=gl.SliceLayout(1, S_L))  # the softmax's rows, in the S accumulator's layout
        s_live = (si // GROUP_PAD < n_rows) & (si % GROUP_PAD < GROUP) & has_block
        lens = gl.load(len_ptr + lead + si // GROUP_PAD, mask=s_live, other=0)
        max_len = gl.max(lens, 0)
        start0 = _split_start(split, SPLIT_N, FINE_N, FINE_SPLITS)
        # a program whose first split holds no key (so no later one does) exits at once: it reads nothing the
        # previous kernel writes (program (0, 0, 0) always waits, so that this grid never ends before the previous one)
        if (start0 < max_len) | ((blk == 0) & (kvh == 0) & (split == 0)):
            _split_program(q_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, acc_ptr, ml_ptr, first_ptr, scale, stride_qt,
                           stride_qh, stride_ks, stride_kh, stride_bt, page_size, num_splits, num_heads, lead,
                           n_rows, has_block, seq, lens, max_len, kvh, split, start0, GROUP, GROUP_PAD, SPLIT_N,
                           FINE_N, FINE_SPLITS, PROGRAMS, ITERS, PDL, LD, S_L, O_L, P_L, STEPS, STORE_DIRECT, WARP1,
                           TILE)

    @gluon.jit
    def _split_program(q_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, acc_ptr, ml_ptr, first_ptr, scale, stride_qt,
                       stride_qh, stride_ks, stride_kh, stride_bt, page_size, num_splits, num_heads, lead, n_rows,
                       has_block, seq, lens, max_len, kvh, split, start0, GROUP: gl.constexpr,
                       GROUP_PAD: gl.constexpr, SPLIT_N: gl.constexpr, FINE_N: gl.constexpr,
                       FINE_SPLITS: gl.constexpr, PROGRAMS: gl.constexpr, ITERS: gl.constexpr, PDL: gl.constexpr,
                       LD: gl.constexpr, S_L: gl.constexpr, O_L: gl.constexpr, P_L: gl.constexpr,
                       STEPS: gl.constexpr, STORE_DIRECT: gl.constexpr, WARP1: gl.constexpr, TILE: gl.constexpr):
        """The splits of one row block this program reduces: the first one's old keys copied before the wait, the rest
        after it; the later splits (split + PROGRAMS, ...) copied and reduced one after another. 80 KB of shared
        memory (96 KB with the loop over later splits: its layout conversions' scratch): two programs per SM.
        STEPS 1 (every split a fine one, of one step): buffers for one step, 48 KB."""
        if WARP1:  # (mma.sync reads its operands with ldmatrix)
            SH: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])
        else:
            SH: gl.constexpr = gl.NVMMASharedLayout.get_default_for([_QR, _D], gl.bfloat16)
        k_smem = gl.allocate_shared_memory(gl.bfloat16, [STEPS, _BLOCK, _D], SH)
        v_smem = gl.allocate_shared_memory(gl.bfloat16, [STEPS, _BLOCK, _D], SH)
        # keys this forward writes: from the block's first row's position on (first_written: the rows' own
        # positions), and every key of the sequence where the block continues one that started rows before it (a
        # sequence's rows come in blocks of at most BLOCK_ROWS): nothing is copied before the wait then
        continued = (lead > 0) & (gl.load(seq_ptr + gl.maximum(lead - 1, 0)) == seq)
        first_new = gl.where(has_block & ~continued, gl.load(first_ptr + gl.maximum(lead, 0)).to(gl.int32), 0)
        if WARP1:  # (a call of at most CR rows writes no key of the block's sequence before max_len - CR, continued or
            # not; the merge after the wait covers CR rows)
            first_new = gl.where(continued, gl.maximum(max_len - _CR, 0), first_new)
        kpos = gl.arange(0, _BLOCK, layout=gl.SliceLayout(1, LD))
        steps = gl.where(split < FINE_SPLITS, FINE_N // _BLOCK, SPLIT_N // _BLOCK)
        for i in gl.static_range(STEPS):
            pos = start0 + i * _BLOCK + kpos
            _copy_keys(k_ptr, v_ptr, bt_ptr, k_smem.index(i), v_smem.index(i), seq, pos,
                       (pos < gl.minimum(first_new, max_len)) & (start0 < max_len) & (i < steps), kvh, stride_ks,
                       stride_kh, stride_bt, page_size, LD)
        async_copy.commit_group()
        # where the rows this forward writes lie in the split (written out for its two steps: MAX_STEPS == 2)
        fresh = (start0 < max_len) & (start0 + steps * _BLOCK > first_new)
        if WARP1:  # at most CR new rows (the host's bound), from max(first_new, start0) on: two CR-row chunks
            chunk = gl.minimum((gl.maximum(first_new, start0) - start0) // _CR, _BLOCK // _CR - 2)
            pos0 = start0 + chunk * _CR + gl.arange(0, _CR, layout=gl.SliceLayout(1, LD))
            pos1 = pos0 + _CR
            new0 = (pos0 >= first_new) & (pos0 < max_len) & fresh
            new1 = (pos1 >= first_new) & (pos1 < max_len) & fresh
        else:
            pos0 = start0 + kpos
            pos1 = pos0 + _BLOCK
            new0 = (pos0 >= first_new) & (pos0 < max_len) & fresh
            new1 = (pos1 >= first_new) & (pos1 < max_len) & fresh & (steps > 1)
        slot0 = _slots(bt_ptr, seq, pos0, new0, stride_bt, page_size)
        slot1 = _slots(bt_ptr, seq, pos1, new1, stride_bt, page_size)
        if PDL:
            gdc_wait()
            if PDL == 2:
                gdc_launch_dependents()
        # the query tile: row i is (row lead + i // GROUP_PAD, head kvh * GROUP + i % GROUP_PAD)
        qi = gl.arange(0, TILE, layout=gl.SliceLayout(1, LD))
        qd = gl.arange(0, _D, layout=gl.SliceLayout(0, LD))
        q_live = (qi // GROUP_PAD < n_rows) & (qi % GROUP_PAD < GROUP) & has_block
        q_row = lead + qi // GROUP_PAD
        q_head = kvh * GROUP + qi % GROUP_PAD
        q = gl.load(q_ptr + q_row[:, None] * stride_qt + q_head[:, None] * stride_qh + qd[None, :],
                    mask=q_live[:, None], other=0.0)
        # the rows this forward wrote, loaded beside the query tile (one memory round trip after the wait, not
        # two; their slots were read before it); only a split holding some loads anything
        k_new0, v_new0 = _load_new(k_ptr, v_ptr, slot0, new0, kvh, stride_ks, stride_kh, LD)
        k_new1, v_new1 = _load_new(k_ptr, v_ptr, slot1, new1, kvh, stride_ks, stride_kh, LD)
        q_op = gl.allocate_shared_memory(gl.bfloat16, [TILE, _D], SH)
        q_op.store(q)
        async_copy.wait_group(0)  # (also where the split holds no key: no copy may land after the program ends)
        gl.thread_barrier()
        if start0 < max_len:
            if fresh:
                if WARP1:  # (STEPS 1) the two chunks over the copies, where they lie in the step
                    for c in gl.static_range(_BLOCK // _CR):
                        if c == chunk:
                            _store_over(k_smem.index(0).slice(c * _CR, _CR, dim=0),
                                        v_smem.index(0).slice(c * _CR, _CR, dim=0), k_new0, v_new0, new0, LD)
                        if c == chunk + 1:
                            _store_over(k_smem.index(0).slice(c * _CR, _CR, dim=0),
                                        v_smem.index(0).slice(c * _CR, _CR, dim=0), k_new1, v_new1, new1, LD)
                else:
                    _store_over(k_smem.index(0), v_smem.index(0), k_new0, v_new0, new0, LD)
                    if STEPS > 1:
                        _store_over(k_smem.index(1), v_smem.index(1), k_new1, v_new1, new1, LD)
            if not WARP1:  # (wgmma reads shared memory through the async proxy)
                fence_async_shared()
            gl.thread_barrier()
            _reduce_split(q_op, k_smem, v_smem, lens, start0, steps, scale, acc_ptr, ml_ptr, lead, n_rows, has_block,
                          kvh, num_heads, num_splits, split, GROUP, GROUP_PAD, S_L, O_L, P_L, STEPS, STORE_DIRECT,
                          WARP1, TILE)
        for j in range(1, ITERS):
            split_j = split + j * PROGRAMS
            start_j = _split_start(split_j, SPLIT_N, FINE_N, FINE_SPLITS)
            if start_j < max_len:
                _later_split(q_op, k_ptr, v_ptr, bt_ptr, k_smem, v_smem, acc_ptr, ml_ptr, scale, stride_ks,
                             stride_kh, stride_bt, page_size, num_splits, num_heads, lead, n_rows, has_block, seq,
                             lens, max_len, kvh, split_j, start_j, kpos, GROUP, GROUP_PAD, SPLIT_N, FINE_N,
                             FINE_SPLITS, LD, S_L, O_L, P_L, STEPS, STORE_DIRECT, WARP1, TILE)
        if PDL == 1:
            gdc_launch_dependents()

    @gluon.jit
    def _later_split(q_op, k_ptr, v_ptr, bt_ptr, k_smem, v_smem, acc_ptr, ml_ptr, scale, stride_ks, stride_kh,
                     stride_bt, page_size, num_splits, num_heads, lead, n_rows, has_block, seq, lens, max_len, kvh,
                     split, start, kpos, GROUP: gl.constexpr, GROUP_PAD: gl.constexpr, SPLIT_N: gl.constexpr,
                     FINE_N: gl.constexpr, FINE_SPLITS: gl.constexpr, LD: gl.constexpr, S_L: gl.constexpr,
                     O_L: gl.constexpr, P_L: gl.constexpr, STEPS: gl.constexpr, STORE_DIRECT: gl.constexpr,
                     WARP1: gl.constexpr, TILE: gl.constexpr):
        """A split after the program's first (after the wait: every key is there): copied into the same buffers
        once every warp's products of the previous split are done, then reduced."""
        steps = gl.where(split < FINE_SPLITS, FINE_N // _BLOCK, SPLIT_N // _BLOCK)
        gl.thread_barrier()
        for i in gl.static_range(STEPS):
            pos = start + i * _BLOCK + kpos
            _copy_keys(k_ptr, v_ptr, bt_ptr, k_smem.index(i), v_smem.index(i), seq, pos,
                       (pos < max_len) & (i < steps), kvh, stride_ks, stride_kh, stride_bt, page_size, LD)
        async_copy.commit_group()
        async_copy.wait_group(0)
        if not WARP1:
            fence_async_shared()
        gl.thread_barrier()
        _reduce_split(q_op, k_smem, v_smem, lens, start, steps, scale, acc_ptr, ml_ptr, lead, n_rows, has_block, kvh,
                      num_heads, num_splits, split, GROUP, GROUP_PAD, S_L, O_L, P_L, STEPS, STORE_DIRECT, WARP1, TILE)

    @gluon.jit
    def _reduce_split(q_op, k_smem, v_smem, lens, start, steps, scale, acc_ptr, ml_ptr, lead, n_rows, has_block, kvh,
                      num_heads, num_splits, split, GROUP: gl.constexpr, GROUP_PAD: gl.constexpr, S_L: gl.constexpr,
                      O_L: gl.constexpr, P_L: gl.constexpr, STEPS: gl.constexpr, STORE_DIRECT: gl.constexpr,
                      WARP1: gl.constexpr, TILE: gl.constexpr):
        """One split's keys in shared memory reduced and its partials stored, on four warps or one."""
        if WARP1:
            m_i, l_i, a0, a1, a2, a3 = _attend_warp(q_op, k_smem, v_smem, lens, start, steps, scale, S_L, P_L, STEPS)
            _store_warp(a0, a1, a2, a3, m_i, l_i, acc_ptr, ml_ptr, lead, n_rows, has_block, kvh, num_heads,
                        num_splits, split, GROUP, GROUP_PAD, S_L)
        else:
            m_i, l_i, acc = _attend_split(q_op, k_smem, v_smem, lens, start, steps, scale, S_L, O_L, P_L, STEPS,
                                          TILE)
            _store_partials(acc, m_i, l_i, acc_ptr, ml_ptr, lead, n_rows, has_block, kvh, num_heads, num_splits,
                            split, GROUP, GROUP_PAD, S_L, O_L, STORE_DIRECT, TILE)

    @gluon.jit
    def _pv_chunk(p_a, v_smem, c: gl.constexpr, acc, L: gl.constexpr):
        """acc [QR1, DC] + P V[:, c * DC : (c + 1) * DC] by mma.sync (keys in order, as one product over all dims)."""
        v_b = v_smem.slice(c * _DC, _DC, dim=1).load(gl.DotOperandLayout(operand_index=1, parent=L, k_width=2))
        return mma_v2(p_a, v_b, acc)

    @gluon.jit
    def _attend_warp(q_op, k_smem, v_smem, lens, start, steps, scale, L: gl.constexpr, P_L: gl.constexpr,
                     STEPS: gl.constexpr):
        """_attend_split on one warp: S = q K^T by mma.sync over four 32-dim chunks of the head (chained in dim order:
        the 64-row tile's k steps), the same softmax, O in four 32-dim column chunks (independent columns) ->
        (max, sum, O[:, 0:32], ..., O[:, 96:128]). Operands chunked so that one warp's registers hold them."""
        m_i = gl.full([_QR1], float("-inf"), gl.float32, layout=gl.SliceLayout(1, L))
        l_i = gl.zeros([_QR1], gl.float32, layout=gl.SliceLayout(1, L))
        a0 = gl.zeros([_QR1, _DC], gl.float32, layout=L)
        a1 = a0
        a2 = a0
        a3 = a0
        kcol = gl.arange(0, _BLOCK, layout=gl.SliceLayout(0, L))
        QA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=L, k_width=2)
        KB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=L, k_width=2)
        for i in gl.static_range(STEPS):
            if i < steps:
                s = gl.zeros([_QR1, _BLOCK], gl.float32, layout=L)
                for c in gl.static_range(_D // _DC):
                    q_a = q_op.slice(c * _DC, _DC, dim=1).load(QA)  # [QR1, DC]
                    k_b = k_smem.index(i).slice(c * _DC, _DC, dim=1).permute((1, 0)).load(KB)  # [DC, BLOCK]
                    s = mma_v2(q_a, k_b, s)
                p, alpha, m_new, l_i = _softmax_step(s, m_i, l_i, lens, start + i * _BLOCK, kcol, scale)
                p_a = gl.convert_layout(p.to(gl.bfloat16), P_L)
                al = alpha[:, None]
                a0 = _pv_chunk(p_a, v_smem.index(i), 0, a0 * al, L)
                a1 = _pv_chunk(p_a, v_smem.index(i), 1, a1 * al, L)
                a2 = _pv_chunk(p_a, v_smem.index(i), 2, a2 * al, L)
                a3 = _pv_chunk(p_a, v_smem.index(i), 3, a3 * al, L)
                m_i = m_new
        return m_i, l_i, a0, a1, a2, a3

    @gluon.jit
    def _store_warp(a0, a1, a2, a3, m_i, l_i, acc_ptr, ml_ptr, lead, n_rows, has_block, kvh, num_heads, num_splits,
                    split, GROUP: gl.constexpr, GROUP_PAD: gl.constexpr, L: gl.constexpr):
        """_store_partials for the one-warp form: the four column chunks from their registers, then m and l."""
        i = gl.arange(0, _QR1, layout=gl.SliceLayout(1, L))
        d = gl.arange(0, _DC, layout=gl.SliceLayout(0, L))
        live = (i // GROUP_PAD < n_rows) & (i % GROUP_PAD < GROUP) & has_block
        base = ((lead + i // GROUP_PAD).to(gl.int64) * num_heads + kvh * GROUP + i % GROUP_PAD) * num_splits + split
        out = acc_ptr + base[:, None] * _D + d[None, :]
        gl.store(out, a0, mask=live[:, None])
        gl.store(out + _DC, a1, mask=live[:, None])
        gl.store(out + 2 * _DC, a2, mask=live[:, None])
        gl.store(out + 3 * _DC, a3, mask=live[:, None])
        gl.store(ml_ptr + base * 2, m_i, mask=live)
        gl.store(ml_ptr + base * 2 + 1, l_i, mask=live)

    @gluon.jit
    def _softmax_step(s, m_i, l_i, lens, first, kcol, scale):
        """One 64-key step of the online softmax over S [rows, BLOCK] (keys at positions first + kcol) -> (P, alpha,
        new max, new sum); the row reductions run in the layout S comes in."""
        s = s * scale
        pos = first + kcol
        s = gl.where(pos[None, :] < lens[:, None], s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1))
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = gl.exp(m_i - m_use)
        p = gl.exp(s - m_use[:, None])
        return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)

    @gluon.jit
    def _attend_split(q_op, k_smem, v_smem, lens, start, steps, scale, S_L: gl.constexpr, O_L: gl.constexpr,
                      P_L: gl.constexpr, STEPS: gl.constexpr, TILE: gl.constexpr = _QR):
        """The Triton kernel's _split_body over the split's steps -> (max, sum, weighted values); q_op: the query
        tile in shared memory."""
        m_i = gl.full([TILE], float("-inf"), gl.float32, layout=gl.SliceLayout(1, S_L))
        l_i = gl.zeros([TILE], gl.float32, layout=gl.SliceLayout(1, S_L))
        acc = gl.zeros([TILE, _D], gl.float32, layout=O_L)
        kcol = gl.arange(0, _BLOCK, layout=gl.SliceLayout(0, S_L))
        for i in gl.static_range(STEPS):
            if i < steps:
                s = warpgroup_mma(q_op, k_smem.index(i).permute((1, 0)),
                                  gl.zeros([TILE, _BLOCK], gl.float32, layout=S_L), is_async=True)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
                p, alpha, m_new, l_i = _softmax_step(s, m_i, l_i, lens, start + i * _BLOCK, kcol, scale)
                scaled = acc * gl.convert_layout(alpha[:, None], O_L)  # [QR, 1]: as Triton converts it
                acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), P_L), v_smem.index(i), scaled,
                                    is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                m_i = m_new
        return m_i, l_i, acc

    @gluon.jit
    def _store_partials(acc, m_i, l_i, acc_ptr, ml_ptr, lead, n_rows, has_block, kvh, num_heads, num_splits, split,
                        GROUP: gl.constexpr, GROUP_PAD: gl.constexpr, S_L: gl.constexpr, O_L: gl.constexpr,
                        STORE_DIRECT: gl.constexpr = False, TILE: gl.constexpr = _QR):
        """The split's partial softmax state of the live tile rows to the workspace (the Triton kernel's layout).
        STORE_DIRECT: the weighted values stored from the wgmma accumulator's registers, with no layout conversion
        through shared memory first (the same values: a store moves them, it does not round them)."""
        if STORE_DIRECT:
            out = acc
            i = gl.arange(0, TILE, layout=gl.SliceLayout(1, O_L))
            d = gl.arange(0, _D, layout=gl.SliceLayout(0, O_L))
        else:
            ST: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
            out = gl.convert_layout(acc, ST)
            i = gl.arange(0, TILE, layout=gl.SliceLayout(1, ST))
            d = gl.arange(0, _D, layout=gl.SliceLayout(0, ST))
        live = (i // GROUP_PAD < n_rows) & (i % GROUP_PAD < GROUP) & has_block
        base = ((lead + i // GROUP_PAD).to(gl.int64) * num_heads + kvh * GROUP + i % GROUP_PAD) * num_splits + split
        gl.store(acc_ptr + base[:, None] * _D + d[None, :], out, mask=live[:, None])
        si = gl.arange(0, TILE, layout=gl.SliceLayout(1, S_L))
        s_live = (si // GROUP_PAD < n_rows) & (si % GROUP_PAD < GROUP) & has_block
        s_base = ((lead + si // GROUP_PAD).to(gl.int64) * num_heads + kvh * GROUP + si % GROUP_PAD) * num_splits \
            + split
        gl.store(ml_ptr + s_base * 2, m_i, mask=s_live)
        gl.store(ml_ptr + s_base * 2 + 1, l_i, mask=s_live)


def supports(q, k_cache, v_cache, group_pad: int, rows_per_pass: int, passes: int) -> bool:
    """Can the Gluon split kernel run this call (Hopper, bf16, head dim 128, one pass of a 64-row tile, 16-byte
    aligned rows for cp.async)?"""
    import torch

    from sparkdec.ops import gluon_gemv
    if not (AVAILABLE and q.is_cuda and q.shape[2] == D and group_pad * rows_per_pass == QR and passes == 1):
        return False
    tensors = (q, k_cache, v_cache)
    return (all(t.dtype == torch.bfloat16 and t.data_ptr() % 16 == 0 and t.stride(-1) == 1 for t in tensors)
            and all(st % 8 == 0 for t in tensors for st in t.stride()[:-1]) and k_cache.stride() == v_cache.stride()
            and gluon_gemv._is_hopper(q.device))
