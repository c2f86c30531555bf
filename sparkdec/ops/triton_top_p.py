"""Top-p's drop mask on CUDA in two launches, every row's bits independent of how many rows share the call.

torch.cumsum on CUDA scans a lone row and a batch of rows with different kernels (different bits: 200 of 200 rows
on the H200), so a batched draw could keep another top-p set than the same row drawn alone. Here every row is
scanned the same way whatever the row count: the first launch sums each BLOCK-wide chunk of the row's sorted
probabilities, the second scans its chunk (tl.cumsum), adds the sum of the chunks before it (a fixed-shape reduction
over the chunk sums) and writes, at each token's own id, whether the mass before it already reaches top_p.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048  # sorted probabilities per program


@triton.jit
def _chunk_sums_kernel(p_ptr, sums_ptr, V, n_chunks, BLOCK: tl.constexpr):
    c = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    cols = c * BLOCK + tl.arange(0, BLOCK)
    p = tl.load(p_ptr + r * V + cols, mask=cols < V, other=0.0)
    tl.store(sums_ptr + r * n_chunks + c, tl.sum(p, 0))


@triton.jit
def _drop_kernel(p_ptr, idx_ptr, sums_ptr, drop_ptr, V, n_chunks, top_p, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    c = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    prior = tl.arange(0, CHUNKS)
    before = tl.sum(tl.load(sums_ptr + r * n_chunks + prior, mask=prior < c, other=0.0), 0)
    cols = c * BLOCK + tl.arange(0, BLOCK)
    live = cols < V
    p = tl.load(p_ptr + r * V + cols, mask=live, other=0.0)
    mass = tl.cumsum(p, 0) + before  # inclusive mass up to each sorted entry
    drop = (mass - p) >= top_p
    token = tl.load(idx_ptr + r * V + cols, mask=live, other=0)
    tl.store(drop_ptr + r * V + token, drop.to(tl.uint8), mask=live)


def drop_mask(sorted_p: torch.Tensor, idx: torch.Tensor, top_p: float) -> torch.Tensor:
    """sorted_p [R, V] float32 (each row descending), idx [R, V] (the token id of each sorted entry) -> bool [R, V]
    by token id: True where the sorted mass before the token reaches top_p."""
    r, v = sorted_p.shape
    sorted_p, idx = sorted_p.contiguous(), idx.contiguous()
    n_chunks = triton.cdiv(v, BLOCK)
    sums = torch.empty(r, n_chunks, dtype=torch.float32, device=sorted_p.device)
    drop = torch.empty(r, v, dtype=torch.uint8, device=sorted_p.device)
    # NOTE: the row count is only the grid's second axis, never an argument: no specialisation can follow it
    _chunk_sums_kernel[(n_chunks, r)](sorted_p, sums, v, n_chunks, BLOCK=BLOCK)
    _drop_kernel[(n_chunks, r)](sorted_p, idx, sums, drop, v, n_chunks, float(top_p), BLOCK=BLOCK,
                                CHUNKS=triton.next_power_of_2(n_chunks))
    return drop.view(torch.bool)
