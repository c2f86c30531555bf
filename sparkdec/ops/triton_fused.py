"""Fused Triton kernels for the CUDA path: RMSNorm (+ residual add, or + a split-K product's slices), q/k norm + RoPE +
KV store.

One program per row (or per row and head), so a row's result never depends on the batch. Each kernel has
the torch reference in ops/norms.py / ops/rope.py; tests/test_ops.py checks them in Triton's interpreter.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.ops import stamps
from sparkdec.ops.partials import Partials
from sparkdec.ops.stamps import stamp
from sparkdec.ops.triton_gemm import pdl_args, pdl_launch_early, pdl_release, pdl_wait


# the warps of both RMSNorm kernels (one program per row): they set the sum of squares' reduction order, so the two
# kernels must share them (a row's bits then do not depend on which kernel normed it)
NORM_WARPS = 4


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, n, eps, stride_x, stride_o,
                     HAS_RES: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_launch_early(PDL)
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)  # a weight: read while the previous kernel drains
    pdl_wait(PDL)
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_RES:
        # NOTE: the sum is rounded to the activation dtype first, as the reference `h = h + delta` does
        x = (x.to(tl.float32) + tl.load(res_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32))
        x = x.to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_o + offs, x, mask=mask)
    _norm_store(x, w, out_ptr + row * stride_o, offs, mask, n, eps)


@triton.jit
def _norm_store(x, w, out_ptr, offs, mask, n, eps):
    """RMSNorm of one row x (the activation dtype) with weight w, stored at out_ptr[offs]."""
    xf = x.to(tl.float32)
    inv = tl.rsqrt(tl.sum(xf * xf, 0) / n + eps)
    y = (xf * inv).to(x.dtype)
    tl.store(out_ptr + offs, (w * y).to(out_ptr.dtype.element_ty), mask=mask)


# the slices' norm reads its residual before its PDL wait. What makes that safe:
# - this kernel is the very next launch after the Gluon product that left the slices (every norm_of call site);
# - that product lets this kernel launch only after its own wait (PDL modes 1, 2 and 6; not 3 or 4, which no product
#   before a slices norm may take), so the kernel before the product has finished, and so, each PDL kernel waiting in
#   its programs before it finishes, every kernel before;
# - the residual (the layer's input, or the attention's sum written by the post-o norm) was written by one of those,
#   and the product never writes it.
# 4B replay at 1k: 8 rows 2.872/2.875 -> 2.848/2.846 ms, 1 row unchanged (res_early_ab_h200_2026-11-30_session15.json)
RES_EARLY = True


@triton.jit
def _slices_sum(ws_ptr, row, cols, mask, tiles, SIZE: tl.constexpr, SPLIT_K: tl.constexpr, BN: tl.constexpr,
                MP: tl.constexpr):
    """fp32 [SIZE]: columns `cols` of token row `row` of a split-K product's slices ([SPLIT_K, tiles, MP, BN],
    ops/partials.py) summed from zero in slice order: the product's last program's sum, before its rounding."""
    part = (cols // BN) * (BN * MP) + row * BN + cols % BN  # element (row, col) of a slice's [tiles, MP, BN]
    total = tl.zeros([SIZE], tl.float32)
    for s in tl.static_range(SPLIT_K):
        total += tl.load(ws_ptr + s * (tiles * BN * MP) + part, mask=mask, other=0.0)
    return total


@triton.jit
def _rms_norm_slices_kernel(ws_ptr, res_ptr, w_ptr, out_ptr, h_ptr, n, eps, stride_r, stride_o, stride_h, tiles,
                            SPLIT_K: tl.constexpr, BN: tl.constexpr, MP: tl.constexpr, BLOCK: tl.constexpr,
                            PDL: tl.constexpr, RES_EARLY: tl.constexpr):
    # NOTE: launched with _rms_norm_kernel's warps (NORM_WARPS): they set the sum of squares' reduction order
    pdl_launch_early(PDL)
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    if RES_EARLY:  # the residual was written kernels before the product (see RES_EARLY): read it while that drains
        res = tl.load(res_ptr + row * stride_r + offs, mask=mask, other=0.0)
    pdl_wait(PDL)
    if not RES_EARLY:
        res = tl.load(res_ptr + row * stride_r + offs, mask=mask, other=0.0)
    total = _slices_sum(ws_ptr, row, offs, mask, tiles, BLOCK, SPLIT_K, BN, MP)
    dt = h_ptr.dtype.element_ty
    h = (res.to(tl.float32) + total.to(dt).to(tl.float32)).to(dt)  # the product's residual epilogue
    tl.store(h_ptr + row * stride_h + offs, h, mask=mask)
    _norm_store(h, w, out_ptr + row * stride_o, offs, mask, n, eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None,
             kind: str = "norm"):
    """x [M, N] -> norm(x) ; with residual: (norm(x + residual), x + residual). kind: its PDL kind."""
    m, n = x.shape
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else out
    _rms_norm_kernel[(m,)](x, residual if residual is not None else x, weight, out, res_out, n, eps, x.stride(0),
                           out.stride(0), HAS_RES=residual is not None, BLOCK=triton.next_power_of_2(n),
                           num_warps=NORM_WARPS, **pdl_args(kind))
    return (out, res_out) if residual is not None else out


def norm_of(h, weight: torch.Tensor, eps: float, kind: str = "norm") -> tuple[torch.Tensor, torch.Tensor]:
    """h [M, N] (a tensor, or a split-K product's unsummed slices: ops/partials.py) -> (RMSNorm(h), h as a
    tensor). Slices are summed, rounded and added to their residual here, h written to h.out, in one launch.
    kind: its PDL kind (triton_gemm.PDL_KINDS; "norm_mlp" for the norm before the MLP)."""
    if not isinstance(h, Partials):
        return (rms_norm(h, weight, eps, kind=kind) if h.shape[0] else torch.empty_like(h)), h
    m, n = h.out.shape
    out = torch.empty_like(h.out)
    _rms_norm_slices_kernel[(m,)](h.ws, h.residual, weight, out, h.out, n, eps, h.residual.stride(0), out.stride(0),
                                  h.out.stride(0), h.tiles, SPLIT_K=h.split_k, BN=h.bn, MP=h.mp,
                                  BLOCK=triton.next_power_of_2(n), RES_EARLY=RES_EARLY, num_warps=NORM_WARPS,
                                  **pdl_args(kind))
    return out, h.out


# the warps of the q/k norm + RoPE kernel (one program per row and head): they set the q/k norm's reduction order, and
# the kernel is the only one that computes it on the CUDA path, so any count keeps a row's bits batch-independent
ROPE_WARPS = 4

# the q/k norm + RoPE kernel loading a key head's values with its key (the same copy): 4B decode replay with
# COMBINE_PRELOAD, 1 row 2.670 -> 2.654 ms at 1k, 2.789 -> 2.748 at 2k (short_loads_ab_h200_2026-12-01_session20.json);
# alone, 8 rows at 8k 3.611 -> 3.575 (load_schedules_ab_h200_2026-12-01_session20.json)
ROPE_V_EARLY = True


@triton.jit
def _qkv_cols(qkv_ptr, ws_ptr, t, cols, mask, stride_t, tiles, HALF: tl.constexpr, SLICES: tl.constexpr,
              BN: tl.constexpr, MP: tl.constexpr):
    """[HALF] columns `cols` of token row t of the qkv product, in its dtype: the tensor's, or (SLICES > 0) its split-K
    slices ([SLICES, tiles, MP, BN] fp32, ops/partials.py) summed from zero in slice order and rounded, as the
    product's last program sums them: the same values."""
    if SLICES == 0:
        return tl.load(qkv_ptr + t * stride_t + cols, mask=mask, other=0.0)
    return _slices_sum(ws_ptr, t, cols, mask, tiles, HALF, SLICES, BN, MP).to(qkv_ptr.dtype.element_ty)


