"""Ragged attention over a paged KV cache: every query row sees a prefix of its sequence's keys.

Reference path (CPU, and CUDA until a kernel replaces it). Each query row r of sequence i attends to
positions 0 .. kv_len[r]-1 of that sequence. Target rows use kv_len = position + 1 (causal); a drafter
block row uses kv_len = block end (context before the block plus the whole block, bidirectional).
"""
from __future__ import annotations

import torch

from sparkdec.engine.context import ForwardContext


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int, page_size: int) -> torch.Tensor:
    """Rows 0..length-1 of one sequence: cache [slots, H, D] -> [length, H, D]."""
    pos = torch.arange(length, device=cache.device)
    slots = block_table[pos // page_size] * page_size + pos % page_size
    return cache.index_select(0, slots)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    ctx: ForwardContext, scale: float, own_keys: bool = False) -> torch.Tensor:
    """q [T, Hq, D] -> out [T, Hq, D]; keys/values come from the caches [slots, Hkv, D]. own_keys: the forward wrote
    no key of a row's sequence but the rows' own (target rows; lets a kernel copy older keys before its PDL wait)."""
    if q.is_cuda:
        return _cuda_attention(q, k_cache, v_cache, ctx, scale, own_keys)
    t, hq, d = q.shape
    hkv = k_cache.shape[1]
    group = hq // hkv
    out = torch.empty_like(q)
    for seg in ctx.segments:
        k_all = gather_kv(k_cache, ctx.block_tables[seg.seq_index], seg.max_kv_len, ctx.page_size)
        v_all = gather_kv(v_cache, ctx.block_tables[seg.seq_index], seg.max_kv_len, ctx.page_size)
        for start, stop, kv_len in seg.row_groups:
            # NOTE: a target row is always its own group with exactly kv_len keys, so its arithmetic is
            # identical whether it runs alone (decode) or among other rows (verify, batch).
            n = stop - start
            qg = q[start:stop].reshape(n, hkv, group, d).permute(1, 0, 2, 3).reshape(hkv, n * group, d)
            k = k_all[:kv_len].permute(1, 2, 0)  # [Hkv, D, L]
            v = v_all[:kv_len].permute(1, 0, 2)  # [Hkv, L, D]
            scores = torch.matmul(qg, k).float() * scale  # [Hkv, n*G, L]
            probs = torch.softmax(scores, dim=-1).to(v.dtype)
            o = torch.matmul(probs, v)  # [Hkv, n*G, D]
            out[start:stop] = o.reshape(hkv, n, group, d).permute(1, 0, 2, 3).reshape(n, hq, d)
    return out


def _cuda_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, ctx: ForwardContext,
                    scale: float, own_keys: bool = False) -> torch.Tensor:
    """Generated rows (before ctx.prompt_row) through the split kernel, prompt rows through the prefill kernel:
    which kernel a row takes depends only on what the row is."""
    from sparkdec.ops.triton_attention import triton_paged_attention
    from sparkdec.ops.triton_prefill import triton_prefill_attention

    out = torch.empty_like(q)
    p = ctx.num_tokens if ctx.prompt_row is None else ctx.prompt_row
    if p:
        host = ctx.row_kv_len_host[:p] if ctx.row_kv_len_host is not None else None
        blocks = (ctx.block_lead, ctx.block_rows) if ctx.block_lead is not None else None
        triton_paged_attention(q[:p], k_cache, v_cache, ctx.block_tables, ctx.row_seq[:p], ctx.row_kv_len[:p],
                               ctx.page_size, max(host) if host else ctx.max_kv_len, scale, row_kv_len_host=host,
                               blocks=blocks, blocks_host=ctx.blocks_host, out=out[:p],
                               first_written=ctx.positions[:p] if own_keys else None)
    if p < ctx.num_tokens:
        triton_prefill_attention(q, k_cache, v_cache, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ctx.page_size,
                                 ctx.max_kv_len, scale, (ctx.prompt_lead, ctx.prompt_rows), out)
    return out
