"""Hopper (sm_90) products for up to 16 rows whose weight tiles go to registers, not shared memory (Gluon).

The weight is stored tile by tile with each [64, 128] tile in wgmma's A-fragment order (ops/tiled_weights.py,
FRAGMENT): thread t's registers 8c .. 8c + 7 of a tile lie at elements (c * 128 + t) * 8 .. + 7, so a tile is eight
16-byte loads per thread (a warp's load of one chunk: 512 contiguous bytes), and the loaded registers are the A
operand of a swap-AB wgmma m64nMPk16 as they are (the reshape and permute below lower to no data movement). A program
keeps four tiles in flight, the first four requested before its PDL wait, and uses almost no shared memory (its x
slice), so it is resident beside kernels that fill the SM's shared memory (the attention split during which o's
programs wait). Same bits as the shared-memory Gluon product and the Triton kernel (the same 16-wide K steps in K
order, split-K slices summed in slice order; checked on the H200, tests/test_gpu.py).
"""
from __future__ import annotations

import torch

from sparkdec.ops import gluon_gemv as gg

TILE_N, TILE_K, IN_FLIGHT = 64, 128, 4  # the stored tile, and the tiles a program keeps in flight

if gg.AVAILABLE:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    @gluon.jit
    def _fragment_tile(w_ptr, tile):
        """Stored tile `tile` (8192 elements in fragment order) -> the wgmma A operand [64, 128] in registers."""
        vl: gl.constexpr = gl.BlockedLayout([8, 1, 8], [1, 32, 1], [1, 4, 1], [2, 1, 0])
        c = gl.arange(0, 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, vl)))
        t = gl.arange(0, 128, layout=gl.SliceLayout(0, gl.SliceLayout(2, vl)))
        e = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, vl)))
        v = gl.load(w_ptr + tile * 8192 + c[:, None, None] * 1024 + t[None, :, None] * 8 + e[None, None, :])
        # [c, t, e] -> [row, k]: the position bits (c2 c1 c0 t6 .. t0 e2 e1 e0) in the tile's order (r5 .. r0,
        # k6 .. k0); tiled_weights._FRAGMENT_BITS is the inverse
        v = gl.reshape(v, [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2])
        v = gl.permute(v, [3, 4, 11, 5, 6, 7, 0, 1, 2, 10, 8, 9, 12])
        return gl.reshape(v, [64, 128])

    @gluon.jit
    def _regfed_kernel(w_ptr, x_ptr, out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, stride_xm, stride_om, stride_rm,
                       K: gl.constexpr, SILU: gl.constexpr, RESIDUAL: gl.constexpr, PDL: gl.constexpr,
                       SPLIT_K: gl.constexpr, MP: gl.constexpr, DEFER: gl.constexpr, num_warps: gl.constexpr):
        NK: gl.constexpr = K // SPLIT_K // 128  # this program's tiles (at least IN_FLIGHT)
        gl.static_assert(NK >= 4)
        if PDL == 3:
            gdc_launch_dependents()
        acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, MP, 16])
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
        pid = gl.program_id(0)
        pid_s = gl.program_id(1)
        tiles = gl.num_programs(0)
        first = pid_s * NK  # the slice's first K step; K step j's tiles lie side by side: tile j * tiles + pid
        a0 = _fragment_tile(w_ptr, first * tiles + pid)  # the first four: before the wait (weights never depend on it)
        a1 = _fragment_tile(w_ptr, (first + 1) * tiles + pid)
        a2 = _fragment_tile(w_ptr, (first + 2) * tiles + pid)
        a3 = _fragment_tile(w_ptr, (first + 3) * tiles + pid)
        if PDL == 4:  # (timing-only ablation, gluon_gemv.NO_WAIT)
            gdc_launch_dependents()
        elif PDL:
            gdc_wait()
            if PDL == 2:
                gdc_launch_dependents()
        xs_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([MP, 128], gl.bfloat16)
        x_smem = gl.allocate_shared_memory(gl.bfloat16, [NK, MP, 128], xs_l)
        gg._load_x_slice(x_ptr, x_smem, M, stride_xm, pid_s * (K // SPLIT_K), NK, MP, 128, num_warps)
        acc = gl.zeros([64, MP], gl.float32, layout=acc_l)
        for i in gl.static_range(NK):  # K order, one tile a step
            acc = warpgroup_mma(gl.convert_layout(a0, a_l, assert_trivial=True), x_smem.index(i).permute((1, 0)), acc)
            a0, a1, a2 = a1, a2, a3  # the tiles in flight move up a slot (unrolled: register renaming)
            if i + 4 < NK:
                a3 = _fragment_tile(w_ptr, (first + i + 4) * tiles + pid)
        if PDL == 1:
            gdc_launch_dependents()
        el: gl.constexpr = gl.BlockedLayout([2, 1], [4, 8], [num_warps, 1], [1, 0])
        y = gl.convert_layout(acc, el)  # [64, MP]
        DT: gl.constexpr = x_ptr.dtype.element_ty
        if SPLIT_K == 1:
            gg._epilogue(y, out_ptr, res_ptr, M, N, pid, stride_om, stride_rm, SILU, RESIDUAL, 64, MP, el, DT)
        else:  # the slice's fp32 tile in the shipped product's workspace [SPLIT_K, tiles, MP, 64]
            part = (gl.arange(0, 64, layout=gl.SliceLayout(1, el))[:, None]
                    + gl.arange(0, MP, layout=gl.SliceLayout(0, el))[None, :] * 64)
            gl.store(ws_ptr + (pid_s * tiles + pid) * (64 * MP) + part, y)
            if not DEFER:
                gg._sum_slices(out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, pid, pid, tiles, part, stride_om, stride_rm,
                               SILU, RESIDUAL, SPLIT_K, 64, MP, el, DT)


def supports(x: torch.Tensor, weight: torch.Tensor, split_k: int) -> bool:
    """Whether the register-fed product runs x @ weight^T: a FRAGMENT-stored bf16 weight, up to 16 bf16 rows on
    sm_90, at least IN_FLIGHT tiles per program."""
    from sparkdec.ops.tiled_weights import FRAGMENT, tiles_of

    if not gg.AVAILABLE or not x.is_cuda or x.dtype != torch.bfloat16 or not 0 < x.shape[0] <= gg.MAX_ROWS:
        return False
    if tiles_of(weight) != (TILE_N, TILE_K, FRAGMENT) or not gg._is_hopper(x.device):
        return False
    k = weight.shape[1]
    return k % (split_k * TILE_K) == 0 and k // split_k // TILE_K >= IN_FLIGHT and x.stride(1) == 1


def gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, res: torch.Tensor, counters: torch.Tensor | None,
         split_k: int, silu: bool, residual: bool, pdl: int, defer: bool = False) -> torch.Tensor:
    """The register-fed product into `out` [M, N] (gluon_gemv.gemv's contract: defer returns the slices' workspace
    [split_k, tiles, MP, 64] for the next norm kernel)."""
    m, k = x.shape
    mp = gg.row_pad(m)
    tiles = weight.shape[0] // TILE_N
    ws = out
    if split_k > 1:
        ws = torch.empty(split_k * tiles * TILE_N * mp, dtype=torch.float32, device=x.device)
    if pdl == 2 and tuple(weight.shape) in gg.NO_WAIT:
        pdl = 4
    extra = {"launch_pdl": True} if pdl else {}
    _regfed_kernel[(tiles, split_k)](weight, x, out, res, ws, out if counters is None else counters, m, out.shape[1],
                                     x.stride(0), out.stride(0), res.stride(0), K=k, SILU=silu, RESIDUAL=residual,
                                     PDL=pdl, SPLIT_K=split_k, MP=mp, DEFER=defer, num_warps=4, **extra)
    return ws if defer else out

