"""The chained propose's staging in one launch: round k's acceptance on the device and round k+1's propose rows.

spec/chain.py queues round k+1's propose before the host reads round k back. Its staging (the acceptance of each
sequence's drafts against the verify's tokens, the next anchor and position, and the propose graph's positions, slots
and keys per row, padding rows included) took about 29 torch launches a round; on a small model, whose rounds the
host bounds, they were half of a round (the tiny pair on an H100: 1.287 -> 0.641 ms, scripts/ab_chain_stage.py). Here
one program per tier row does it all. Its torch form (spec/chain.stage_reference) is what runs without CUDA and what the interpreter test compares
against.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


# one compiled kernel per (γ, simulated or not): no value or alignment specialization of the arguments, which vary from
# round to round (a first use of a new specialization compiles in the middle of a request: most likely why the
# 4B bench's processed rounds read 11.7 ms against 5.5 before this). ProposeGraphs.capture compiles both forms (warm_up)
_ARGS = ("first_ptr", "n_first", "drafts_ptr", "stride_d", "vals_ptr", "tables_ptr", "stride_t", "pages", "anchors_ptr",
         "positions_ptr", "slots_ptr", "row_len_ptr", "n", "page_size", "trash_slot", "simulate_al")


@triton.jit(do_not_specialize=_ARGS, do_not_specialize_on_alignment=_ARGS)
def _stage_kernel(first_ptr, n_first, drafts_ptr, stride_d, vals_ptr, tables_ptr, stride_t, pages, anchors_ptr,
                  positions_ptr, slots_ptr, row_len_ptr, n, page_size, trash_slot, simulate_al,
                  GAMMA: tl.constexpr, BLOCK: tl.constexpr, SIMULATE: tl.constexpr):
    i = tl.program_id(0)
    k = tl.arange(0, BLOCK)
    in_block = k < GAMMA
    out = i * GAMMA + k
    if i < n:
        row = tl.load(vals_ptr + i)  # vals [3, n]: anchor rows, drafts verified, anchor positions
        ell = tl.load(vals_ptr + n + i)
        start = tl.load(vals_ptr + 2 * n + i)
        if SIMULATE:
            accepted = tl.minimum(ell, simulate_al - 1)
        else:  # the drafts equal to the target's token up to the first mismatch (spec/verify.py accept_greedy)
            at = tl.minimum(row + k, n_first - 1)
            d = tl.load(drafts_ptr + i * stride_d + k, mask=in_block, other=-1)
            f = tl.load(first_ptr + at, mask=in_block, other=-2)
            match = (d == f) & (k < ell)
            accepted = tl.min(tl.where(match, BLOCK, k), 0).to(tl.int64)
        anchor = tl.load(first_ptr + row + accepted)
        pos = start + accepted + 1
        p = pos + k  # [BLOCK] the block's positions
        on = in_block & (p // page_size < pages)
        page = tl.load(tables_ptr + i.to(tl.int64) * stride_t + p // page_size, mask=on, other=trash_slot // page_size)
        tl.store(anchors_ptr + i, anchor)
        tl.store(positions_ptr + out, p, mask=in_block)
        tl.store(slots_ptr + out, page * page_size + p % page_size, mask=in_block)
        tl.store(row_len_ptr + out, pos + GAMMA + k * 0, mask=in_block)  # a block row sees up to the block's end
    else:  # padding rows, as ProposeGraphs._fill writes them
        tl.store(anchors_ptr + i, 0)
        tl.store(positions_ptr + out, k * 0, mask=in_block)
        tl.store(slots_ptr + out, trash_slot + k * 0, mask=in_block)
        tl.store(row_len_ptr + out, GAMMA + k * 0, mask=in_block)


def stage_kernel(first: torch.Tensor, drafts: torch.Tensor, vals: torch.Tensor, tables: torch.Tensor,
                 out: tuple, tier: int, page_size: int, trash_slot: int, simulate_al: int | None) -> None:
    """first [T] each verify row's token; drafts [n, γ] (rows contiguous); vals [3, n] int64 (anchor rows, drafts
    verified, anchor positions); tables [≥ tier, pages]; out: (anchors [≥ tier], positions, slots, row_len
    [≥ tier·γ]) written for rows 0..tier-1, those past n as padding."""
    n, gamma = vals.shape[1], drafts.shape[1]
    assert drafts.shape[0] == n and drafts.stride(1) == 1 and first.is_contiguous(), "stage_kernel: drafts [n, γ] rows"
    anchors, positions, slots, row_len = out
    _stage_kernel[(tier,)](first, first.numel(), drafts, drafts.stride(0), vals.contiguous(), tables, tables.stride(0),
                           tables.shape[1], anchors, positions, slots, row_len, n, page_size, trash_slot,
                           simulate_al or 0, GAMMA=gamma, BLOCK=max(2, triton.next_power_of_2(gamma)),
                           SIMULATE=simulate_al is not None)


def warm_up(gamma: int, tables: torch.Tensor, out: tuple, page_size: int, trash_slot: int) -> None:
    """Compile both forms of the kernel (greedy, simulated) before the first round: one sequence at row 0, position
    0, no drafts verified, written into out (static buffers a propose stages before it replays)."""
    dev = tables.device
    first, drafts = torch.zeros(1, dtype=torch.long, device=dev), torch.zeros(1, gamma, dtype=torch.long, device=dev)
    vals = torch.zeros(3, 1, dtype=torch.long, device=dev)
    for al in (None, 1):
        stage_kernel(first, drafts, vals, tables, out, 1, page_size, trash_slot, al)
