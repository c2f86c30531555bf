"""Hopper (sm_90) matrix products for up to 16 rows in Gluon: a TMA weight ring that starts before the PDL wait.

y = epilogue(x @ W^T) for x [M <= 16, K] bf16, W [N', K]. Same bits as `triton_gemm.gemm` (checked on the H200,
tests/test_gpu.py): each row's reduction runs over K in 16-wide tensor-core steps in K order, then SPLIT_K slices
(the same SPLIT_K as the Triton table) are summed in slice order by the tile's last program. What differs is how the
weights arrive: W is the 64-row wgmma operand (swap-AB: y^T = W x^T, rows padded to MP = 8 or 16 with zeros), fed by
a STAGES-deep TMA ring whose first tiles are requested before the kernel waits for the previous one (weights never
depend on it), so the weight stream does not stop at kernel boundaries. A launch may be persistent (PROGRAMS): a
program then streams several (tile, K slice) items through its one ring, each item's arithmetic unchanged.
"""
from __future__ import annotations

import os
import pathlib

import torch
import triton

from sparkdec.ops.tile_tables import read_table

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
    def _step_at(i, pid, programs, tiles, NK: gl.constexpr, KS: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
        """Where this program's i-th weight tile starts: (weight row, K column). Its items (tile, slice) are pid,
        pid + programs, ...; item w is tile w % tiles of K slice w // tiles, NK weight tiles each."""
        w = pid + (i // NK) * programs
        return (w % tiles) * BN, (w // tiles) * KS + (i % NK) * BK

    @gluon.jit
    def _request_step(w_desc, x_desc, w_ring, x_ring, ready, i, pid, programs, tiles, total, WEIGHT: gl.constexpr,
                      X: gl.constexpr, NK: gl.constexpr, KS: gl.constexpr, STAGES: gl.constexpr):
        """Request the program's i-th weight tile and/or x tile into ring stage i % STAGES (nothing past total)."""
        BN: gl.constexpr = w_desc.block_type.shape[0]
        BK: gl.constexpr = w_desc.block_type.shape[1]
        row, col = _step_at(i, pid, programs, tiles, NK, KS, BN, BK)
        s = i % STAGES
        if WEIGHT:
            _request(w_desc, row, col, ready.index(s), w_ring.index(s), i < total)
        if X:  # x [MP, BK] tiles ride in the ring beside the weights (TMA fills rows >= M with zeros)
            _request(x_desc, 0, col, ready.index(s), x_ring.index(s), i < total)

    @gluon.jit
    def _finish(acc, out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, tile, sl, tiles, stride_om, stride_rm,
                SILU: gl.constexpr, RESIDUAL: gl.constexpr, SPLIT_K: gl.constexpr, BN: gl.constexpr,
                MP: gl.constexpr, DTYPE: gl.constexpr, num_warps: gl.constexpr):
        """One item's accumulator [BN, MP] -> out (SPLIT_K > 1: every slice stores its partial; the tile's last
        program sums them in slice order)."""
        EL: gl.constexpr = gl.BlockedLayout([2, 1], [4, 8], [num_warps, 1], [1, 0])
        y = gl.convert_layout(acc, EL)  # [BN, MP]
        DT: gl.constexpr = DTYPE
        if SPLIT_K == 1:
            _epilogue(y, out_ptr, res_ptr, M, N, tile, stride_om, stride_rm, SILU, RESIDUAL, BN, MP, EL, DT)
        else:
            part = (gl.arange(0, BN, layout=gl.SliceLayout(1, EL))[:, None] * MP
                    + gl.arange(0, MP, layout=gl.SliceLayout(0, EL))[None, :])
            gl.store(ws_ptr + (sl * tiles + tile) * (BN * MP) + part, y)
            gl.thread_barrier()
            arrived = gl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
            if arrived == SPLIT_K - 1:
                total = gl.zeros([BN, MP], gl.float32, layout=EL)
                for s in range(0, SPLIT_K):
                    total += gl.load(ws_ptr + (s * tiles + tile) * (BN * MP) + part, cache_modifier=".cg")
                gl.atomic_xchg(cnt_ptr + tile, 0)
                _epilogue(total, out_ptr, res_ptr, M, N, tile, stride_om, stride_rm, SILU, RESIDUAL, BN, MP, EL, DT)
    @gluon.jit
    def _gemv_kernel(w_desc, x_desc, out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, stride_om, stride_rm, tiles,
                     K: gl.constexpr, SILU: gl.constexpr, RESIDUAL: gl.constexpr, PDL: gl.constexpr,
                     SPLIT_K: gl.constexpr, STAGES: gl.constexpr, PRE: gl.constexpr, MP: gl.constexpr,
                     num_warps: gl.constexpr):
        BN: gl.constexpr = w_desc.block_type.shape[0]
        BK: gl.constexpr = w_desc.block_type.shape[1]
        KS: gl.constexpr = K // SPLIT_K
        NK: gl.constexpr = KS // BK  # weight tiles per item
        pid = gl.program_id(0)
        programs = gl.num_programs(0)
        items = (tiles * SPLIT_K - pid + programs - 1) // programs  # this program's (tile, slice) items
        total = items * NK  # and weight tiles: one ring streams them all, across items
        w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
        x_ring = gl.allocate_shared_memory(x_desc.dtype, [STAGES, MP, BK], x_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for j in gl.static_range(STAGES):  # a stage is ready when its weight and its x tile have arrived
            mbarrier.init(ready.index(j), count=2)
        # the weights do not depend on the previous kernel: fill the ring (its first PRE stages) before waiting for it
        for j in gl.static_range(PRE):
            _request_step(w_desc, x_desc, w_ring, x_ring, ready, j, pid, programs, tiles, total, True, False, NK, KS,
                          STAGES)
        if PDL:
            gdc_wait()
            if PDL == 2:
                gdc_launch_dependents()
        for j in gl.static_range(STAGES):
            _request_step(w_desc, x_desc, w_ring, x_ring, ready, j, pid, programs, tiles, total, j >= PRE, True, NK,
                          KS, STAGES)
        acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, MP, 16])
        for item in range(items):
            acc = gl.zeros([BN, MP], gl.float32, layout=acc_l)
            for k in range(NK):
                i = item * NK + k
                s = i % STAGES
                mbarrier.wait(ready.index(s), (i // STAGES) & 1)
                acc = warpgroup_mma(w_ring.index(s), x_ring.index(s).permute((1, 0)), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                # stage s is free again: request the tiles STAGES ahead (the next item's, near an item's end)
                _request_step(w_desc, x_desc, w_ring, x_ring, ready, i + STAGES, pid, programs, tiles, total, True,
                              True, NK, KS, STAGES)
            w = pid + item * programs
            _finish(acc, out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, w % tiles, w // tiles, tiles, stride_om, stride_rm,
                    SILU, RESIDUAL, SPLIT_K, BN, MP, x_desc.dtype, num_warps)
        if PDL == 1:
            gdc_launch_dependents()
        for j in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(j))


# (weight rows, K) -> (BN, BK, STAGES, XRING) of the Gluon product: tile, ring depth and where x lives (XRING 1: its
# tiles ride in the ring beside the weights, the only layout this kernel has; a 0 from older tables runs Triton), chosen
# on the H200 (scripts/gluon_gemv_probe.py). A shape not listed runs the Triton kernel. The shipped table is
# gluon_configs.json next to this file; SPARKDEC_GLUON_CONFIGS=path replaces it (the probe's output).
CONFIGS: dict[tuple[int, int], tuple[int, int, int, int]] = {}
# (weight rows, K) -> weight tiles a program requests before its PDL wait (default: the whole ring). Fewer keep HBM
# free for the kernel it overlaps (A/B: scripts/ab_decode.py)
PREFETCH: dict[tuple[int, int], int] = {}
# (weight rows, K) -> programs of a persistent launch: each streams the weight tiles of items (tile, K slice) pid,
# pid + programs, ... through one ring (default: one program per item)
PROGRAMS: dict[tuple[int, int], int] = {}
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


def _row_pad(m: int) -> int:
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
    if not xring or 2 * bk * stages * (bn + _row_pad(x.shape[0])) > SMEM_BYTES:
        return None
    return cfg


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
         cfg: tuple[int, int, int, int], split_k: int, silu: bool, residual: bool, pdl: int) -> torch.Tensor:
    """The Gluon product into `out` [M, N] (see module docstring); counters: the Triton kernel's split-K arrival
    counters (each tile's last program resets its counter)."""
    bn, bk, stages, _ = cfg
    m, k = x.shape
    n = out.shape[1]
    mp = _row_pad(m)
    tiles = triton.cdiv(weight.shape[0], bn)
    ws = out
    if split_k > 1:
        ws = torch.empty(split_k * tiles * bn * mp, dtype=torch.float32, device=x.device)
    extra = {"launch_pdl": True} if pdl else {}
    shape = tuple(weight.shape)
    programs = min(tiles * split_k, PROGRAMS.get(shape, tiles * split_k))
    _gemv_kernel[(programs, )](_descriptor(weight, bn, bk), _descriptor(x, mp, bk), out, res, ws,
                               out if counters is None else counters, m, n, out.stride(0), res.stride(0), tiles, K=k,
                               SILU=silu, RESIDUAL=residual, PDL=pdl, SPLIT_K=split_k, STAGES=stages,
                               PRE=min(stages, PREFETCH.get(shape, stages)), MP=mp, num_warps=4, **extra)
    return out


load_configs()
