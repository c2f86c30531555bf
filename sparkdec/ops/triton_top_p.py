"""Top-p's scan on CUDA in two launches, every row's bits independent of how many rows share the call.

torch.cumsum on CUDA scans a lone row and a batch of rows with different kernels (different bits: 200 of 200 rows
on the H200), so a batched draw could keep another top-p set than the same row drawn alone. Here every row is
scanned the same way whatever the row count: the first launch sums each BLOCK-wide chunk of the row's sorted
probabilities, the second scans its chunk (tl.cumsum), adds the sum of the chunks before it (a fixed-shape reduction
over the chunk sums) and writes, per sorted entry, whether the mass before it reaches top_p. (Rounding can make
that test flicker near top_p, most of all across a chunk boundary: sampling._top_p_drop keeps the prefix before
the first entry that passes it.)
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048  # sorted probabilities per program


@triton.jit
def _chunk_sums_kernel(p_ptr, sums_ptr, V, n_chunks, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * BLOCK + tl.arange(0, BLOCK)
    p = tl.load(p_ptr + r * V + cols, mask=cols < V, other=0.0)
    tl.store(sums_ptr + r * n_chunks + c, tl.sum(p, 0))


@triton.jit
def _past_kernel(p_ptr, sums_ptr, past_ptr, V, n_chunks, top_p, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    prior = tl.arange(0, CHUNKS)
    before = tl.sum(tl.load(sums_ptr + r * n_chunks + prior, mask=prior < c, other=0.0), 0)
    cols = c * BLOCK + tl.arange(0, BLOCK)
    live = cols < V
    p = tl.load(p_ptr + r * V + cols, mask=live, other=0.0)
    mass = tl.cumsum(p, 0) + before  # inclusive mass up to each sorted entry
    tl.store(past_ptr + r * V + cols, ((mass - p) >= top_p).to(tl.uint8), mask=live)


def mass_reached(sorted_p: torch.Tensor, top_p: float) -> torch.Tensor:
    """sorted_p [R, V] float32 (each row descending) -> uint8 [R, V] in sorted order: whether the mass before each
    entry reaches top_p (not yet closed to a suffix: see the module docstring)."""
    r, v = sorted_p.shape
    sorted_p = sorted_p.contiguous()
    n_chunks = triton.cdiv(v, BLOCK)
    sums = torch.empty(r, n_chunks, dtype=torch.float32, device=sorted_p.device)
    past = torch.empty(r, v, dtype=torch.uint8, device=sorted_p.device)
    # NOTE: the row count is only the grid's first axis, never an argument: no specialisation can follow it
    _chunk_sums_kernel[(r, n_chunks)](sorted_p, sums, v, n_chunks, BLOCK=BLOCK)
    _past_kernel[(r, n_chunks)](sorted_p, sums, past, v, n_chunks, float(top_p), BLOCK=BLOCK,
                                CHUNKS=triton.next_power_of_2(n_chunks))
    return past
