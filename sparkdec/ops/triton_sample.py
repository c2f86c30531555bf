"""Fused keyed sampling (CUDA, opt-in: SPARKDEC_FUSED_SAMPLER=1): the target's tokens for R consecutive positions
of one sequence in two launches, with no host read until the caller wants the tokens.

Token of row r = argmax_i x_i / T - log E_i over the vocabulary (top-k / top-p tokens excluded), with E_i = -log u_i
and u the keyed noise of sampling.uniform_noise (the same integers: splitmix64 in uint64). It is the exponential
race argmax_i p_i / E_i of sampling.sample_from run in log space, where softmax's normaliser cancels. One kernel
writes each (row, vocabulary tile)'s best score and first index; ops/triton_markov.py's reduce takes the tiles of a
row in order (ties go to the smaller id). A row's token never depends on the other rows of the call.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.ops.triton_gemm import pdl_args, pdl_release, pdl_wait
from sparkdec.ops.triton_markov import tiles_argmax
from sparkdec.ops.triton_noise import keyed_log_exp, noise_args, signed

BLOCK_V = 1024  # vocabulary entries per program


@triton.jit(do_not_specialize=["key_base", "first_position"])
def _race_kernel(x_ptr, stride_x, kth_ptr, drop_ptr, stride_drop, pmax_ptr, pidx_ptr, V, n_tiles, temperature,
                 key_base, first_position, golden, m1, m2, HAS_KTH: tl.constexpr, HAS_DROP: tl.constexpr,
                 BLOCK: tl.constexpr, PDL: tl.constexpr):
    pid_v = tl.program_id(0)
    r = tl.program_id(1)
    cols = pid_v * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < V
    # the race noise -log E_i of element i of the row's draw, keyed as sampling.sample_rows keys it
    log_e = keyed_log_exp(key_base, first_position + r, cols, golden, m1, m2)
    pdl_wait(PDL)
    x = tl.math.div_rn(tl.load(x_ptr + r * stride_x + cols, mask=cmask, other=0.0).to(tl.float32), temperature)
    keep = cmask
    if HAS_KTH:
        keep = keep & (x >= tl.load(kth_ptr + r))
    if HAS_DROP:
        keep = keep & (tl.load(drop_ptr + r * stride_drop + cols, mask=cmask, other=1) == 0)
    score = tl.where(keep, x.to(tl.float64) + log_e, float("-inf"))
    best, where = tl.max(score, 0, return_indices=True, return_indices_tie_break_left=True)
    pdl_release(PDL)
    tl.store(pmax_ptr + r * n_tiles + pid_v, best)
    tl.store(pidx_ptr + r * n_tiles + pid_v, pid_v * BLOCK + where)


def keyed_race(x: torch.Tensor, temperature: float, key_base: int, first_position: int,
               kth: torch.Tensor | None = None, drop: torch.Tensor | None = None) -> torch.Tensor:
    """x [R, V] logits (rows for positions first_position ..); kth [R] float32: keep x / T >= kth (top-k);
    drop [R, V] bool: excluded tokens (top-p); key_base: (seed * golden + stream * M2) mod 2^64 -> tokens [R]
    int64 on x's device."""
    r, v = x.shape
    n_tiles = triton.cdiv(v, BLOCK_V)
    pmax = torch.empty(r, n_tiles, dtype=torch.float64, device=x.device)
    pidx = torch.empty(r, n_tiles, dtype=torch.int32, device=x.device)
    drop_u8 = drop.to(torch.uint8) if drop is not None else pidx
    _race_kernel[(n_tiles, r)](x, x.stride(0), kth if kth is not None else x, drop_u8,
                               drop_u8.stride(0) if drop is not None else 0, pmax, pidx, v, n_tiles,
                               float(temperature), signed(key_base), first_position, *noise_args(),
                               HAS_KTH=kth is not None, HAS_DROP=drop is not None, BLOCK=BLOCK_V,
                               **pdl_args())
    return tiles_argmax(pmax, pidx, **pdl_args())
