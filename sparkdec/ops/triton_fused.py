"""Fused Triton kernels for the CUDA path: RMSNorm, residual add + RMSNorm, per-head norm + RoPE, SiLU-mul.

One program per row (or per row and head), so a row's result never depends on the batch. Each kernel has
the torch reference in ops/norms.py / ops/rope.py; tests/test_ops.py checks them in Triton's interpreter.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, n, eps, stride_x, stride_o,
                     HAS_RES: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_RES:
        # NOTE: the sum is rounded to the activation dtype first, as the reference `h = h + delta` does
        x = (x.to(tl.float32) + tl.load(res_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32))
        x = x.to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_o + offs, x, mask=mask)
    xf = x.to(tl.float32)
    inv = tl.rsqrt(tl.sum(xf * xf, 0) / n + eps)
    y = (xf * inv).to(x_ptr.dtype.element_ty)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride_o + offs, (w * y).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    """x [M, N] -> norm(x) ; with residual: (norm(x + residual), x + residual)."""
    m, n = x.shape
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else out
    _rms_norm_kernel[(m,)](x, residual if residual is not None else x, weight, out, res_out, n, eps, x.stride(0),
                           out.stride(0), HAS_RES=residual is not None, BLOCK=triton.next_power_of_2(n))
    return (out, res_out) if residual is not None else out


@triton.jit
def _head_norm_rope_kernel(x_ptr, w_ptr, cos_ptr, sin_ptr, pos_ptr, dst_ptr, dst_rows_ptr, eps, stride_xt, stride_xh,
                           stride_dt, stride_dh, stride_cos, HALF: tl.constexpr, USE_ROWS: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    offs = tl.arange(0, HALF)
    base = x_ptr + t * stride_xt + h * stride_xh
    a = tl.load(base + offs).to(tl.float32)
    b = tl.load(base + HALF + offs).to(tl.float32)
    inv = tl.rsqrt((tl.sum(a * a, 0) + tl.sum(b * b, 0)) / (2 * HALF) + eps)
    dt = x_ptr.dtype.element_ty
    a = (tl.load(w_ptr + offs) * (a * inv).to(dt)).to(dt).to(tl.float32)
    b = (tl.load(w_ptr + HALF + offs) * (b * inv).to(dt)).to(dt).to(tl.float32)
    pos = tl.load(pos_ptr + t)
    c1 = tl.load(cos_ptr + pos * stride_cos + offs).to(dt).to(tl.float32)
    c2 = tl.load(cos_ptr + pos * stride_cos + HALF + offs).to(dt).to(tl.float32)
    s1 = tl.load(sin_ptr + pos * stride_cos + offs).to(dt).to(tl.float32)
    s2 = tl.load(sin_ptr + pos * stride_cos + HALF + offs).to(dt).to(tl.float32)
    row = tl.load(dst_rows_ptr + t) if USE_ROWS else t
    out = dst_ptr + row * stride_dt + h * stride_dh
    tl.store(out + offs, (a * c1 - b * s1).to(dst_ptr.dtype.element_ty))
    tl.store(out + HALF + offs, (b * c2 + a * s2).to(dst_ptr.dtype.element_ty))


def head_norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, cos: torch.Tensor, sin: torch.Tensor,
                   positions: torch.Tensor, dst: torch.Tensor | None = None, dst_rows: torch.Tensor | None = None):
    """x [T, H, D]: per-head RMSNorm then RoPE at positions [T]. Writes dst[dst_rows[t]] (e.g. a KV cache
    at slots) when given, else returns a new [T, H, D] tensor."""
    t, h, d = x.shape
    out = dst if dst is not None else torch.empty_like(x)
    _head_norm_rope_kernel[(t, h)](x, weight, cos, sin, positions, out, dst_rows if dst_rows is not None else positions,
                                   eps, x.stride(0), x.stride(1), out.stride(0), out.stride(1), cos.stride(0),
                                   HALF=d // 2, USE_ROWS=dst_rows is not None)
    return out


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, n, stride_g, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(gu_ptr + row * stride_g + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_g + n + offs, mask=mask, other=0.0)
    silu = (g / (1.0 + tl.exp(-g))).to(u.dtype)
    tl.store(out_ptr + row * stride_o + offs, silu * u, mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [M, 2I] (gate then up) -> silu(gate) * up [M, I]."""
    m, n2 = gate_up.shape
    out = torch.empty(m, n2 // 2, dtype=gate_up.dtype, device=gate_up.device)
    block = 1024
    _silu_mul_kernel[(m, triton.cdiv(n2 // 2, block))](gate_up, out, n2 // 2, gate_up.stride(0), out.stride(0), BLOCK=block)
    return out