@triton.jit
def _qkv_rope_store_kernel(qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr, q_ptr, k_ptr, v_ptr, eps,
                           stride_t, stride_qt, stride_qh, stride_cs, stride_ch, stride_cos, q_cols, ws_ptr, tiles,
                           NUM_Q: tl.constexpr, NUM_KV: tl.constexpr, HALF: tl.constexpr, PDL: tl.constexpr,
                           V_EARLY: tl.constexpr, stamp_ptr, STAMPS: tl.constexpr, SLICES: tl.constexpr,
                           BN: tl.constexpr, MP: tl.constexpr):
    stamp(stamp_ptr, 0, STAMPS)
    pdl_launch_early(PDL)
    t = tl.program_id(0)
    h = tl.program_id(1)  # heads 0..NUM_Q-1 are queries, then NUM_KV key heads (each also moves its value head)
    offs = tl.arange(0, HALF)
    is_q = h < NUM_Q
    kvh = h - NUM_Q
    dt = qkv_ptr.dtype.element_ty
    # NOTE: norm weights, rotary tables and the staged positions and slots are never written by the previous
    # kernel: read them while it drains
    w_ptr = tl.where(is_q, qw_ptr, kw_ptr)
    w1 = tl.load(w_ptr + offs)
    w2 = tl.load(w_ptr + HALF + offs)
    pos = tl.load(pos_ptr + t)
    c1 = tl.load(cos_ptr + pos * stride_cos + offs).to(dt).to(tl.float32)
    c2 = tl.load(cos_ptr + pos * stride_cos + HALF + offs).to(dt).to(tl.float32)
    s1 = tl.load(sin_ptr + pos * stride_cos + offs).to(dt).to(tl.float32)
    s2 = tl.load(sin_ptr + pos * stride_cos + HALF + offs).to(dt).to(tl.float32)
    slot = tl.load(slot_ptr + t)
    pdl_wait(PDL)
    stamp(stamp_ptr, 1, STAMPS)
    col = tl.where(is_q, h * 2 * HALF, q_cols + kvh * 2 * HALF)
    vcol = col + NUM_KV * 2 * HALF  # a key head's value head
    every = offs < HALF
    a = _qkv_cols(qkv_ptr, ws_ptr, t, col + offs, every, stride_t, tiles, HALF, SLICES, BN, MP).to(tl.float32)
    b = _qkv_cols(qkv_ptr, ws_ptr, t, col + HALF + offs, every, stride_t, tiles, HALF, SLICES, BN, MP).to(tl.float32)
    if V_EARLY:  # a key head's value halves loaded beside its key: compiled in place, their loads wait for the
        # norm's reductions (barriers), a second memory round trip after the wait
        v_live = every & (h >= NUM_Q)
        va = _qkv_cols(qkv_ptr, ws_ptr, t, vcol + offs, v_live, stride_t, tiles, HALF, SLICES, BN, MP)
        vb = _qkv_cols(qkv_ptr, ws_ptr, t, vcol + HALF + offs, v_live, stride_t, tiles, HALF, SLICES, BN, MP)
    inv = tl.rsqrt((tl.sum(a * a, 0) + tl.sum(b * b, 0)) / (2 * HALF) + eps)
    a = (w1 * (a * inv).to(dt)).to(dt).to(tl.float32)
    b = (w2 * (b * inv).to(dt)).to(dt).to(tl.float32)
    lo = (a * c1 - b * s1).to(dt)
    hi = (b * c2 + a * s2).to(dt)
    if is_q:
        out = q_ptr + t * stride_qt + h * stride_qh
        tl.store(out + offs, lo)
        tl.store(out + HALF + offs, hi)
    else:
        out = k_ptr + slot * stride_cs + kvh * stride_ch
        tl.store(out + offs, lo)
        tl.store(out + HALF + offs, hi)
        vdst = v_ptr + slot * stride_cs + kvh * stride_ch
        if not V_EARLY:
            va = _qkv_cols(qkv_ptr, ws_ptr, t, vcol + offs, every, stride_t, tiles, HALF, SLICES, BN, MP)
            vb = _qkv_cols(qkv_ptr, ws_ptr, t, vcol + HALF + offs, every, stride_t, tiles, HALF, SLICES, BN, MP)
        tl.store(vdst + offs, va)
        tl.store(vdst + HALF + offs, vb)
    stamp(stamp_ptr, 2, STAMPS)


