"""Hopper (sm_90) gate_up + SiLU then down + residual in one persistent Gluon launch, for up to 16 rows (staged).

Step 2 of docs/research/megakernel-gluon.md: exact on the H200 (GPU test) but slower than the two launches, off unless
`triton_gemm.FUSED_MLP`. A grid of CTAs that are all resident at once walks static task lists: CTA c takes the
gate_up tiles c, c + G, ... and then the down tasks G - 1 - c, 2G - 1 - c, ... One TMA weight ring per CTA streams
the whole list, so a CTA's down weights arrive while it finishes its gate_up tiles (weights never depend on
activations). A gate_up tile stores its 32 outputs and bumps, with release semantics, the counter of their
128-column chunk; a down task polls (acquire) the counters of its K slice, loads that slice and runs. No grid
barrier: each task waits only for what it reads. The arithmetic is the two Gluon products' (ops/gluon_gemv.py):
the same 64-row tiles, the same K order, the same split-K slices summed in slice order by the tile's last task, so
every row keeps its bits.
Assumptions (a broken one hangs the launch, so the first device run has a timeout): the whole grid is resident (the
grid is the SMs times the CTAs that fit on one, from `smem_bound`; not under MPS or green contexts with fewer SMs),
one launch at a time on the device (the counters are shared), and every launch completes (it leaves its counters at
zero, as the split-K counters of ops/triton_gemm.py do).
"""
from __future__ import annotations

import torch
import triton

from sparkdec.ops import gluon_gemv as gg

if gg.AVAILABLE:
    from triton.experimental.gluon.language.nvidia.ampere import async_copy

    from sparkdec.ops.gluon_gemv import (TensorDescriptor, _epilogue, _request, fence_async_shared, gdc_launch_dependents,
                                         gdc_wait, gl, gluon, mbarrier, warpgroup_mma, warpgroup_mma_wait)

BN, BK = 64, 128  # the weight tile of both products (the shipped Gluon tiles of the 4B gate_up and down)
STAGES = 4  # weight tiles in flight per CTA
CTAS_PER_SM = 2  # at most this many CTAs per SM (fewer where shared memory does not fit them)
SMEM_PER_SM = 220 * 1024  # what the CTAs of one SM may use together (sm_90: 227 KB)
GRID = None  # CTAs (None: all that fit; never more). 160 for the 4B: 2 gate_up tiles and 1 down task at most per CTA

