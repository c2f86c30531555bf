"""Row argmax of float logits over a large vocabulary in two launches: chunks in parallel, then their winners.

torch's reduction gives each row of [rows, V] one thread block, which reads the whole row (608 KB for Qwen3's 151936
entries) alone: about 8.5 us per decode step on the H200 (decode_gaps_h200_2026-11-30.json). Here each row's chunks
of BLOCK entries are reduced by programs of their own, then one program per row picks among the chunk winners. Ties
go to the lowest index, as torch.argmax's do, so the result is torch's whenever no logit is NaN.
"""
from __future__ import annotations

from typing import NamedTuple

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
def _pick_kernel(val_ptr, idx_ptr, out_ptr, n, chunks, on_ptr, ids_ptr, pos_ptr, slot_ptr, len_ptr, seq_ptr, tab_ptr,
                 stride_tab, pages, page_size, ring_ptr, stride_ring, ring_slots, CHUNKS: tl.constexpr,
                 ADVANCE: tl.constexpr, RING: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, CHUNKS)
    if ADVANCE:  # the row's metadata: no kernel still running writes it, so it loads before the wait
        flag = tl.load(on_ptr + row)
        p = tl.load(pos_ptr + row) + 1
        on = (flag != 0) & (p // page_size < pages)
        page = tl.load(tab_ptr + tl.load(seq_ptr + row) * stride_tab + p // page_size, mask=on, other=0)
    pdl_wait(PDL)
    v = tl.load(val_ptr + row * chunks + c, mask=c < chunks, other=float("-inf"))
    i = tl.load(idx_ptr + row * chunks + c, mask=c < chunks, other=n)
    best = tl.max(v, 0)
    token = tl.min(tl.where(v == best, i, n), 0).to(tl.int64)
    tl.store(out_ptr + row, token)
    if ADVANCE:  # this row's next decode step: its token at the next position (see Advance)
        tl.store(ids_ptr + row, token, mask=on)
        tl.store(pos_ptr + row, p, mask=on)
        tl.store(len_ptr + row, p + 1, mask=on)
        tl.store(slot_ptr + row, page * page_size + p % page_size, mask=on)
        if RING:  # the token into the host's ring, at this step's slot; the next step takes the next slot
            tl.store(ring_ptr + (flag - 1) * stride_ring + row, token, mask=flag != 0)
            tl.store(on_ptr + row, flag % ring_slots + 1, mask=flag != 0)
    pdl_release(PDL)


class Advance(NamedTuple):
    """A decode graph's row metadata ([rows] int64 views of engine/graphs.TargetGraphs' device stage), moved on in
    place to the next step for the rows whose `on` is set: the row's token becomes its id, its position and keys
    grow by one, its slot is the next position's in its block table (a row whose next page lies past the table stays
    as it was). Plain decoding one step ahead then needs no host copy while its rows stay the same.
    ring ([slots, rows], pinned host memory on CUDA): each such row's token is also written to ring[on - 1, row], and
    `on` moves to the next slot (on % slots + 1), so the host reads a step's tokens with no copy, and the step after
    writes another slot."""
    on: torch.Tensor
    ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    row_len: torch.Tensor
    row_seq: torch.Tensor
    tables: torch.Tensor  # [S, pages]
    page_size: int
    ring: torch.Tensor | None = None


def advance_reference(tokens: torch.Tensor, a: Advance) -> None:
    """What the pick kernel's ADVANCE does, in torch (the argmax's torch path, and the tests' reference)."""
    pages = a.tables.shape[1]
    p = a.positions + 1
    page_idx = torch.div(p, a.page_size, rounding_mode="floor")
    on = (a.on != 0) & (page_idx < pages)
    page = a.tables[a.row_seq.clamp(0, a.tables.shape[0] - 1), page_idx.clamp(max=pages - 1)]
    a.ids.copy_(torch.where(on, tokens, a.ids))
    a.slots.copy_(torch.where(on, page * a.page_size + p % a.page_size, a.slots))
    a.row_len.copy_(torch.where(on, p + 1, a.row_len))
    a.positions.copy_(torch.where(on, p, a.positions))
    if a.ring is not None:
        rows = torch.nonzero(a.on).flatten()
        a.ring[a.on[rows] - 1, rows] = tokens[rows]
        a.on.copy_(torch.where(a.on != 0, a.on % a.ring.shape[0] + 1, a.on))


def argmax_rows(logits: torch.Tensor, advance: Advance | None = None) -> torch.Tensor:
    """logits [R, V] float32 -> [R] int64, each row's first maximal index: the two kernels on CUDA,
    torch.argmax(-1) elsewhere. advance: decode rows moved on to their next step with these tokens (Advance)."""
    ok = logits.dim() == 2 and logits.dtype == torch.float32 and logits.stride(1) == 1
    if not (logits.is_cuda and ok and 0 < logits.shape[1] <= BLOCK * MAX_CHUNKS):
        out = logits.argmax(-1)
        if advance is not None:
            advance_reference(out, advance)
        return out
    return argmax_kernels(logits, advance)


def argmax_kernels(logits: torch.Tensor, advance: Advance | None = None) -> torch.Tensor:
    """The two launches (also what tests run under Triton's interpreter, on CPU tensors)."""
    rows, n = logits.shape
    out = torch.empty(rows, dtype=torch.long, device=logits.device)
    if rows == 0:
        return out
    chunks = triton.cdiv(n, BLOCK)
    val = torch.empty(rows, chunks, dtype=torch.float32, device=logits.device)
    idx = torch.empty(rows, chunks, dtype=torch.int32, device=logits.device)
    _chunk_kernel[(rows, chunks)](logits, val, idx, n, logits.stride(0), chunks, BLOCK=BLOCK, **pdl_args())
    a = advance
    meta = ((a.on, a.ids, a.positions, a.slots, a.row_len, a.row_seq, a.tables, a.tables.stride(0), a.tables.shape[1],
             a.page_size) if a is not None else (out,) * 7 + (0, 0, 1))
    ring = a is not None and a.ring is not None
    meta += (a.ring, a.ring.stride(0), a.ring.shape[0]) if ring else (out, 0, 1)
    _pick_kernel[(rows,)](val, idx, out, n, chunks, *meta, CHUNKS=max(16, triton.next_power_of_2(chunks)),
                          ADVANCE=a is not None, RING=ring, **pdl_args())
    return out