def qkv_rope_store(qkv: torch.Tensor, num_q: int, num_kv: int, q_weight, k_weight, eps: float, cos, sin,
                   positions: torch.Tensor, slots: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor):
    """qkv [T, (num_q + 2 num_kv) * D] (q heads, k heads, v heads), or the qkv product's unsummed split-K slices
    (ops/partials.Partials, no residual) -> q [T, num_q, D] normed and rotated; keys are normed, rotated and stored
    at k_cache[slots], values stored at v_cache[slots]. One launch. num_q = 0 stores keys and values only (the
    drafter's context write) and returns None."""
    parts = qkv if isinstance(qkv, Partials) else None
    if parts is not None:
        assert parts.residual is None, "qkv_rope_store: the slices of a product with a residual"
        qkv = parts.out  # (never written: its dtype and row stride)
    t = qkv.shape[0]
    d = k_cache.shape[2]
    q = torch.empty(t, max(num_q, 1), d, dtype=qkv.dtype, device=qkv.device)
    sliced = dict(SLICES=parts.split_k, BN=parts.bn, MP=parts.mp) if parts else dict(SLICES=0, BN=1, MP=1)
    _qkv_rope_store_kernel[(t, num_q + num_kv)](
        qkv, q_weight if q_weight is not None else k_weight, k_weight, cos, sin, positions, slots, q, k_cache, v_cache,
        eps, qkv.stride(0), q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), cos.stride(0), num_q * d,
        parts.ws if parts else qkv, parts.tiles if parts else 0, NUM_Q=num_q, NUM_KV=num_kv, HALF=d // 2,
        V_EARLY=ROPE_V_EARLY, **sliced, num_warps=ROPE_WARPS, **pdl_args("rope"), **stamps.args("rope", q))
    return q if num_q else None
