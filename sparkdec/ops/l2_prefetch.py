"""L2 prefetch of weights a later kernel will read, issued by a latency-bound kernel while HBM would sit idle.

The decode layer's attention chain (q/k norm + RoPE, split, combine) moves few bytes for ~10 us per layer; the
split kernel can use that time to pull the o projection's weights (and the head of gate_up's) into L2 with
cp.async.bulk.prefetch.L2, so the products after it stream part of their bytes from L2. Bits never change: a
prefetch only moves data between HBM and L2.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.ops.triton_gemm import INTERPRET

# bytes of weights the split kernel prefetches into L2 for the products after it, o's weights first, then the head of
# gate_up's (0: off). Set from the H200 A/B (scripts/ab_decode.py variants pf_*)
BUDGET = 0
WHEN = 1  # 1: before the split kernel's PDL wait (overlapping the kernels before it); 2: after it
CHUNK_BYTES = 4096  # bytes per bulk prefetch (a multiple of 16)

# one thread's bulk prefetch of [addr, addr + size) into L2, issued only where live != 0
_ASM = tl.constexpr("""{
.reg .pred p;
setp.ne.u32 p, $2, 0;
@p cp.async.bulk.prefetch.L2.global [$1], $3;
mov.u32 $0, 0;
}""")


@triton.jit
def prefetch_l2(ptr, n_elems, part, parts, CHUNK: tl.constexpr, LANES: tl.constexpr):
    """Program part of parts: its chunks part, part + parts, ... of ptr[0:n_elems] (CHUNK elements each, LANES at a
    time: one per thread when LANES = 32 * num_warps) prefetched into L2."""
    n_chunks = tl.cdiv(n_elems, CHUNK)
    esize: tl.constexpr = ptr.dtype.element_ty.primitive_bitwidth // 8
    for r0 in range(0, n_chunks, parts * LANES):
        c = r0 + part + parts * tl.arange(0, LANES)  # [LANES] chunk ids
        start = c.to(tl.int64) * CHUNK
        size = (tl.minimum(n_elems - start, CHUNK) * esize).to(tl.int32)
        live = (c < n_chunks).to(tl.int32)
        tl.inline_asm_elementwise(_ASM, "=r,l,r,r", [ptr + start, live, size], dtype=tl.int32, is_pure=False,
                                  pack=1)


def plan(weights: list[torch.Tensor], budget: int | None = None) -> list[tuple[torch.Tensor, int]]:
    """What to prefetch: the weights' bytes in order up to the budget -> [(weight, elements of its head)] for the two
    first weights (empty when off; a weight not aligned for bulk copies ends the list)."""
    budget = BUDGET if budget is None else budget
    if not budget or INTERPRET:
        return []
    out = []
    for w in weights[:2]:
        if not w.is_cuda or w.data_ptr() % 16 or not w.is_contiguous() or budget < 16:
            break
        n = min(w.numel(), budget // w.element_size())
        n -= n % (16 // w.element_size())
        out.append((w, n))
        budget -= n * w.element_size()
    return out


def kernel_args(regions: list[tuple[torch.Tensor, int]], fallback: torch.Tensor) -> tuple:
    """(ptr_a, n_a, ptr_b, n_b, chunk) for a kernel's two prefetch regions (n 0: none)."""
    r = regions + [(fallback if not regions else regions[0][0], 0)] * (2 - len(regions))
    chunk = max(16, CHUNK_BYTES) // r[0][0].element_size()
    return r[0][0], r[0][1], r[1][0], r[1][1], chunk
