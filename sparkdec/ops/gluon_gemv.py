"""Hopper (sm_90) matrix products for up to 16 rows in Gluon: a TMA weight ring that starts before the PDL wait.

y = epilogue(x @ W^T) for x [M <= 16, K] bf16, W [N', K]. Same bits as `triton_gemm.gemm` (checked on the H200,
tests/test_gpu.py): each row's reduction runs over K in 16-wide tensor-core steps in K order, then SPLIT_K slices
(the same SPLIT_K as the Triton table) are summed in slice order by the tile's last program. What differs is how the
weights arrive: W is the 64-row wgmma operand (swap-AB: y^T = W x^T, rows padded to MP = 8 or 16 with zeros), fed by
a STAGES-deep TMA ring whose first tiles are requested before the kernel waits for the previous one (weights never
depend on it), so the weight stream does not stop at kernel boundaries.
"""
from __future__ import annotations

import os
import pathlib

import torch
import triton

from sparkdec.ops.tile_tables import read_table
from sparkdec.ops.tiled_weights import tiles_of

try:  # Gluon ships with triton >= 3.5; the CPU path and older tritons use the Triton kernel alone
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                                  warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    # Gluon is experimental and its API moves between releases: only the version checked on the H200 runs it
    AVAILABLE = triton.__version__.startswith("3.6")
except ImportError:  # pragma: no cover - depends on the installed triton
    AVAILABLE = False

MAX_ROWS = 16
SMEM_BYTES = 200 * 1024  # a program's ring and x tiles must fit in an sm_90 SM's shared memory (227 KB)

