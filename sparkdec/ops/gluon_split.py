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
"""
from __future__ import annotations

import triton

try:  # the same gate as ops/gluon_gemv.py: only the triton version checked on the H200 runs Gluon
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    AVAILABLE = triton.__version__.startswith("3.6")
except ImportError:  # pragma: no cover - depends on the installed triton
    AVAILABLE = False

QR = 64  # query rows per tile (rows x heads of the kv group): the Triton kernel's QUERY_TILE
D = 128  # head dim
BLOCK = 64  # keys per step: triton_attention.SPLIT_BLOCK_N
MAX_STEPS = 2  # steps of the longest split (SPLIT // BLOCK; the loads after the wait are written out for 2)

if AVAILABLE:
    _QR, _D, _BLOCK, _MAX_STEPS = (gl.constexpr(v) for v in (QR, D, BLOCK, MAX_STEPS))  # the same, for the kernels

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
                            STORE_DIRECT: gl.constexpr = False):
        LD: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # [rows, D] bf16, 16 B per thread
        S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, _BLOCK, 16])
        O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, _D, 16])
        P_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)
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
        si = gl.arange(0, _QR, layout=gl.SliceLayout(1, S_L))  # the softmax's rows, in the S accumulator's layout
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
                           FINE_N, FINE_SPLITS, PROGRAMS, ITERS, PDL, LD, S_L, O_L, P_L, STEPS, STORE_DIRECT)

    @gluon.jit
    def _split_program(q_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, acc_ptr, ml_ptr, first_ptr, scale, stride_qt,
                       stride_qh, stride_ks, stride_kh, stride_bt, page_size, num_splits, num_heads, lead, n_rows,
                       has_block, seq, lens, max_len, kvh, split, start0, GROUP: gl.constexpr,
                       GROUP_PAD: gl.constexpr, SPLIT_N: gl.constexpr, FINE_N: gl.constexpr,
                       FINE_SPLITS: gl.constexpr, PROGRAMS: gl.constexpr, ITERS: gl.constexpr, PDL: gl.constexpr,
                       LD: gl.constexpr, S_L: gl.constexpr, O_L: gl.constexpr, P_L: gl.constexpr,
                       STEPS: gl.constexpr, STORE_DIRECT: gl.constexpr):
        """The splits of one row block this program reduces: the first one's old keys copied before the wait, the rest
        after it; the later splits (split + PROGRAMS, ...) copied and reduced one after another. 80 KB of shared
        memory (96 KB with the loop over later splits: its layout conversions' scratch): two programs per SM.
        STEPS 1 (every split a fine one, of one step): buffers for one step, 48 KB."""
        SH: gl.constexpr = gl.NVMMASharedLayout.get_default_for([_QR, _D], gl.bfloat16)
        k_smem = gl.allocate_shared_memory(gl.bfloat16, [STEPS, _BLOCK, _D], SH)
        v_smem = gl.allocate_shared_memory(gl.bfloat16, [STEPS, _BLOCK, _D], SH)
        # keys this forward writes: from the block's first row's position on (first_written: the rows' own
        # positions), and every key of the sequence where the block continues one that started rows before it (a
        # sequence's rows come in blocks of at most BLOCK_ROWS): nothing is copied before the wait then
        continued = (lead > 0) & (gl.load(seq_ptr + gl.maximum(lead - 1, 0)) == seq)
        first_new = gl.where(has_block & ~continued, gl.load(first_ptr + gl.maximum(lead, 0)).to(gl.int32), 0)
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
        qi = gl.arange(0, _QR, layout=gl.SliceLayout(1, LD))
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
        q_op = gl.allocate_shared_memory(gl.bfloat16, [_QR, _D], SH)
        q_op.store(q)
        async_copy.wait_group(0)  # (also where the split holds no key: no copy may land after the program ends)
        gl.thread_barrier()
        if start0 < max_len:
            if fresh:
                _store_over(k_smem.index(0), v_smem.index(0), k_new0, v_new0, new0, LD)
                if STEPS > 1:
                    _store_over(k_smem.index(1), v_smem.index(1), k_new1, v_new1, new1, LD)
            fence_async_shared()
            gl.thread_barrier()
            m_i, l_i, acc = _attend_split(q_op, k_smem, v_smem, lens, start0, steps, scale, S_L, O_L, P_L, STEPS)
            _store_partials(acc, m_i, l_i, acc_ptr, ml_ptr, lead, n_rows, has_block, kvh, num_heads, num_splits,
                            split, GROUP, GROUP_PAD, S_L, O_L, STORE_DIRECT)
        for j in range(1, ITERS):
            split_j = split + j * PROGRAMS
            start_j = _split_start(split_j, SPLIT_N, FINE_N, FINE_SPLITS)
            if start_j < max_len:
                _later_split(q_op, k_ptr, v_ptr, bt_ptr, k_smem, v_smem, acc_ptr, ml_ptr, scale, stride_ks,
                             stride_kh, stride_bt, page_size, num_splits, num_heads, lead, n_rows, has_block, seq,
                             lens, max_len, kvh, split_j, start_j, kpos, GROUP, GROUP_PAD, SPLIT_N, FINE_N,
                             FINE_SPLITS, LD, S_L, O_L, P_L, STEPS, STORE_DIRECT)
        if PDL == 1:
            gdc_launch_dependents()

    @gluon.jit
    def _later_split(q_op, k_ptr, v_ptr, bt_ptr, k_smem, v_smem, acc_ptr, ml_ptr, scale, stride_ks, stride_kh,
                     stride_bt, page_size, num_splits, num_heads, lead, n_rows, has_block, seq, lens, max_len, kvh,
                     split, start, kpos, GROUP: gl.constexpr, GROUP_PAD: gl.constexpr, SPLIT_N: gl.constexpr,
                     FINE_N: gl.constexpr, FINE_SPLITS: gl.constexpr, LD: gl.constexpr, S_L: gl.constexpr,
                     O_L: gl.constexpr, P_L: gl.constexpr, STEPS: gl.constexpr, STORE_DIRECT: gl.constexpr):
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
        fence_async_shared()
        gl.thread_barrier()
        m_i, l_i, acc = _attend_split(q_op, k_smem, v_smem, lens, start, steps, scale, S_L, O_L, P_L, STEPS)
        _store_partials(acc, m_i, l_i, acc_ptr, ml_ptr, lead, n_rows, has_block, kvh, num_heads, num_splits, split,
                        GROUP, GROUP_PAD, S_L, O_L, STORE_DIRECT)

    @gluon.jit
    def _attend_split(q_op, k_smem, v_smem, lens, start, steps, scale, S_L: gl.constexpr, O_L: gl.constexpr,
                      P_L: gl.constexpr, STEPS: gl.constexpr):
        """The Triton kernel's _split_body over the split's steps -> (max, sum, weighted values); q_op: the query
        tile in shared memory."""
        m_i = gl.full([_QR], float("-inf"), gl.float32, layout=gl.SliceLayout(1, S_L))
        l_i = gl.zeros([_QR], gl.float32, layout=gl.SliceLayout(1, S_L))
        acc = gl.zeros([_QR, _D], gl.float32, layout=O_L)
        kcol = gl.arange(0, _BLOCK, layout=gl.SliceLayout(0, S_L))
        for i in gl.static_range(STEPS):
            if i < steps:
                s = warpgroup_mma(q_op, k_smem.index(i).permute((1, 0)),
                                  gl.zeros([_QR, _BLOCK], gl.float32, layout=S_L), is_async=True)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
                s = s * scale
                pos = start + i * _BLOCK + kcol
                s = gl.where(pos[None, :] < lens[:, None], s, float("-inf"))
                m_new = gl.maximum(m_i, gl.max(s, 1))
                m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = gl.exp(m_i - m_use)
                p = gl.exp(s - m_use[:, None])
                l_i = l_i * alpha + gl.sum(p, 1)
                scaled = acc * gl.convert_layout(alpha[:, None], O_L)  # [QR, 1]: as Triton converts it
                acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), P_L), v_smem.index(i), scaled,
                                    is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                m_i = m_new
        return m_i, l_i, acc

    @gluon.jit
    def _store_partials(acc, m_i, l_i, acc_ptr, ml_ptr, lead, n_rows, has_block, kvh, num_heads, num_splits, split,
                        GROUP: gl.constexpr, GROUP_PAD: gl.constexpr, S_L: gl.constexpr, O_L: gl.constexpr,
                        STORE_DIRECT: gl.constexpr = False):
        """The split's partial softmax state of the live tile rows to the workspace (the Triton kernel's layout).
        STORE_DIRECT: the weighted values stored from the wgmma accumulator's registers, with no layout conversion
        through shared memory first (the same values: a store moves them, it does not round them)."""
        if STORE_DIRECT:
            out = acc
            i = gl.arange(0, _QR, layout=gl.SliceLayout(1, O_L))
            d = gl.arange(0, _D, layout=gl.SliceLayout(0, O_L))
        else:
            ST: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
            out = gl.convert_layout(acc, ST)
            i = gl.arange(0, _QR, layout=gl.SliceLayout(1, ST))
            d = gl.arange(0, _D, layout=gl.SliceLayout(0, ST))
        live = (i // GROUP_PAD < n_rows) & (i % GROUP_PAD < GROUP) & has_block
        base = ((lead + i // GROUP_PAD).to(gl.int64) * num_heads + kvh * GROUP + i % GROUP_PAD) * num_splits + split
        gl.store(acc_ptr + base[:, None] * _D + d[None, :], out, mask=live[:, None])
        si = gl.arange(0, _QR, layout=gl.SliceLayout(1, S_L))
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
