"""Batch-invariant Triton matrix products (CUDA), with an optional RMSNorm prologue and residual / SiLU epilogues.

y = epilogue(prologue(x) @ W^T) for x [M, K], W [N, K]. Rows are processed in tiles of 16; a row's reduction
runs over K in fixed BLOCK_K steps inside one program, so its result never depends on M or on the other
rows (DESIGN §3.4). The tile configuration is a function of (N, K) only, never of M.

Fusions (each replaces a kernel of the reference layer):
- norm: x -> w * rmsnorm(x), the row's sum of squares computed by the program itself (x is small at decode);
- silu: W holds [gate; up]; y = silu(x @ gate^T) * (x @ up^T) (Qwen3 MLP);
- residual: y = residual + x @ W^T (the decoder layer's skip connection).
Launched with programmatic dependent launch (PDL) where the device supports it: the next kernel's programs
start while this one drains, and wait (gdc_wait) before reading anything the previous kernel wrote.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BLOCK_M = 16
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
USE_PDL = not INTERPRET and os.environ.get("SPARKDEC_PDL", "1") != "0"

if not INTERPRET:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
else:  # the interpreter has no grid dependency control; PDL is off there
    gdc_launch_dependents = gdc_wait = None

# (N, K) -> (BLOCK_N, BLOCK_K, num_warps, num_stages), chosen on the H200 (scripts/sweep_gemm.py)
CONFIGS: dict[tuple[int, int], tuple[int, int, int, int]] = {}


def pick_config(n: int, k: int) -> tuple[int, int, int, int]:
    if (n, k) in CONFIGS:
        return CONFIGS[(n, k)]
    block_k = max(16, min(256, triton.next_power_of_2(k)))
    block_n = 16 if n <= 4096 else 32
    return block_n, block_k, 4, 4


@triton.jit
def _load_w(w_ptr, cols, cmask, kk, kmask, stride_wn):
    return tl.load(w_ptr + cols[:, None] * stride_wn + kk[None, :], mask=cmask[:, None] & kmask[None, :], other=0.0)


@triton.jit
def _load_x(x_ptr, nw_ptr, rows, rmask, kk, kmask, stride_xm, inv, NORM: tl.constexpr):
    x = tl.load(x_ptr + rows[:, None] * stride_xm + kk[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0)
    if NORM:
        # NOTE: rounded like the reference: y = (x * inv) in the activation dtype, then weight * y
        xn = (x.to(tl.float32) * inv[:, None]).to(x.dtype)
        x = (tl.load(nw_ptr + kk, mask=kmask, other=0.0)[None, :] * xn).to(x.dtype)
    return x


@triton.jit
def _mma(acc, x, w, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(x, tl.trans(w), acc, input_precision="ieee")
    return tl.dot(x, tl.trans(w), acc)


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, out_ptr, res_ptr, nw_ptr, M, N, eps, stride_xm, stride_wn, stride_om, stride_rm,
                 up_offset, K: tl.constexpr, NORM: tl.constexpr, SILU: tl.constexpr, RESIDUAL: tl.constexpr,
                 IEEE: tl.constexpr, PDL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)  # NOTE: M tiles vary fastest, so the programs sharing a weight block run together
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    rmask = rows < M
    cmask = cols < N
    # the first weight tile does not depend on the previous kernel: load it before waiting for that kernel
    w = _load_w(w_ptr, cols, cmask, ks, ks < K, stride_wn)
    wu = w
    if SILU:
        wu = _load_w(w_ptr, cols + up_offset, cmask, ks, ks < K, stride_wn)
    if PDL:
        gdc_wait()
    inv = tl.zeros([BLOCK_M], tl.float32)
    if NORM:
        ss = tl.zeros([BLOCK_M], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + ks
            xk = tl.load(x_ptr + rows[:, None] * stride_xm + kk[None, :], mask=rmask[:, None] & (kk < K)[None, :],
                         other=0.0).to(tl.float32)
            ss += tl.sum(xk * xk, 1)
        inv = tl.rsqrt(ss / K + eps)
    x = _load_x(x_ptr, nw_ptr, rows, rmask, ks, ks < K, stride_xm, inv, NORM)
    acc = _mma(tl.zeros([BLOCK_M, BLOCK_N], tl.float32), x, w, IEEE)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    if SILU:
        acc_up = _mma(acc_up, x, wu, IEEE)
    for k0 in range(BLOCK_K, K, BLOCK_K):
        kk = k0 + ks
        kmask = kk < K
        x = _load_x(x_ptr, nw_ptr, rows, rmask, kk, kmask, stride_xm, inv, NORM)
        acc = _mma(acc, x, _load_w(w_ptr, cols, cmask, kk, kmask, stride_wn), IEEE)
        if SILU:
            acc_up = _mma(acc_up, x, _load_w(w_ptr, cols + up_offset, cmask, kk, kmask, stride_wn), IEEE)
    if PDL:
        gdc_launch_dependents()
    dt = out_ptr.dtype.element_ty
    y = acc.to(dt)
    if SILU:
        g = y.to(tl.float32)
        y = (g / (1.0 + tl.exp(-g))).to(dt) * acc_up.to(dt)
    omask = rmask[:, None] & cmask[None, :]
    if RESIDUAL:
        r = tl.load(res_ptr + rows[:, None] * stride_rm + cols[None, :], mask=omask, other=0.0)
        # NOTE: the sum is rounded to the activation dtype, as the reference `h = h + delta` does
        y = (r.to(tl.float32) + y.to(tl.float32)).to(dt)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], y, mask=omask)


def gemm(x: torch.Tensor, weight: torch.Tensor, *, norm_weight: torch.Tensor | None = None, eps: float = 0.0,
         silu: bool = False, residual: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] @ weight[N', K]^T -> [M, N] with N = N'/2 for silu (weight = [gate; up]), else N'.
    norm_weight: apply w * rmsnorm(x) first. residual [M, N]: add it to the product."""
    m, k = x.shape
    assert x.stride(1) == 1 and weight.stride(1) == 1, "gemm: rows must be contiguous"
    n = weight.shape[0] // 2 if silu else weight.shape[0]
    block_n, block_k, warps, stages = pick_config(weight.shape[0], k)
    if out is None:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    res = residual if residual is not None else out
    nw = norm_weight if norm_weight is not None else weight
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, block_n))
    extra = {"launch_pdl": True} if USE_PDL else {}
    _gemm_kernel[grid](x, weight, out, res, nw, m, n, eps, x.stride(0), weight.stride(0), out.stride(0),
                       res.stride(0), n, K=k, NORM=norm_weight is not None, SILU=silu, RESIDUAL=residual is not None,
                       IEEE=x.dtype == torch.float32, PDL=USE_PDL, BLOCK_M=BLOCK_M, BLOCK_N=block_n, BLOCK_K=block_k,
                       num_warps=warps, num_stages=stages, **extra)
    return out