if AVAILABLE:
    @gluon.jit
    def _load_x_slice(x_ptr, x_smem, M, stride_xm, k_begin, NK: gl.constexpr, MP: gl.constexpr, BK: gl.constexpr,
                      num_warps: gl.constexpr):
        """x[:, k_begin : k_begin + NK * BK] -> x_smem [NK, MP, BK] (rows >= M are zeros)."""
        xl: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [num_warps, 1], [1, 0])
        rows = gl.arange(0, MP, layout=gl.SliceLayout(1, xl))
        cols = gl.arange(0, BK, layout=gl.SliceLayout(0, xl))
        for j in gl.static_range(NK):
            ptrs = x_ptr + rows[:, None] * stride_xm + (k_begin + j * BK + cols)[None, :]
            x_smem.index(j).store(gl.load(ptrs, mask=(rows < M)[:, None], other=0.0))
        fence_async_shared()
        gl.thread_barrier()

    @gluon.jit
    def _epilogue(y, out_ptr, res_ptr, M, N, pid_n, stride_om, stride_rm, SILU: gl.constexpr, RESIDUAL: gl.constexpr,
                  BN: gl.constexpr, MP: gl.constexpr, EL: gl.constexpr, DT: gl.constexpr):
        """y [BN, MP] fp32 (weight rows x token rows) -> out[m, n]: the Triton kernel's epilogue, transposed."""
        if SILU:  # weight rows interleave gate and up: g0, u0, g1, u1, ...
            gate, up = gl.split(gl.permute(gl.reshape(y, [BN // 2, 2, MP]), [0, 2, 1]))  # [BN/2, MP] each
            g = gate.to(DT).to(gl.float32)
            v = (g / (1.0 + gl.exp(-g))).to(DT) * up.to(DT)
            OUT_N: gl.constexpr = BN // 2
        else:
            v = y.to(DT)
            OUT_N: gl.constexpr = BN
        vl: gl.constexpr = v.type.layout
        n = pid_n * OUT_N + gl.arange(0, OUT_N, layout=gl.SliceLayout(1, vl))
        m = gl.arange(0, MP, layout=gl.SliceLayout(0, vl))
        mask = (n < N)[:, None] & (m < M)[None, :]
        if RESIDUAL:
            r = gl.load(res_ptr + m[None, :] * stride_rm + n[:, None], mask=mask, other=0.0)
            v = (r.to(gl.float32) + v.to(gl.float32)).to(DT)
        gl.store(out_ptr + m[None, :] * stride_om + n[:, None], v.to(out_ptr.dtype.element_ty), mask=mask)

    @gluon.jit
    def _request(desc, row, col, bar, dst, pred):
        """One TMA tile desc[row:, col:] -> dst, completing on bar (pred: issue it at all)."""
        mbarrier.expect(bar, desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(desc, [row, col], bar, dst, pred=pred)

    @gluon.jit
    def _w_request(w_desc, pid_n, k, bar, dst, pred, TILED: gl.constexpr):
        """Weight tile (pid_n, columns k:) -> dst. TILED: W stored tile by tile (ops/tiled_weights.py), its
        [K / BK, N / BN, BN, BK] tiles seen as [K / BK * N / BN * BN, BK] rows by the descriptor."""
        BN: gl.constexpr = w_desc.block_type.shape[0]
        BK: gl.constexpr = w_desc.block_type.shape[1]
        if TILED:  # (the grid's first axis is the N / BN row tiles)
            _request(w_desc, (k // BK * gl.num_programs(0) + pid_n) * BN, 0, bar, dst, pred)
        else:
            _request(w_desc, pid_n * BN, k, bar, dst, pred)

    @gluon.jit
    def _paced_landed(pace, ready, j, PACE: gl.constexpr):
        """Wait for weight tile j (on pace barrier j % PACE), then count it as its stage's weight arrival on `ready`
        (a plain arrive: the stage still waits for its x tile where x rides in the ring)."""
        mbarrier.wait(pace.index(j % PACE), (j // PACE) & 1)
        mbarrier.arrive(ready.index(j))

    @gluon.jit
    def _paced_fill(w_desc, w_ring, ready, pace, pid_n, k_begin, FILL: gl.constexpr, BK: gl.constexpr,
                    PACE: gl.constexpr, TILED: gl.constexpr):
        """The ring's first FILL weight tiles with at most PACE in flight: tile j is requested once tile j - PACE has
        landed. The last PACE are left in flight (_paced_drain)."""
        for j in gl.static_range(FILL):
            if j >= PACE:
                _paced_landed(pace, ready, j - PACE, PACE)
            _w_request(w_desc, pid_n, k_begin + j * BK, pace.index(j % PACE), w_ring.index(j), True, TILED)

    @gluon.jit
    def _paced_drain(pace, ready, FILL: gl.constexpr, PACE: gl.constexpr):
        """Wait for the paced tiles _paced_fill left in flight."""
        for j in gl.static_range(FILL):
            if j + PACE >= FILL:
                _paced_landed(pace, ready, j, PACE)
        for j in gl.static_range(PACE):
            mbarrier.invalidate(pace.index(j))

    @gluon.jit
    def _sum_slices(out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, pid_n, tile, num_tiles, part, stride_om, stride_rm,
                    SILU: gl.constexpr, RESIDUAL: gl.constexpr, SPLIT_K: gl.constexpr, BN: gl.constexpr,
                    MP: gl.constexpr, EL: gl.constexpr, DT: gl.constexpr):
        """After this slice's partial is stored: the tile's last program sums the slices in slice order."""
        gl.thread_barrier()
        arrived = gl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            total = gl.zeros([BN, MP], gl.float32, layout=EL)
            for sl in range(0, SPLIT_K):
                total += gl.load(ws_ptr + (sl * num_tiles + tile) * (BN * MP) + part, cache_modifier=".cg")
            gl.atomic_xchg(cnt_ptr + tile, 0)
            _epilogue(total, out_ptr, res_ptr, M, N, pid_n, stride_om, stride_rm, SILU, RESIDUAL, BN, MP, EL, DT)

    @gluon.jit
    def _gemv_kernel(w_desc, x_desc, x_ptr, out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, stride_xm, stride_om, stride_rm,
                     K: gl.constexpr, SILU: gl.constexpr, RESIDUAL: gl.constexpr, PDL: gl.constexpr,
                     SPLIT_K: gl.constexpr, STAGES: gl.constexpr, PRE: gl.constexpr, MP: gl.constexpr,
                     XRING: gl.constexpr, DEFER: gl.constexpr, PACE: gl.constexpr, TILED: gl.constexpr,
                     num_warps: gl.constexpr):
        BN: gl.constexpr = w_desc.block_type.shape[0]
        BK: gl.constexpr = w_desc.block_type.shape[1]
        NK: gl.constexpr = K // SPLIT_K // BK  # weight tiles per program
        if PDL == 3:  # the next kernel may launch at once (its own wait still waits for this whole grid)
            gdc_launch_dependents()
        pid_n = gl.program_id(0)
        pid_s = gl.program_id(1)
        k_begin = pid_s * (K // SPLIT_K)
        w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for j in gl.static_range(STAGES):  # XRING: a stage is ready when its weight and its x tile have arrived
            mbarrier.init(ready.index(j), count=2 if XRING else 1)
        # the weights do not depend on the previous kernel: fill the ring (its first PRE stages) before waiting for it
        if PACE:  # at most PACE tiles in flight (see PACED), on barriers of their own
            pace = gl.allocate_shared_memory(gl.int64, [PACE, 1], mbarrier.MBarrierLayout())
            for j in gl.static_range(PACE):
                mbarrier.init(pace.index(j), count=1)
            FILL: gl.constexpr = PRE if PRE < NK else NK  # the tiles requested before the wait
            _paced_fill(w_desc, w_ring, ready, pace, pid_n, k_begin, FILL, BK, PACE, TILED)
        else:
            for j in gl.static_range(PRE):
                _w_request(w_desc, pid_n, k_begin + j * BK, ready.index(j), w_ring.index(j), j < NK, TILED)
        if PDL == 4:  # (timing-only ablation, NO_WAIT: no wait for the previous kernel; trigger as mode 2)
            gdc_launch_dependents()
        elif PDL:
            gdc_wait()
            if PDL == 2 or (PDL == 6 and NK <= STAGES):
                gdc_launch_dependents()
        for j in gl.static_range(PRE, STAGES):
            _w_request(w_desc, pid_n, k_begin + j * BK, ready.index(j), w_ring.index(j), j < NK, TILED)
        if XRING:  # x [MP, BK] tiles ride in the ring beside the weights (TMA fills rows >= M with zeros)
            x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, MP, BK], x_desc.layout)
            for j in gl.static_range(STAGES):
                _request(x_desc, 0, k_begin + j * BK, ready.index(j), x_bufs.index(j), j < NK)
        else:  # the program's whole x slice, loaded once
            x_bufs = gl.allocate_shared_memory(x_desc.dtype, [NK, MP, BK], x_desc.layout)
            _load_x_slice(x_ptr, x_bufs, M, stride_xm, k_begin, NK, MP, BK, num_warps)
        if PACE:
            _paced_drain(pace, ready, FILL, PACE)
        acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, MP, 16])
        acc = gl.zeros([BN, MP], gl.float32, layout=acc_l)
        for i in range(NK):
            s = i % STAGES
            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
            xt = x_bufs.index(s) if XRING else x_bufs.index(i)  # [MP, BK]
            acc = warpgroup_mma(w_ring.index(s), xt.permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            # stage s is free again: request the tiles STAGES ahead
            more = i + STAGES < NK
            _w_request(w_desc, pid_n, k_begin + (i + STAGES) * BK, ready.index(s), w_ring.index(s), more, TILED)
            if XRING:
                _request(x_desc, 0, k_begin + (i + STAGES) * BK, ready.index(s), x_bufs.index(s), more)
            if PDL == 6 and NK > STAGES:  # mode 6: the next kernel may launch once this program asked for its last tile
                if i == NK - STAGES - 1:
                    gdc_launch_dependents()
        if PDL == 1:
            gdc_launch_dependents()
        for j in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(j))
        EL: gl.constexpr = gl.BlockedLayout([2, 1], [4, 8], [num_warps, 1], [1, 0])
        y = gl.convert_layout(acc, EL)  # [BN, MP]
        DT: gl.constexpr = x_ptr.dtype.element_ty
        if SPLIT_K == 1:
            _epilogue(y, out_ptr, res_ptr, M, N, pid_n, stride_om, stride_rm, SILU, RESIDUAL, BN, MP, EL, DT)
        else:  # every slice stores its partial; the tile's last program sums them in slice order
            tile = pid_n
            num_tiles = gl.num_programs(0)
            # a slice's tile is stored token row by token row ([MP, BN]): the norm kernel reading one row's
            # slices (ops/partials.py) then reads whole sectors
            part = (gl.arange(0, BN, layout=gl.SliceLayout(1, EL))[:, None]
                    + gl.arange(0, MP, layout=gl.SliceLayout(0, EL))[None, :] * BN)
            gl.store(ws_ptr + (pid_s * num_tiles + tile) * (BN * MP) + part, y)
            if not DEFER:  # DEFER: the next RMSNorm kernel sums the slices (ops/partials.py)
                _sum_slices(out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, pid_n, tile, num_tiles, part, stride_om,
                            stride_rm, SILU, RESIDUAL, SPLIT_K, BN, MP, EL, DT)


# (weight rows, K) -> (BN, BK, STAGES, XRING) of the Gluon product: tile, ring depth and where x lives (XRING 1: its
# tiles ride in the ring beside the weights; 0: the program's whole x slice is loaded once after the PDL wait), chosen
# on the H200 (scripts/gluon_gemv_probe.py). A shape not listed runs the Triton kernel. The shipped table is
# gluon_configs.json next to this file; SPARKDEC_GLUON_CONFIGS=path replaces it (the probe's output).
CONFIGS: dict[tuple[int, int], tuple[int, int, int, int]] = {}
# (weight rows, K) -> weight tiles a program requests before its PDL wait (default: the whole ring). Fewer keep HBM
# free for the kernel it overlaps (A/B: scripts/ab_decode.py)
PREFETCH: dict[tuple[int, int], int] = {}
# (weight rows, K) -> tiles a program keeps in flight while it fills its ring before the PDL wait (a tile is requested
# once the one PACE before it has landed), for launches of at most PACED_ROWS rows: the same bytes before the wait,
# but fewer queued at once, so the latency-bound kernels the fill overlaps wait behind less of it. Not listed: the whole
# fill requested at once. The Qwen3-4B o product (its 21 MB fill runs under the attention split), paced at 1 tile for
# one row: 4B decode replay at 2k 2.741/2.755 -> 2.719/2.704 ms, at 8k 3.250/3.252 -> 3.218/3.222, at 1k equal
# (2.610/2.618 -> 2.608/2.615); decode ms/token 2k -0.5%, 8k -0.8 to -1%; 8 rows +0.5-0.8% paced, so they are not
# (paced_ab_h200_2026-12-01_session22*.json;
# gate_up, qkv or all four products paced: slower). Neither changes bits.
PACED: dict[tuple[int, int], int] = {(2560, 4096): 1}
PACED_ROWS = 1
# (session 31: only the first N programs of o's paced launch pacing, the later ones, which find room beside the Gluon
# split only when its programs leave, filling at once: equal at N = 268, slower below, o unpaced in the 1280-key graph
# slowest; pace_first_ab_h200_2026-12-02_session31.json, code in 08b14ef)
# (weight rows, K) -> the ring's stages for launches of at most PACED_ROWS rows (not listed: the table's). Empty here;
# engine/graphs.SHORT_BOUNDS sets the 4B o product's to 3 in its 2048-key graph, where o launches during the attention
# chain beside the Gluon split's programs: a shallower ring lets more of its programs be resident (and fill) before
# the split's leave (session 23, then unsized, 1k -1.4%: lone3_ab_*, smem_ab_*_session23; since session 24 the sized
# 1280-key graph keeps 4 stages: sized_bound_ab_*_session24, retune_ab_*_session29). The same tiles in the same order:
# the same bits.
LONE_ROW_STAGES: dict[tuple[int, int], int] = {}
# the weight shapes the engine stores tile by tile (ops/tiled_weights.py) in the Gluon table's [BN, BK] tiles, on the
# Hopper path (ModelRunner.fuse_weights): the Qwen3-4B o, gate_up and down products. Session 33: every [64, BK] tile
# one contiguous block and a K step's tiles side by side, 4B decode at 1k 2.499/2.482 -> 2.464/2.462 ms/token, 8-row
# replay 2.732/2.733 -> 2.711/2.712 (tiled_mlp_ab_h200_2026-12-02_session33.json); the tiles a row of tiles after
# another equal or slower (tiled1_mlp there); qkv tiled too slower (1-row replay +1.5%, tiled_only_ab_*; likely its
# faster stream delaying the latency-bound kernels under it; in 16 KB tiles, row-major or tiled, slower still:
# tiled_qkv128_ab_*_session34.json); the Qwen3-8B shapes tiled equal (4.389/4.402 -> 4.389/4.391 ms/token,
# tiled_8b_ab_h200_2026-12-02_session34.json), so they stay row-major
TILED_SHAPES: set[tuple[int, int]] = {(2560, 4096), (19456, 2560), (2560, 9728)}
# the drafter's layers' o, gate_up and down too (their shapes are the target's), for the propose graph: propose
# replay 0.683/0.683 -> 0.680/0.680 ms (tiled_draft_ab_h200_2026-12-02_session34.json; tokens tested on the H200)
TILED_DRAFTER = True
# timing-only ablation (scripts/ab_ablate.py): the shapes whose mode-2 products do not wait for the kernel before
# them (PDL 4; outputs garbage). What a product's wait costs bounds what folding that boundary away can gain
NO_WAIT: set[tuple[int, int]] = set()
_DESCRIPTORS: dict[tuple, object] = {}
_HOPPER: dict[torch.device, bool] = {}


def _is_hopper(device: torch.device) -> bool:
    if device not in _HOPPER:
        _HOPPER[device] = torch.cuda.get_device_capability(device) == (9, 0)
    return _HOPPER[device]


def load_configs(path: str | os.PathLike | None = None) -> None:
    """Read {"N,K": [BN, BK, STAGES, XRING]} into CONFIGS."""
    CONFIGS.update(read_table(path, "SPARKDEC_GLUON_CONFIGS", pathlib.Path(__file__).with_name("gluon_configs.json"),
                              "Gluon tile table", "scripts/gluon_gemv_probe.py"))


def row_pad(m: int) -> int:
    """MP: the token rows a program computes (the wgmma n); rows >= m are zeros."""
    return 8 if m <= 8 else 16


def supports(x: torch.Tensor, weight: torch.Tensor, split_k: int) -> tuple[int, int, int, int] | None:
    """The (BN, BK, STAGES, XRING) to run x @ weight^T with, or None where the Triton kernel must run it."""
    if not AVAILABLE or not x.is_cuda or x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
        return None
    cfg = CONFIGS.get((weight.shape[0], weight.shape[1]))
    if cfg is None or not 0 < x.shape[0] <= MAX_ROWS or not _is_hopper(x.device):
        return None
    if weight.shape[1] % (split_k * cfg[1]) or weight.data_ptr() % 16 or weight.stride(0) % 8:
        return None
    if x.data_ptr() % 16 or x.stride(0) % 8:  # TMA: 16-byte aligned base and rows
        return None
    bn, bk, stages, xring = cfg
    if tiles_of(weight) not in (None, (bn, bk)):  # stored in other tiles: the Triton kernel reads any
        return None
    x_tiles = stages if xring else weight.shape[1] // split_k // bk
    if 2 * bk * (stages * bn + x_tiles * row_pad(x.shape[0])) > SMEM_BYTES:
        return None
    return cfg


def tiles_for(w: torch.Tensor) -> tuple[int, int] | None:
    """The (BN, BK) tiles the engine stores w in (TILED_SHAPES on the Hopper Gluon path), or None (row-major)."""
    cfg = CONFIGS.get(tuple(w.shape)) if tuple(w.shape) in TILED_SHAPES else None
    if cfg is None or not AVAILABLE or not w.is_cuda or w.dtype != torch.bfloat16 or not _is_hopper(w.device):
        return None
    return (cfg[0], cfg[1]) if w.shape[0] % cfg[0] == 0 and w.shape[1] % cfg[1] == 0 else None


def _descriptor(t: torch.Tensor, rows: int, cols: int):
    """The TMA descriptor of a 2-D bf16 tensor (weights or x) in [rows, cols] boxes (cached: it encodes only address,
    shape and strides)."""
    key = (t.data_ptr(), tuple(t.shape), t.stride(0), rows, cols)
    if key not in _DESCRIPTORS:
        if len(_DESCRIPTORS) > 4096:  # activations of eager calls come and go: keep the cache bounded
            _DESCRIPTORS.clear()
        layout = gl.NVMMASharedLayout.get_default_for([rows, cols], gl.bfloat16)
        _DESCRIPTORS[key] = TensorDescriptor.from_tensor(t, [rows, cols], layout)
    return _DESCRIPTORS[key]


def gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, res: torch.Tensor, counters: torch.Tensor | None,
         cfg: tuple[int, int, int, int], split_k: int, silu: bool, residual: bool, pdl: int,
         defer: bool = False) -> torch.Tensor:
    """The Gluon product into `out` [M, N] (see module docstring); counters: the Triton kernel's split-K arrival
    counters (each tile's last program resets its counter). defer (split_k > 1): only store the slices' partial
    tiles and return that workspace [split_k, tiles, MP, BN] (ops/partials.py: the next norm kernel sums them)."""
    bn, bk, stages, xring = cfg
    m, k = x.shape
    n = out.shape[1]
    if m <= PACED_ROWS:
        stages = LONE_ROW_STAGES.get(tuple(weight.shape), stages)
    mp = row_pad(m)
    tiles = triton.cdiv(weight.shape[0], bn)
    ws = out
    if split_k > 1:
        ws = torch.empty(split_k * tiles * bn * mp, dtype=torch.float32, device=x.device)
    if pdl == 2 and tuple(weight.shape) in NO_WAIT:
        pdl = 4
    extra = {"launch_pdl": True} if pdl else {}
    pace = PACED.get(tuple(weight.shape), 0) if m <= PACED_ROWS else 0
    tiled = tiles_of(weight)  # (supports: None or this launch's tiles)
    w_desc = _descriptor(weight if tiled is None else weight.view(-1, bk), bn, bk)
    _gemv_kernel[(tiles, split_k)](w_desc, _descriptor(x, mp, bk), x, out, res, ws,
                                   out if counters is None else counters, m, n, x.stride(0), out.stride(0),
                                   res.stride(0), K=k, SILU=silu, RESIDUAL=residual, PDL=pdl, SPLIT_K=split_k,
                                   STAGES=stages, PRE=min(stages, PREFETCH.get(tuple(weight.shape), stages)), MP=mp,
                                   XRING=bool(xring), DEFER=defer, PACE=pace, TILED=tiled is not None, num_warps=4,
                                   **extra)
    return ws if defer else out


load_configs()
