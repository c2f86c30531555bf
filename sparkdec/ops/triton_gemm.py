"""Batch-invariant Triton matrix products (CUDA), with optional residual / SiLU epilogues and a fixed split-K.

y = epilogue(x @ W^T) for x [M, K], W [N, K]. A row's reduction runs over K in fixed steps inside one
program (and, with SPLIT_K, in fixed slices summed in slice order), so its result never depends on M or on
the other rows (DESIGN §3.4). SPLIT_K is a function of (N, K) only; the tile height grows with M (row_tile),
which changes no row's bits.

Fusions (each replaces a kernel of the reference layer):
- silu: W interleaves gate and up rows; y = silu(x @ gate^T) * (x @ up^T) (Qwen3 MLP);
- residual: y = residual + x @ W^T (the decoder layer's skip connection).
Launched with programmatic dependent launch (PDL) where the device supports it: the next kernel's programs
start while this one drains, and wait (gdc_wait) before reading anything the previous kernel wrote.
"""
from __future__ import annotations

import os
import pathlib

import torch
import triton
import triton.language as tl

from sparkdec.env import choice, flag
from sparkdec.ops import gluon_gemv
from sparkdec.ops.tiled_weights import tiles_of
from sparkdec.ops.partials import Partials
from sparkdec.ops.tile_tables import read_table

BLOCK_M = 16
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# programmatic dependent launch: 0 off; 1: a kernel lets the next launch after its main work; 2: right after its
# own wait (the next kernel's programs start and load their first weight tile while this one runs); 3 (pdl_launch_early:
# the RMSNorms, the q/k norm + RoPE kernel, the attention split and combine, the Gluon products): at its start.
# SPARKDEC_PDL overrides; read at every launch, so an A/B run can switch it in one process.
PDL_MODE = 0 if INTERPRET else choice("SPARKDEC_PDL", 1, (0, 1, 2))
# up to 16 bf16 rows on an H200/H100 run the Gluon product (ops/gluon_gemv.py, same bits) for the shapes in its
# table; SPARKDEC_GLUON=0 keeps every product on the Triton kernel. Read at every launch (A/B runs patch it).
GLUON = flag("SPARKDEC_GLUON", True)
# PDL mode per kind of kernel where PDL is on (a kind not listed takes PDL_MODE). Kinds: "gluon" (the Gluon products),
# "norm" (RMSNorm; "norm_mlp", the one before the MLP, as "norm" unless listed), "rope" (q/k norm + RoPE + KV store),
# "split" and "combine" (attention). Chosen on the H200 (pdl_kinds_ab_h200_2026-11-30.json): the Gluon products, the
# RMSNorms, the q/k norm + RoPE kernel and the attention combine let the next kernel launch right after their wait (a
# product's weight ring fills meanwhile; RoPE at 2: decode replay -0.9% at 1k, -1% at 8k,
# rope_pdl_ab_h200_2026-11-30.json); the attention split kernel at mode 2 made 8-row verify 17-25% slower at 8k (its
# waiting dependents take its slots), so it keeps mode 1. Mode 3 (session 18): RoPE, split and combine at 3 gave one
# decode row at 1k -1.2%, but 8 rows +3% and 8k +4-14%; the norms or products at 3 were slower
# (pdl_early_ab_h200_2026-11-30_session18.json). Not used. In the short graphs (engine/graphs.SHORT_PDL) the norm before
# the MLP at 3 or 1, or the one before qkv at 3, were slower too (1k replay 2.619 -> 2.710, 2.683, 2.651 ms;
# short_norm_pdl_ab_h200_2026-12-01_session20.json).
PDL_KINDS: dict[str, int] = {"gluon": 2, "norm": 2, "rope": 2, "combine": 2}
# a kind not listed takes this kind's mode, where that one is. "gluon_qkv", "gluon_o", "gluon_gate_up" and "gluon_down"
# are the decoder layer's four products (o and down come before the two RMSNorms). Mode 6 (Gluon products only): the
# next kernel may launch once each program has asked for its last weight tile in its main loop, or right after its wait
# where its first ring holds every tile (as mode 2; never before the wait)
_FALLBACK = {"norm_mlp": "norm", "gluon_qkv": "gluon", "gluon_o": "gluon", "gluon_gate_up": "gluon",
             "gluon_down": "gluon"}
