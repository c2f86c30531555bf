"""Triton prefill attention (CUDA): prompt rows in blocks of one sequence, one pass over the keys, no workspace.

The split kernel (ops/triton_attention.py) keeps a decode row fast by spreading its keys over many programs,
at the price of an fp32 partial per 128-key split that a combine kernel reads back: for a long prompt that
traffic dominates (an 8k-token prompt spent 243 of 389 ms in split + combine on the H200). Prompt rows take
this kernel instead: one program per (row block, kv head) walks the keys in order with an online softmax.
Every prompt row always comes here and every generated row (decode, verify) always goes to the split kernel,
so a row's bits depend on what the row is, never on the batch around it (engine/context.py, prompt_from).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.engine.context import BLOCK_ROWS
from sparkdec.ops.triton_attention import BLOCK_N, QUERY_TILE, attend_step, load_keys, query_tile, row_block
from sparkdec.ops.triton_gemm import pdl_args, pdl_release, pdl_wait


@triton.jit
def _prefill_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, len_ptr, lead_ptr, nrow_ptr, out_ptr, scale, stride_qt,
                    stride_qh, stride_ot, stride_oh, stride_ks, stride_kh, stride_bt, page_size, num_rows,
                    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, ROWS: tl.constexpr, PASSES: tl.constexpr,
                    D: tl.constexpr, D_PAD: tl.constexpr, BLOCK: tl.constexpr, STEPS: tl.constexpr,
                    PDL: tl.constexpr):
    kvh = tl.program_id(1)
    lead, n_rows, has_block, seq = row_block(lead_ptr, nrow_ptr, seq_ptr, num_rows)
    pdl_wait(PDL)
    if has_block:
        for pas in range(0, PASSES):
            row, head, live, lens, max_len, q, d, dm = query_tile(q_ptr, len_ptr, lead, n_rows, pas * ROWS, kvh,
                                                                  stride_qt, stride_qh, GROUP, GROUP_PAD, ROWS, D,
                                                                  D_PAD)
            m_i = tl.full([ROWS * GROUP_PAD], float("-inf"), tl.float32)
            l_i = tl.zeros([ROWS * GROUP_PAD], tl.float32)
            acc = tl.zeros([ROWS * GROUP_PAD, D_PAD], tl.float32)
            # NOTE: STEPS is a power-of-two bound (few compiled variants); steps past the block's keys are skipped
            for j in range(0, STEPS):
                if j * BLOCK < max_len:
                    pos = j * BLOCK + tl.arange(0, BLOCK)
                    k, v = load_keys(k_ptr, v_ptr, bt_ptr, stride_ks, stride_kh, stride_bt, page_size, kvh, seq,
                                     pos, pos < max_len, d, dm)
                    m_i, l_i, acc = attend_step(q, lens, m_i, l_i, acc, k, v, pos, scale)
            out = acc / tl.where(live, l_i, 1.0)[:, None]
            tl.store(out_ptr + row[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
                     out.to(out_ptr.dtype.element_ty), mask=live[:, None] & dm[None, :])
    pdl_release(PDL)


def triton_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                             row_seq: torch.Tensor, row_kv_len: torch.Tensor, page_size: int, max_kv_len: int,
                             scale: float, blocks: tuple[torch.Tensor, torch.Tensor], out: torch.Tensor) -> None:
    """out[r] = attention of query row r for the rows of `blocks` = (lead [G], rows [G]) (prompt rows, row
    indices into q); q, out [T, Hq, D]; caches [slots, Hkv, D]; row_seq, row_kv_len [T]."""
    lead, rows = blocks
    if lead.shape[0] == 0:
        return
    t, hq, d = q.shape
    hkv = k_cache.shape[1]
    group_pad = triton.next_power_of_2(hq // hkv)
    rows_per_pass = max(1, QUERY_TILE // group_pad)
    _prefill_kernel[(lead.shape[0], hkv)](
        q, k_cache, v_cache, block_tables, row_seq, row_kv_len, lead, rows, out, scale, q.stride(0), q.stride(1),
        out.stride(0), out.stride(1), k_cache.stride(0), k_cache.stride(1), block_tables.stride(0), page_size, t,
        GROUP=hq // hkv, GROUP_PAD=group_pad, ROWS=rows_per_pass, PASSES=triton.cdiv(BLOCK_ROWS, rows_per_pass), D=d,
        D_PAD=max(16, triton.next_power_of_2(d)), BLOCK=BLOCK_N,
        STEPS=triton.next_power_of_2(triton.cdiv(max_kv_len, BLOCK_N)), num_warps=4, **pdl_args())
