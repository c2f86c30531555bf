"""Row argmax of float logits over a large vocabulary in two launches: chunks in parallel, then their winners.

torch's reduction gives each row of [rows, V] one thread block, which reads the whole row (608 KB for Qwen3's 151936
entries) alone: about 8.5 us per decode step on the H200 (decode_gaps_h200_2026-11-30.json). Here each row's chunks
of BLOCK entries are reduced by programs of their own, then one program per row picks among the chunk winners. Ties
go to the lowest index, as torch.argmax's do, so the result is torch's whenever no logit is NaN.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.ops.triton_gemm import pdl_args, pdl_release, pdl_wait

BLOCK = 4096  # entries per chunk (151936 -> 38 chunks a row)
MAX_CHUNKS = 1024  # the final kernel's block: rows up to BLOCK * MAX_CHUNKS entries


@triton.jit
def _chunk_kernel(x_ptr, val_ptr, idx_ptr, n, stride_x, chunks, BLOCK: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)
    c = tl.program_id(1)
    offs = c * BLOCK + tl.arange(0, BLOCK)
    pdl_wait(PDL)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + offs, mask=offs < n, other=float("-inf"))
    best = tl.max(x, 0)
    first = tl.min(tl.where(x == best, offs, n), 0)  # the lowest index holding the maximum
    tl.store(val_ptr + row * chunks + c, best)
    tl.store(idx_ptr + row * chunks + c, first)
    pdl_release(PDL)


@triton.jit
def _pick_kernel(val_ptr, idx_ptr, out_ptr, n, chunks, CHUNKS: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, CHUNKS)
    pdl_wait(PDL)
    v = tl.load(val_ptr + row * chunks + c, mask=c < chunks, other=float("-inf"))
    i = tl.load(idx_ptr + row * chunks + c, mask=c < chunks, other=n)
    best = tl.max(v, 0)
    tl.store(out_ptr + row, tl.min(tl.where(v == best, i, n), 0).to(tl.int64))
    pdl_release(PDL)


def argmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """logits [R, V] float32 -> [R] int64, each row's first maximal index: the two kernels on CUDA,
    torch.argmax(-1) elsewhere."""
    ok = logits.dim() == 2 and logits.dtype == torch.float32 and logits.stride(1) == 1
    if not (logits.is_cuda and ok and 0 < logits.shape[1] <= BLOCK * MAX_CHUNKS):
        return logits.argmax(-1)
    return argmax_kernels(logits)


def argmax_kernels(logits: torch.Tensor) -> torch.Tensor:
    """The two launches (also what tests run under Triton's interpreter, on CPU tensors)."""
    rows, n = logits.shape
    out = torch.empty(rows, dtype=torch.long, device=logits.device)
    if rows == 0:
        return out
    chunks = triton.cdiv(n, BLOCK)
    val = torch.empty(rows, chunks, dtype=torch.float32, device=logits.device)
    idx = torch.empty(rows, chunks, dtype=torch.int32, device=logits.device)
    _chunk_kernel[(rows, chunks)](logits, val, idx, n, logits.stride(0), chunks, BLOCK=BLOCK, **pdl_args())
    _pick_kernel[(rows,)](val, idx, out, n, chunks, CHUNKS=max(16, triton.next_power_of_2(chunks)), **pdl_args())
    return out
