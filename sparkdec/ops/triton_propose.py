"""The propose's small steps in one launch each (CUDA): the block's embedded rows and the confidence head.

Each replaces several torch kernels of the propose graph (fill, copy and gather; gather, casts, products,
sums and sigmoid). Their references are the torch paths in models/dspark.py; tests/triton_checks.py runs
both in Triton's interpreter.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.ops.triton_gemm import pdl_args, pdl_wait
from sparkdec.ops.triton_markov import ChainTail, _prev_from_partials


@triton.jit
def _block_embed_kernel(table_ptr, anchors_ptr, out_ptr, mask_id, stride_t, stride_o, D: tl.constexpr,
                        GAMMA: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)  # sequence row // GAMMA, slot row % GAMMA
    offs = tl.arange(0, BLOCK)
    pdl_wait(PDL)  # the anchors may come from the previous kernel (a propose queued from the drafts on the device)
    tok = tl.load(anchors_ptr + row // GAMMA)
    tok = tl.where(row % GAMMA == 0, tok, mask_id).to(tl.int64)
    for d0 in range(0, D, BLOCK):
        m = d0 + offs < D
        tl.store(out_ptr + row * stride_o + d0 + offs, tl.load(table_ptr + tok * stride_t + d0 + offs, mask=m), mask=m)


def block_embed(table: torch.Tensor, anchors: torch.Tensor, gamma: int, mask_id: int) -> torch.Tensor:
    """table [V, d], anchors [B] -> [B*γ, d]: the embedded block rows [x0, M, ..., M] of every sequence."""
    b, d = anchors.shape[0], table.shape[1]
    assert table.stride(1) == 1 and anchors.is_contiguous(), "block_embed: unit-stride rows and anchors"
    out = torch.empty(b * gamma, d, dtype=table.dtype, device=table.device)
    _block_embed_kernel[(b * gamma,)](table, anchors, out, mask_id, table.stride(0), out.stride(0), D=d, GAMMA=gamma,
                                      BLOCK=min(4096, triton.next_power_of_2(d)), **pdl_args())
    return out


@triton.jit
def _confidence_kernel(h_ptr, w1_ptr, anchors_ptr, drafts_ptr, w_ptr, b_ptr, out_ptr, pmax_ptr, pidx_ptr, n_parts,
                       V, stride_h, stride_dr, D: tl.constexpr, R: tl.constexpr, R_PAD: tl.constexpr,
                       WITH_E: tl.constexpr, GAMMA: tl.constexpr, BLOCK_D: tl.constexpr, FINISH: tl.constexpr,
                       CHUNK: tl.constexpr, CHUNKS: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)  # sequence row // GAMMA, slot row % GAMMA
    seq, k = row // GAMMA, row % GAMMA
    offs = tl.arange(0, BLOCK_D)
    bias = tl.load(b_ptr).to(tl.float32)  # weights: read while the previous kernel drains
    pdl_wait(PDL)
    logit = tl.zeros([BLOCK_D], tl.float32)
    for d0 in range(0, D, BLOCK_D):
        m = d0 + offs < D
        h = tl.load(h_ptr + row * stride_h + d0 + offs, mask=m, other=0.0).to(tl.float32)
        logit += h * tl.load(w_ptr + d0 + offs, mask=m, other=0.0).to(tl.float32)
    total = tl.sum(logit, 0)
    if WITH_E:  # the Markov embedding of the slot's previous token: the anchor, then the drafts
        prev = tl.where(k > 0, tl.load(drafts_ptr + seq * stride_dr + k - 1, mask=k > 0, other=0),
                        tl.load(anchors_ptr + seq))
        rs = tl.arange(0, R_PAD)
        rm = rs < R
        e = tl.load(w1_ptr + prev.to(tl.int64) * R + rs, mask=rm, other=0.0).to(tl.float32)
        total += tl.sum(e * tl.load(w_ptr + D + rs, mask=rm, other=0.0).to(tl.float32), 0)
    tl.store(out_ptr + row, tl.sigmoid(total + bias))
    if FINISH:  # slot 0's program also reduces the chain's last partials to the last draft (no read of it here)
        if k == 0:
            pair = tl.arange(0, 2)
            last = _prev_from_partials(pmax_ptr, pidx_ptr, seq + pair, pair < 1, n_parts, V, 2, CHUNK, CHUNKS)
            tl.store(drafts_ptr + seq * stride_dr + GAMMA - 1 + pair, last.to(tl.int64), mask=pair < 1)


def confidences(h: torch.Tensor, w1: torch.Tensor | None, anchors: torch.Tensor, drafts: torch.Tensor,
                weight: torch.Tensor, bias: torch.Tensor, tail: ChainTail | None = None) -> torch.Tensor:
    """h [B, γ, d], W1 [V, R] (None: the head reads h only), anchors [B], drafts [B, γ], the head's weight
    [1, d (+R)] and bias [1] -> c [B, γ] float32 = sigmoid(w . [h_k ; W1[d_{k-1}]] + b), d_{-1} the anchor.
    tail: the Markov chain's unreduced last slot (triton_markov.markov_chain(finish=False)): the same launch
    writes drafts[:, γ-1] (the head never reads it)."""
    b, gamma, d = h.shape
    assert drafts.stride(1) == 1 and anchors.is_contiguous() and weight.is_contiguous(), \
        "confidences: unit-stride drafts, anchors and head weight"
    h = h.reshape(b * gamma, d)
    assert h.stride(1) == 1, "confidences: unit-stride hidden rows"
    out = torch.empty(b, gamma, dtype=torch.float32, device=h.device)
    r = w1.shape[1] if w1 is not None else 1
    parts = (tail.pmax, tail.pidx, tail.programs, tail.vocab) if tail is not None else (out, out, 1, 1)
    chunk = tail.chunk if tail is not None else 1
    _confidence_kernel[(b * gamma,)](h, w1 if w1 is not None else weight, anchors, drafts, weight, bias, out, *parts,
                                     h.stride(0), drafts.stride(0), D=d, R=r, R_PAD=triton.next_power_of_2(r),
                                     WITH_E=w1 is not None, GAMMA=gamma, FINISH=tail is not None, CHUNK=chunk,
                                     CHUNKS=triton.cdiv(parts[2], chunk),
                                     BLOCK_D=min(1024, triton.next_power_of_2(d)), **pdl_args())
    return out