# (session 36-37: mode 5 for the RMSNorms, the next product launching once the norm's loads after its wait were done,
# so that its ring fill would not queue ahead of them: same tokens, 1k decode 2.490/2.473 -> 2.527/2.519 ms/token for
# the norm before the MLP, 2.538 for both norms, 2.480 for the one before qkv alone; norm_pdl5_ab_h200_2026-12-02_session37.json;
# removed, code in 4d132f2)

# the MLP's gate_up and down products in one persistent Gluon launch (ops/gluon_mlp.py, same bits; written in
# session 11): exact on the H200 but slower than the two launches (persistent_mlp_gluon_ab_h200_2026-11-30.json), off
FUSED_MLP = False
# the o and down products (split-K, + residual) of a Gluon launch leave their slices unsummed for the RMSNorm kernel
# after them (ops/partials.py; gemm(..., partial=True)), which sums them as the product's last program would (same
# tokens, plain and speculative). H200, 4B shape, ctx 1k, decode graph replay 2.875/2.885 -> 2.731/2.732 ms at 1 row,
# 3.072 -> 2.905 at 8 (sum_in_norm_ab_h200_2026-11-30.json). SPARKDEC_SUM_IN_NORM=0 turns it off (read at every
# launch: A/B runs patch it)
SUM_IN_NORM = flag("SPARKDEC_SUM_IN_NORM", True)
# (staged, A/B: scripts/ab_decode.py "qkv_s2_rope") the qkv product leaves its split-K slices to the q/k norm + RoPE
# kernel (ops/triton_fused.qkv_rope_store sums them as the product's last program would). With qkv at split-K 1 (the
# table's) it never engages; at split-K 2 qkv runs 192 programs on all SMs rather than 96 on 96 (its stream in the
# decode graph: about 3.1 TB/s, session 22's timeline), with no arrival counters or tail reload
QKV_SLICES_TO_ROPE = False


def pdl_mode(kind: str | None = None) -> int:
    """The PDL mode of a kernel of this kind (None: not a kind with its own mode)."""
    if not PDL_MODE:
        return 0
    return PDL_KINDS.get(kind, PDL_KINDS.get(_FALLBACK.get(kind), PDL_MODE))


def pdl_args(kind: str | None = None) -> dict:
    """The PDL constexpr and launch option of a Triton kernel of the CUDA path."""
    mode = pdl_mode(kind)
    return {"PDL": mode, "launch_pdl": True} if mode else {"PDL": 0}


if not INTERPRET:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
else:  # the interpreter has no grid dependency control; PDL is off there
    gdc_launch_dependents = gdc_wait = None


@triton.jit
def pdl_wait(PDL: tl.constexpr):
    """Before reading anything the previous kernel wrote: wait for it (PDL on); mode 2 then lets the next
    kernel launch (one kernel of lookahead)."""
    if PDL:
        gdc_wait()
        if PDL == 2:
            gdc_launch_dependents()


@triton.jit
def pdl_launch_early(PDL: tl.constexpr):
    """Mode 3: let the next kernel launch at this kernel's start, before its wait, so that the next kernel's work
    that reads nothing of this one's (the Gluon split's key copies) runs during the kernel before this one. Safe:
    the next kernel's own wait still waits for this whole grid, and this grid for the one before it."""
    if PDL == 3:
        gdc_launch_dependents()


@triton.jit
def pdl_release(PDL: tl.constexpr):
    """Mode 1: after this kernel's main work, let the next kernel launch."""
    if PDL == 1:
        gdc_launch_dependents()


# (weight rows, K) -> (BLOCK_N weight rows per tile, BLOCK_K, SPLIT_K, num_warps, num_stages), chosen on the
# H200 (scripts/sweep_gemm.py). Never a function of M: SPLIT_K and BLOCK_K fix each row's reduction order.
# The shipped table is sparkdec/ops/gemm_configs.json; SPARKDEC_GEMM_CONFIGS=path replaces it (a sweep's output).
CONFIGS: dict[tuple[int, int], tuple[int, int, int, int, int]] = {}
_COUNTERS: dict[torch.device, torch.Tensor] = {}
_RETIRED: list[torch.Tensor] = []
MAX_TILES = 1 << 16


def load_configs(path: str | os.PathLike | None = None) -> None:
    """Read {"N,K": [BLOCK_N, BLOCK_K, SPLIT_K, warps, stages]} into CONFIGS."""
    CONFIGS.update(read_table(path, "SPARKDEC_GEMM_CONFIGS", pathlib.Path(__file__).with_name("gemm_configs.json"),
                              "GEMM tile table", "scripts/sweep_gemm.py"))