if gg.AVAILABLE:
    TILE_N: gl.constexpr = gl.constexpr(BN)
    TILE_K: gl.constexpr = gl.constexpr(BK)

    @gluon.jit
    def _tile_coords(j, n_gu, c, d, G, NKG: gl.constexpr, NKD: gl.constexpr, DN_N: gl.constexpr,
                     KSLICE: gl.constexpr):
        """Flat weight tile j of CTA c's list -> (is it a gate_up tile, its row, its column)."""
        is_gu = j < n_gu * NKG
        g = c + (j // NKG) * G
        jj = j - n_gu * NKG
        task = d + (jj // NKD) * G
        row = gl.where(is_gu, g * TILE_N, (task % DN_N) * TILE_N)
        col = gl.where(is_gu, (j % NKG) * TILE_K, (task // DN_N) * KSLICE + (jj % NKD) * TILE_K)
        return is_gu, row, col

    @gluon.jit
    def _request_tile(wg_desc, wd_desc, j, total, n_gu, c, d, G, bar, dst, NKG: gl.constexpr, NKD: gl.constexpr,
                      DN_N: gl.constexpr, KSLICE: gl.constexpr):
        """Flat tile j (if it exists) -> dst, completing on bar: from the gate_up or the down weights."""
        is_gu, row, col = _tile_coords(j, n_gu, c, d, G, NKG, NKD, DN_N, KSLICE)
        live = j < total
        _request(wg_desc, row, col, bar, dst, live & is_gu)
        _request(wd_desc, row, col, bar, dst, live & (is_gu == 0))

    @gluon.jit
    def _consume(i, k, acc, w_ring, x_bufs, ready, wg_desc, wd_desc, total, n_gu, c, d, G, STAGES: gl.constexpr,
                 NKG: gl.constexpr, NKD: gl.constexpr, DN_N: gl.constexpr, KSLICE: gl.constexpr):
        """Flat tile i (the task's k-th) into acc, then the freed stage refilled with tile i + STAGES."""
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        acc = warpgroup_mma(w_ring.index(s), x_bufs.index(k).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        _request_tile(wg_desc, wd_desc, i + STAGES, total, n_gu, c, d, G, ready.index(s), w_ring.index(s), NKG, NKD,
                      DN_N, KSLICE)
        return acc

    @gluon.jit
    def _load_rows(src_ptr, x_bufs, M, stride, k_begin, NK: gl.constexpr, MP: gl.constexpr, num_warps: gl.constexpr):
        """src[:, k_begin : k_begin + NK * TILE_K] -> x_bufs [NK, MP, TILE_K]: every tile's cp.async issued at once,
        one wait (one memory round trip), read through L2 (.cg: other CTAs wrote it during this launch). Rows >= M
        are not read (their MMA columns are never stored)."""
        xl: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [num_warps, 1], [1, 0])
        rows = gl.arange(0, MP, layout=gl.SliceLayout(1, xl))
        cols = gl.arange(0, TILE_K, layout=gl.SliceLayout(0, xl))
        for j in gl.static_range(NK):
            ptrs = src_ptr + rows[:, None] * stride + (k_begin + j * TILE_K + cols)[None, :]
            async_copy.async_copy_global_to_shared(x_bufs.index(j), ptrs, mask=(rows < M)[:, None],
                                                   cache_modifier=".cg")
        async_copy.commit_group()
        async_copy.wait_group(0)
        fence_async_shared()  # the generic-proxy writes, before wgmma reads them
        gl.thread_barrier()

    @gluon.jit
    def _wait_chunks(cnt_ptr, first, NKD: gl.constexpr, TARGET: gl.constexpr, num_warps: gl.constexpr):
        """Spin until the NKD chunk counters from `first` on reach TARGET (acquire: their stores are visible)."""
        cl: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        q = gl.arange(0, 32 * num_warps, layout=cl)
        need = q < NKD
        zero = gl.zeros([32 * num_warps], gl.int32, layout=cl)
        full = gl.full([32 * num_warps], TARGET, gl.int32, layout=cl)
        ready = gl.min(gl.where(need, gl.atomic_add(cnt_ptr + first + q, zero, mask=need, sem="acquire"), full), 0)
        while ready < TARGET:
            ready = gl.min(gl.where(need, gl.atomic_add(cnt_ptr + first + q, zero, mask=need, sem="acquire"), full),
                           0)

    @gluon.jit
    def _mlp_kernel(wg_desc, wd_desc, x_ptr, inter_ptr, out_ptr, res_ptr, ws_ptr, tile_cnt_ptr, chunk_cnt_ptr,
                    done_ptr, M, stride_xm, stride_im, stride_om, stride_rm, HID: gl.constexpr, INTER: gl.constexpr,
                    SPLIT_K: gl.constexpr, STAGES: gl.constexpr, MP: gl.constexpr, PDL: gl.constexpr,
                    num_warps: gl.constexpr):
        NKG: gl.constexpr = HID // TILE_K  # gate_up: K tiles per tile
        KSLICE: gl.constexpr = INTER // SPLIT_K  # down: K columns per task
        NKD: gl.constexpr = KSLICE // TILE_K  # down: K tiles per task
        GU_TILES: gl.constexpr = 2 * INTER // TILE_N
        DN_N: gl.constexpr = HID // TILE_N
        DN_TASKS: gl.constexpr = DN_N * SPLIT_K
        PER_CHUNK: gl.constexpr = TILE_K // (TILE_N // 2)  # gate_up tiles writing one 128-column chunk
        G = gl.num_programs(0)
        c = gl.program_id(0)
        d = G - 1 - c  # this CTA's first down task
        n_gu = gl.maximum(GU_TILES - c + G - 1, 0) // G
        n_dn = gl.maximum(DN_TASKS - d + G - 1, 0) // G
        total = n_gu * NKG + n_dn * NKD
        w_ring = gl.allocate_shared_memory(wg_desc.dtype, [STAGES, TILE_N, TILE_K], wg_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(ready.index(s), count=1)
        # the weights do not depend on the previous kernel: fill the ring before waiting for it
        for s in gl.static_range(STAGES):
            _request_tile(wg_desc, wd_desc, s, total, n_gu, c, d, G, ready.index(s), w_ring.index(s), NKG, NKD, DN_N,
                          KSLICE)
        if PDL:
            gdc_wait()
            if PDL == 2:
                gdc_launch_dependents()
        xl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([MP, TILE_K], gl.bfloat16)
        x_bufs = gl.allocate_shared_memory(gl.bfloat16, [NKG, MP, TILE_K], xl)  # gate_up's x, then a down slice
        _load_rows(x_ptr, x_bufs, M, stride_xm, 0, NKG, MP, num_warps)
        acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, MP, 16])
        EL: gl.constexpr = gl.BlockedLayout([2, 1], [4, 8], [num_warps, 1], [1, 0])
        DT: gl.constexpr = x_ptr.dtype.element_ty
        i = 0
        for t in range(n_gu):
            g = c + t * G
            acc = gl.zeros([TILE_N, MP], gl.float32, layout=acc_l)
            for k in range(NKG):
                acc = _consume(i, k, acc, w_ring, x_bufs, ready, wg_desc, wd_desc, total, n_gu, c, d, G, STAGES, NKG,
                               NKD, DN_N, KSLICE)
                i += 1
            _epilogue(gl.convert_layout(acc, EL), inter_ptr, inter_ptr, M, INTER, g, stride_im, stride_im, True,
                      False, TILE_N, MP, EL, DT)
            gl.thread_barrier()  # every thread's stores before the release
            gl.atomic_add(chunk_cnt_ptr + g // PER_CHUNK, 1, sem="release")
        gl.thread_barrier()  # the gate_up MMAs have read x_bufs: it can take the down slices
        for t in range(n_dn):
            task = d + t * G
            n_tile = task % DN_N
            ks = task // DN_N
            _wait_chunks(chunk_cnt_ptr, ks * NKD, NKD, PER_CHUNK, num_warps)
            gl.thread_barrier()  # every thread reads after the acquires
            _load_rows(inter_ptr, x_bufs, M, stride_im, ks * KSLICE, NKD, MP, num_warps)
            acc = gl.zeros([TILE_N, MP], gl.float32, layout=acc_l)
            for k in range(NKD):
                acc = _consume(i, k, acc, w_ring, x_bufs, ready, wg_desc, wd_desc, total, n_gu, c, d, G, STAGES, NKG,
                               NKD, DN_N, KSLICE)
                i += 1
            y = gl.convert_layout(acc, EL)
            part = (gl.arange(0, TILE_N, layout=gl.SliceLayout(1, EL))[:, None] * MP
                    + gl.arange(0, MP, layout=gl.SliceLayout(0, EL))[None, :])
            gl.store(ws_ptr + (ks * DN_N + n_tile) * (TILE_N * MP) + part, y)
            gl.thread_barrier()
            arrived = gl.atomic_add(tile_cnt_ptr + n_tile, 1, sem="acq_rel")
            if arrived == SPLIT_K - 1:  # the tile's last slice: sum the slices in slice order (gluon_gemv's finish)
                sums = gl.zeros([TILE_N, MP], gl.float32, layout=EL)
                for sl in range(0, SPLIT_K):
                    sums += gl.load(ws_ptr + (sl * DN_N + n_tile) * (TILE_N * MP) + part, cache_modifier=".cg")
                gl.atomic_xchg(tile_cnt_ptr + n_tile, 0)
                _epilogue(sums, out_ptr, res_ptr, M, HID, n_tile, stride_om, stride_rm, False, True, TILE_N, MP, EL, DT)
            gl.thread_barrier()  # x_bufs is rewritten by the next task
        for s in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(s))
        # the last CTA out resets the chunk counters for the next launch (no CTA polls them any more)
        gl.thread_barrier()
        if gl.atomic_add(done_ptr, 1, sem="acq_rel") == G - 1:
            cl: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
            q = gl.arange(0, 128, layout=cl)
            gl.store(chunk_cnt_ptr + q, gl.zeros([128], gl.int32, layout=cl), mask=q < INTER // TILE_K)
            gl.atomic_xchg(done_ptr, 0)
        if PDL == 1:
            gdc_launch_dependents()


_STATE: dict[torch.device, torch.Tensor] = {}
_SMS: dict[torch.device, int] = {}


def supports(x: torch.Tensor, w_gu: torch.Tensor, w_down: torch.Tensor, split_gu: int, split_down: int) -> bool:
    """Can this launch replace gemm(x, w_gu, silu) then gemm(., w_down, residual) with the same bits?"""
    if gg.supports(x, w_gu, split_gu) is None or split_gu != 1:
        return False
    inter, hid = w_down.shape[1], w_down.shape[0]
    cfg_gu, cfg_dn = gg.CONFIGS.get(tuple(w_gu.shape)), gg.CONFIGS.get(tuple(w_down.shape))
    if cfg_dn is None or cfg_gu[:2] != (BN, BK) or cfg_dn[:2] != (BN, BK) or w_gu.shape != (2 * inter, hid):
        return False
    if hid % BK or hid % BN or inter % (split_down * BK) or inter // BK > 128 or hid // BN > 128:
        return False
    if w_down.stride(0) % 8 or w_down.data_ptr() % 16 or x.stride(0) % 16 or x.stride(1) != 1:
        return False  # NOTE: cp.async of 16 bytes needs row strides the launch specializes as multiples of 16
    if w_gu.stride(1) != 1 or w_down.stride(1) != 1:
        return False
    return inter // split_down // BK <= hid // BK  # a down slice fits in gate_up's x buffers


def _grid(device: torch.device, mp: int, hid: int) -> int:
    """CTAs that are all resident at once: the SMs times how many CTAs fit on one."""
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    resident = _SMS[device] * max(1, min(CTAS_PER_SM, SMEM_PER_SM // smem_bound(mp, hid)))
    return resident if GRID is None else min(GRID, resident)


def smem_bound(mp: int, hid: int, stages: int | None = None) -> int:
    """A bound on one CTA's shared memory: the ring, gate_up's x tiles, the accumulator's layout conversion and the
    barriers (the compile test checks it against what the compiler allocates)."""
    return (stages or STAGES) * BN * BK * 2 + (hid // BK) * mp * BK * 2 + BN * mp * 4 + 1024


def _state(device: torch.device) -> torch.Tensor:
    """Counters: 128 chunk counters, 128 down-tile arrival counters, 1 done counter (each launch leaves them 0)."""
    if device not in _STATE:
        _STATE[device] = torch.zeros(257, dtype=torch.int32, device=device)
    return _STATE[device]


def mlp(x: torch.Tensor, w_gu: torch.Tensor, w_down: torch.Tensor, residual: torch.Tensor, split_down: int,
        pdl: int) -> torch.Tensor:
    """residual + (silu(x @ gate^T) * (x @ up^T)) @ w_down^T, x [M <= 16, H] bf16, w_gu [2I, H] (gate and up rows
    interleaved), w_down [H, I] -> [M, H]."""
    m, hid = x.shape
    inter = w_down.shape[1]
    mp = gg.row_pad(m)
    out = torch.empty(m, hid, dtype=x.dtype, device=x.device)
    act = torch.empty(m, inter, dtype=x.dtype, device=x.device)
    ws = torch.empty(split_down * (hid // BN) * BN * mp, dtype=torch.float32, device=x.device)
    st = _state(x.device)
    extra = {"launch_pdl": True} if pdl else {}
    _mlp_kernel[(_grid(x.device, mp, hid),)](
        gg._descriptor(w_gu, BN, BK), gg._descriptor(w_down, BN, BK), x, act, out, residual, ws, st[128:256],
        st[:128], st[256:], m, x.stride(0), act.stride(0), out.stride(0), residual.stride(0), HID=hid, INTER=inter,
        SPLIT_K=split_down, STAGES=STAGES, MP=mp, PDL=pdl, num_warps=4, **extra)
    return out