def row_tile(m: int, block_n: int, block_k: int, warps: int, stages: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) for M rows. Small M keeps the tuned 16-row tile (decode,
    verify: bandwidth-bound); large M (prefill) takes 64- or 128-row tiles (Hopper wgmma, 3-5x the throughput).
    A row's bits do not change: they depend only on the order of the K steps (16 at a time, then SPLIT_K
    slices), never on the tile's height or BLOCK_K (checked bitwise on the H200, tests/test_gpu.py)."""
    if m > 256:
        return 128, 256, min(64, block_k), 8, 3
    if m > 64:
        return 64, 128, min(64, block_k), 4, 3
    return BLOCK_M, block_n, block_k, warps, stages


def pick_config(n: int, k: int) -> tuple[int, int, int, int, int]:
    if (n, k) in CONFIGS:
        return CONFIGS[(n, k)]
    block_k = max(16, min(256, triton.next_power_of_2(k)))
    block_n = 16 if n <= 4096 else 32
    return block_n, block_k, 1, 4, 4


def _counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Per-tile arrival counters of split-K programs; each tile's last program resets its counter to 0.
    Grows (a new zeroed buffer) when a call has more tiles than any before (long prefill chunks)."""
    if device not in _COUNTERS or _COUNTERS[device].numel() < tiles:
        if device in _COUNTERS:  # NOTE: captured CUDA graphs still point at the old buffer: keep it alive
            _RETIRED.append(_COUNTERS[device])
        _COUNTERS[device] = torch.zeros(max(MAX_TILES, triton.next_power_of_2(tiles)), dtype=torch.int32,
                                        device=device)
    return _COUNTERS[device]


@triton.jit
def _load_w(w_ptr, cols, cmask, kk, kmask, stride_wn, row_tiles, TILE_N: tl.constexpr, TILE_K: tl.constexpr):
    """W[cols, kk]; TILE_N > 0: W stored tile by tile (ops/tiled_weights.py: [K / TILE_K, row_tiles, TILE_N,
    TILE_K] tiles, row_tiles = N' / TILE_N)."""
    if TILE_N:
        tile = (kk // TILE_K)[None, :] * row_tiles + (cols // TILE_N)[:, None]
        offs = tile * (TILE_N * TILE_K) + (cols % TILE_N)[:, None] * TILE_K + (kk % TILE_K)[None, :]
    else:
        offs = cols[:, None] * stride_wn + kk[None, :]
    return tl.load(w_ptr + offs, mask=cmask[:, None] & kmask[None, :], other=0.0)


@triton.jit
def _load_x(x_ptr, rows, rmask, kk, kmask, stride_xm):
    return tl.load(x_ptr + rows[:, None] * stride_xm + kk[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0)


@triton.jit
def _mma(acc, x, w, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(x, tl.trans(w), acc, input_precision="ieee")
    return tl.dot(x, tl.trans(w), acc)


@triton.jit
def _epilogue(acc, out_ptr, res_ptr, rows, rmask, pid_n, N, stride_om, stride_rm, SILU: tl.constexpr,
              RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr, OUT_N: tl.constexpr, DT: tl.constexpr):
    # DT: the activations' dtype. Results are rounded to it, then stored as the output's dtype (float32 logits:
    # the rounded value, as the reference `linear(h, W).float()`, without a second kernel)
    dt = DT
    cols = pid_n * OUT_N + tl.arange(0, OUT_N)
    if SILU:
        gate, up = tl.split(tl.reshape(acc, [BLOCK_M, OUT_N, 2]))  # [BLOCK_M, OUT_N] each
        g = gate.to(dt).to(tl.float32)
        y = (g / (1.0 + tl.exp(-g))).to(dt) * up.to(dt)
    else:
        y = acc.to(dt)
    omask = rmask[:, None] & (cols < N)[None, :]
    if RESIDUAL:
        r = tl.load(res_ptr + rows[:, None] * stride_rm + cols[None, :], mask=omask, other=0.0)
        # NOTE: the sum is rounded to the activation dtype, as the reference `h = h + delta` does
        y = (r.to(tl.float32) + y.to(tl.float32)).to(dt)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=omask)


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, stride_xm, stride_wn, stride_om, stride_rm,
                 row_tiles, K: tl.constexpr, SILU: tl.constexpr, RESIDUAL: tl.constexpr,
                 IEEE: tl.constexpr, PDL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, TILE_N: tl.constexpr = 0, TILE_K: tl.constexpr = 0):
    pid_m = tl.program_id(0)  # NOTE: M tiles vary fastest, so the programs sharing a weight block run together
    pid_n = tl.program_id(1)
    pid_s = tl.program_id(2)  # which K slice (SPLIT_K > 1)
    # with SILU the weight rows interleave gate and up (g0, u0, g1, u1, ...): BLOCK_N rows give BLOCK_N/2 outputs
    OUT_N: tl.constexpr = BLOCK_N // 2 if SILU else BLOCK_N
    K_SLICE: tl.constexpr = K // SPLIT_K
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    wrows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    rmask = rows < M
    wmask = wrows < (2 * N if SILU else N)
    k_begin = pid_s * K_SLICE
    # the first weight tile does not depend on the previous kernel: load it before waiting for that kernel
    # (two or three tiles were slower: propose_glue_ahead_ab_h200_2026-11-30.json)
    w = _load_w(w_ptr, wrows, wmask, k_begin + ks, k_begin + ks < K, stride_wn, row_tiles, TILE_N, TILE_K)
    pdl_wait(PDL)
    x = _load_x(x_ptr, rows, rmask, k_begin + ks, k_begin + ks < K, stride_xm)
    acc = _mma(tl.zeros([BLOCK_M, BLOCK_N], tl.float32), x, w, IEEE)
    for k0 in range(BLOCK_K, K_SLICE, BLOCK_K):
        kk = k_begin + k0 + ks
        kmask = kk < K
        x = _load_x(x_ptr, rows, rmask, kk, kmask, stride_xm)
        acc = _mma(acc, x, _load_w(w_ptr, wrows, wmask, kk, kmask, stride_wn, row_tiles, TILE_N, TILE_K), IEEE)
    pdl_release(PDL)
    finish_tile(acc, out_ptr, res_ptr, ws_ptr, cnt_ptr, rows, rmask, pid_m, pid_n, pid_s, N, stride_om, stride_rm,
                SILU, RESIDUAL, BLOCK_M, BLOCK_N, OUT_N, SPLIT_K, x_ptr.dtype.element_ty)


@triton.jit
def finish_tile(acc, out_ptr, res_ptr, ws_ptr, cnt_ptr, rows, rmask, pid_m, pid_n, pid_s, N, stride_om, stride_rm,
                SILU: tl.constexpr, RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                OUT_N: tl.constexpr, SPLIT_K: tl.constexpr, DT: tl.constexpr):
    """The epilogue of one tile; with SPLIT_K, every slice stores its fp32 partial product and the tile's last
    program to arrive sums them in slice order (0, 1, ...), so the result does not depend on which program
    finished first."""
    if SPLIT_K == 1:
        _epilogue(acc, out_ptr, res_ptr, rows, rmask, pid_n, N, stride_om, stride_rm, SILU, RESIDUAL, BLOCK_M, OUT_N,
                  DT)
    else:
        tile = pid_n * tl.num_programs(0) + pid_m
        num_tiles = tl.num_programs(0) * tl.num_programs(1)
        m_idx = tl.arange(0, BLOCK_M)
        part = m_idx[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        tl.store(ws_ptr + (pid_s * num_tiles + tile) * (BLOCK_M * BLOCK_N) + part, acc)
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            total = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for s in range(0, SPLIT_K):
                total += tl.load(ws_ptr + (s * num_tiles + tile) * (BLOCK_M * BLOCK_N) + part, cache_modifier=".cg")
            tl.atomic_xchg(cnt_ptr + tile, 0)
            _epilogue(total, out_ptr, res_ptr, rows, rmask, pid_n, N, stride_om, stride_rm, SILU, RESIDUAL, BLOCK_M,
                      OUT_N, DT)


def split_k_of(n: int, k: int) -> int:
    """The split-K of an (N, K) product (part of its rows' bits): the table's, unless its K does not divide."""
    block_k, split_k = pick_config(n, k)[1:3]
    return 1 if k % (split_k * block_k) else split_k


def mlp(h, gate_up: torch.Tensor, down: torch.Tensor, norm: tuple[torch.Tensor, float]):
    """h + down(silu(gate) * up) of RMSNorm(h): the norm kernel, then the gate_up and down products (with FUSED_MLP,
    in one persistent launch where ops/gluon_mlp.py supports the shapes: the same bits). h may be a product's
    unsummed slices (ops/partials.py), and so may the result (partial: see SUM_IN_NORM)."""
    from sparkdec.ops.triton_fused import norm_of

    x, h = norm_of(h, norm[0], norm[1], kind="norm_mlp")
    if FUSED_MLP and GLUON and 0 < h.shape[0] and tiles_of(gate_up) is None and tiles_of(down) is None:
        from sparkdec.ops import gluon_mlp

        split_gu, split_dn = split_k_of(*gate_up.shape), split_k_of(*down.shape)
        if gluon_mlp.supports(x, gate_up, down, split_gu, split_dn):
            return gluon_mlp.mlp(x, gate_up, down, h, split_dn, pdl_mode("gluon"))
    y = gemm(x, gate_up, silu=True, pdl_kind="gluon_gate_up")
    return gemm(y, down, residual=h, partial=True, pdl_kind="gluon_down")


def gemm(x: torch.Tensor, weight: torch.Tensor, *, silu: bool = False, residual: torch.Tensor | None = None,
         out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None, partial: bool = False,
         pdl_kind: str = "gluon"):
    """x [M, K] @ weight[N', K]^T -> [M, N] with N = N'/2 for silu (weight rows interleave gate and up:
    g0, u0, g1, u1, ...; see interleave_gate_up), else N'.
    residual [M, N]: add it to the product. out_dtype (float32 logits): the result rounded to x's dtype, stored
    as out_dtype (what `.to(out_dtype)` of the product gives, in the same launch). An `out` of another dtype
    than x's gets that rounding too. partial: where SUM_IN_NORM holds and a split-K Gluon launch runs it, return its
    unsummed slices (ops/partials.Partials, for the next norm kernel; with no residual, for the q/k norm + RoPE
    kernel) instead of the tensor. pdl_kind: the PDL kind of a Gluon launch (PDL_KINDS)."""
    m, k = x.shape
    assert x.stride(1) == 1 and weight.stride(1) == 1, "gemm: rows must be contiguous"
    n = weight.shape[0] // 2 if silu else weight.shape[0]
    block_n, block_k, _, warps, stages = pick_config(weight.shape[0], k)
    split_k = split_k_of(weight.shape[0], k)
    block_m, block_n, block_k, warps, stages = row_tile(m, block_n, block_k, warps, stages)
    if out is None:
        out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    if m == 0:
        return out
    res = residual if residual is not None else out
    gluon_cfg = gluon_gemv.supports(x, weight, split_k) if GLUON else None
    if gluon_cfg is not None:
        tiles = triton.cdiv(weight.shape[0], gluon_cfg[0])
        counters = _counters(x.device, tiles) if split_k > 1 else None
        defer = partial and SUM_IN_NORM and split_k > 1 and not silu and out.dtype == x.dtype
        got = gluon_gemv.gemv(x, weight, out, res, counters, gluon_cfg, split_k, silu, residual is not None,
                              pdl_mode(pdl_kind), defer=defer)
        if defer:  # got: the slices' workspace
            return Partials(got, residual, out, split_k, tiles, gluon_cfg[0], gluon_gemv.row_pad(m))
        return got
    grid = (triton.cdiv(m, block_m), triton.cdiv(weight.shape[0], block_n), split_k)
    ws, cnt = out, out
    if split_k > 1:
        tiles = grid[0] * grid[1]
        ws = torch.empty(split_k * tiles * block_m * block_n, dtype=torch.float32, device=x.device)
        cnt = _counters(x.device, tiles)
    tile_n, tile_k = tiles_of(weight) or (0, 0)  # a weight stored tile by tile (ops/tiled_weights.py)
    _gemm_kernel[grid](x, weight, out, res, ws, cnt, m, n, x.stride(0), weight.stride(0), out.stride(0),
                       res.stride(0), weight.shape[0] // max(tile_n, 1), K=k, SILU=silu, RESIDUAL=residual is not None,
                       IEEE=x.dtype == torch.float32, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                       SPLIT_K=split_k, TILE_N=tile_n, TILE_K=tile_k, num_warps=warps, num_stages=stages,
                       **pdl_args())
    return out


load_configs()


def interleave_gate_up(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """[I, K], [I, K] -> [2I, K] with rows g0, u0, g1, u1, ... (the layout gemm(..., silu=True) reads)."""
    return torch.stack([gate, up], 1).reshape(2 * gate.shape[0], gate.shape[1])
