"""Greedy vanilla Markov chain step (CUDA): z_k = u_k + W2 · W1[prev], argmax, in two launches per slot.

The reference (models/dspark.py::markov_chain) spends five or six launches per slot (gather W1[prev], the W2
product, float cast, add, argmax). Here one kernel gathers W1[prev], multiplies by a W2 tile, adds the base
logits, stores z and a per-tile (max, first index); a second reduces the tiles in order (ties go to the
smaller id, as torch.argmax) and writes the draft, which is also the next slot's prev.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from sparkdec.ops.triton_gemm import pdl_args, pdl_release, pdl_wait
from sparkdec.ops.triton_noise import race_noise

BLOCK_B = 16  # sequences per program (rows of the dot)
BLOCK_V = 64  # vocabulary entries per program (drafts only: no effect on what the target emits)
STEP_WARPS = 4


@triton.jit
def _step_kernel(prev_ptr, w1_ptr, w2_ptr, u_ptr, z_ptr, pmax_ptr, pidx_ptr, B, V, stride_u, stride_z, n_tiles,
                 R: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_V: tl.constexpr, IEEE: tl.constexpr,
                 PDL: tl.constexpr):
    pid_v = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    rs = tl.arange(0, R)
    rmask = rows < B
    cmask = cols < V
    w2 = tl.load(w2_ptr + cols[:, None] * R + rs[None, :], mask=cmask[:, None], other=0.0)  # [BLOCK_V, R]
    pdl_wait(PDL)
    prev = tl.load(prev_ptr + rows, mask=rmask, other=0)
    e = tl.load(w1_ptr + prev[:, None] * R + rs[None, :], mask=rmask[:, None], other=0.0)  # [BLOCK_B, R]
    if IEEE:
        acc = tl.dot(e, tl.trans(w2), input_precision="ieee")
    else:
        acc = tl.dot(e, tl.trans(w2))
    pdl_release(PDL)
    # NOTE: rounded like the reference: linear(e, W2) in the weights' dtype, then float32
    bias = acc.to(w2_ptr.dtype.element_ty).to(tl.float32)
    mask = rmask[:, None] & cmask[None, :]
    z = tl.load(u_ptr + rows[:, None] * stride_u + cols[None, :], mask=mask, other=0.0) + bias
    tl.store(z_ptr + rows[:, None] * stride_z + cols[None, :], z, mask=mask)
    z = tl.where(cmask[None, :], z, float("-inf"))
    best, where = tl.max(z, 1, return_indices=True, return_indices_tie_break_left=True)
    tl.store(pmax_ptr + rows * n_tiles + pid_v, best, mask=rmask)
    tl.store(pidx_ptr + rows * n_tiles + pid_v, pid_v * BLOCK_V + where, mask=rmask)


@triton.jit
def _argmax_kernel(pmax_ptr, pidx_ptr, prev_ptr, drafts_ptr, stride_d, n_tiles, CHUNK: tl.constexpr,
                   CHUNKS: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)
    pdl_wait(PDL)
    offs = tl.arange(0, CHUNK)
    best = tl.full([], float("-inf"), pmax_ptr.dtype.element_ty)
    best_idx = tl.full([], 0, tl.int32)
    for c in range(0, CHUNKS):  # tiles in column order; a later tile must be strictly larger to win
        t = c * CHUNK + offs
        vals = tl.load(pmax_ptr + row * n_tiles + t, mask=t < n_tiles, other=float("-inf"))
        m, i = tl.max(vals, 0, return_indices=True, return_indices_tie_break_left=True)
        idx = tl.load(pidx_ptr + row * n_tiles + c * CHUNK + i, mask=c * CHUNK + i < n_tiles, other=0)
        take = m > best
        best_idx = tl.where(take, idx, best_idx)
        best = tl.where(take, m, best)
    tl.store(prev_ptr + row, best_idx.to(tl.int64))
    tl.store(drafts_ptr + row * stride_d, best_idx.to(tl.int64))


def tiles_argmax(pmax: torch.Tensor, pidx: torch.Tensor, **pdl) -> torch.Tensor:
    """Per-tile bests pmax [R, n_tiles] (scores) and pidx [R, n_tiles] (their ids) -> each row's first maximum
    [R] int64, the tiles taken in order (a later tile must be strictly larger to win)."""
    r, n_tiles = pmax.shape
    out = torch.empty(r, dtype=torch.int64, device=pmax.device)
    chunk = 1024
    _argmax_kernel[(r,)](pmax, pidx, out, out, 1, n_tiles, CHUNK=chunk, CHUNKS=triton.cdiv(n_tiles, chunk), **pdl)
    return out


def markov_step(prev: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, u: torch.Tensor, z_out: torch.Tensor,
                drafts_col: torch.Tensor) -> None:
    """prev [B] int64 (updated in place to the new drafts), W1 [V, R], W2 [V, R], u [B, V] float32 (row stride
    free) -> z_out [B, V] float32 = u + W2·W1[prev] and drafts_col [B] (a column view of drafts) = argmax."""
    b, v = u.shape
    r = w1.shape[1]
    n_tiles = triton.cdiv(v, BLOCK_V)
    pmax = torch.empty(b, n_tiles, dtype=torch.float32, device=u.device)
    pidx = torch.empty(b, n_tiles, dtype=torch.int32, device=u.device)
    _step_kernel[(n_tiles, triton.cdiv(b, BLOCK_B))](prev, w1, w2, u, z_out, pmax, pidx, b, v, u.stride(0),
                                                     z_out.stride(0), n_tiles, R=r, BLOCK_B=BLOCK_B, BLOCK_V=BLOCK_V,
                                                     IEEE=w2.dtype == torch.float32, num_warps=STEP_WARPS,
                                                     **pdl_args())
    chunk = 1024
    _argmax_kernel[(b,)](pmax, pidx, prev, drafts_col, drafts_col.stride(0), n_tiles, CHUNK=chunk,
                         CHUNKS=triton.cdiv(n_tiles, chunk), **pdl_args())


# the whole chain (markov_chain): each slot's kernel has CHAIN_PROGRAMS programs, each walking a contiguous range of
# vocabulary tiles (pipelined loads) and keeping its running (max, first index); the next slot's programs reduce
# those partials themselves (no argmax launch between slots). False: markov_step per slot (the A/B baseline).
CHAIN = True
CHAIN_PROGRAMS = 264
CHAIN_STAGES = 3  # pipelined W2 tiles in flight per program
# odd slots walk their tiles backwards: a slot starts on the W2 tiles the previous slot read last, which are still
# in L2 (W2 is 78 MB at the released shape, L2 50 MB; walked the same way every time, L2 holds nothing the next
# slot reads first). Ties go to the smaller id whatever the order, so the bits do not change.
CHAIN_PINGPONG = True


@triton.jit
def _prev_from_partials(pmax_ptr, pidx_ptr, rows, rmask, n_parts, V, BLOCK_B: tl.constexpr, CHUNK: tl.constexpr,
                        CHUNKS: tl.constexpr):
    """Each row's first argmax from the previous slot's per-program (max, first index) in vocabulary order:
    a later program must be strictly larger to win (ties go to the smaller id, as torch.argmax); a row whose
    maxima are all NaN gets 0 (as _argmax_kernel)."""
    best = tl.full([BLOCK_B], float("-inf"), tl.float32)
    best_idx = tl.zeros([BLOCK_B], tl.int32)
    offs = tl.arange(0, CHUNK)
    for c in range(0, CHUNKS):
        t = c * CHUNK + offs
        m2 = rmask[:, None] & (t < n_parts)[None, :]
        vals = tl.load(pmax_ptr + rows[:, None] * n_parts + t[None, :], mask=m2, other=float("-inf"))
        m, i = tl.max(vals, 1, return_indices=True, return_indices_tie_break_left=True)
        idx = tl.load(pidx_ptr + rows * n_parts + c * CHUNK + i, mask=rmask & (c * CHUNK + i < n_parts), other=0)
        take = m > best
        best_idx = tl.where(take, idx, best_idx)
        best = tl.where(take, m, best)
    return tl.where(best_idx < V, best_idx, 0)


@triton.jit
def _load_w2(w2_ptr, t, rs, V, R: tl.constexpr, BLOCK_V: tl.constexpr):
    cols = t * BLOCK_V + tl.arange(0, BLOCK_V)
    return tl.load(w2_ptr + cols[:, None] * R + rs[None, :], mask=(cols < V)[:, None], other=0.0)  # [BLOCK_V, R]


@triton.jit
def _chain_tile(e, w2, t, best, best_idx, u_ptr, z_ptr, rows, rmask, V, stride_u, stride_z, race, BLOCK_V: tl.constexpr,
                IEEE: tl.constexpr, COUPLED: tl.constexpr):
    """z for vocabulary tile t (stored) and the running (max, first index) of each row, tiles taken in order.
    COUPLED: rows whose temperature is above 0 take the max of z / T - log E instead (spec/coupling.py; race: see
    _coupled_scores)."""
    cols = t * BLOCK_V + tl.arange(0, BLOCK_V)
    cmask = cols < V
    if IEEE:
        acc = tl.dot(e, tl.trans(w2), input_precision="ieee")
    else:
        acc = tl.dot(e, tl.trans(w2))
    # NOTE: rounded like the reference: linear(e, W2) in the weights' dtype, then float32
    bias = acc.to(w2.dtype).to(tl.float32)
    mask = rmask[:, None] & cmask[None, :]
    z = tl.load(u_ptr + rows[:, None] * stride_u + cols[None, :], mask=mask, other=0.0) + bias
    tl.store(z_ptr + rows[:, None] * stride_z + cols[None, :], z, mask=mask)
    z = tl.where(cmask[None, :], z, float("-inf"))
    if COUPLED:
        z = _coupled_scores(z, rows, cols, cmask, race)
    m, i = tl.max(z, 1, return_indices=True, return_indices_tie_break_left=True)
    idx = t * BLOCK_V + i
    take = (m > best) | ((m == best) & (idx < best_idx))  # ties: the smaller id, whichever tile came first
    return tl.where(take, m, best), tl.where(take, idx, best_idx)


@triton.jit
def _coupled_scores(z, rows, cols, cmask, race):
    """z [BLOCK_B, BLOCK_V] -> z / T - log E (float32, as spec/coupling.coupled_token computes it) on the rows
    with a temperature above 0 (race: their noise g for this slot, its row stride, temperatures, whether any row
    couples); the others unchanged."""
    g_ptr, stride_g, temp, any_on = race
    if any_on:
        on = temp > 0
        g = tl.load(g_ptr + rows[:, None].to(tl.int64) * stride_g + cols[None, :], mask=on[:, None] & cmask[None, :],
                    other=0.0)
        z = tl.where(on[:, None], tl.math.div_rn(z, tl.where(on, temp, 1.0)[:, None]) + g, z)
    return z


@triton.jit
def _walk(t0, j, TILES: tl.constexpr, WALK: tl.constexpr):
    """The j-th tile of the range t0 .. t0 + TILES - 1: WALK 0 forward, 1 backward. (Alternating between both
    ends was slower: attention_split_chain_order_ab_h200_2026-11-30.json.)"""
    if WALK == 0:
        return t0 + j
    return t0 + TILES - 1 - j


def _slot_walk(k: int) -> int:
    return int(CHAIN_PINGPONG and k % 2 == 1)


@triton.jit
def _chain_kernel(prev_ptr, ppmax_ptr, ppidx_ptr, drafts_ptr, stride_d, w1_ptr, w2_ptr, u_ptr, z_ptr, pmax_ptr,
                  pidx_ptr, B, V, stride_u, stride_z, g_ptr, stride_g, temp_ptr,
                  TILES: tl.constexpr, R: tl.constexpr,
                  BLOCK_B: tl.constexpr, BLOCK_V: tl.constexpr, FIRST: tl.constexpr, CHUNK: tl.constexpr,
                  CHUNKS: tl.constexpr, IEEE: tl.constexpr, WALK: tl.constexpr, COUPLED: tl.constexpr,
                  PDL: tl.constexpr):
    pid = tl.program_id(0)
    n_parts = tl.num_programs(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    rs = tl.arange(0, R)
    rmask = rows < B
    t0 = pid * TILES  # TILES tiles per program; the last program's tiles past the vocabulary are masked off
    # the j-th tile walked (_walk: forward or backward); the first is a weight, read while
    # the previous kernel drains
    w2 = _load_w2(w2_ptr, _walk(t0, 0, TILES, WALK), rs, V, R, BLOCK_V)
    race = (g_ptr, stride_g, 0.0, False)
    if COUPLED:  # staged before the forward: read while the previous kernel drains
        temp = tl.load(temp_ptr + rows, mask=rmask, other=0.0)
        race = (g_ptr, stride_g, temp, tl.max(temp, 0) > 0)
    pdl_wait(PDL)
    if FIRST:
        prev = tl.load(prev_ptr + rows, mask=rmask, other=0)
    else:
        # the previous slot's draft, from its programs' partials; program 0 also writes it to the drafts
        prev = _prev_from_partials(ppmax_ptr, ppidx_ptr, rows, rmask, n_parts, V, BLOCK_B, CHUNK, CHUNKS)
        if pid == 0:
            tl.store(drafts_ptr + rows * stride_d, prev.to(tl.int64), mask=rmask)
    e = tl.load(w1_ptr + prev[:, None].to(tl.int64) * R + rs[None, :], mask=rmask[:, None], other=0.0)  # [BLOCK_B, R]
    best, best_idx = _chain_tile(e, w2, _walk(t0, 0, TILES, WALK), tl.full([BLOCK_B], float("-inf"), tl.float32),
                                 tl.zeros([BLOCK_B], tl.int32), u_ptr, z_ptr, rows, rmask, V, stride_u, stride_z,
                                 race, BLOCK_V, IEEE, COUPLED)
    for j in range(1, TILES):
        t = _walk(t0, j, TILES, WALK)
        w2 = _load_w2(w2_ptr, t, rs, V, R, BLOCK_V)
        best, best_idx = _chain_tile(e, w2, t, best, best_idx, u_ptr, z_ptr, rows, rmask, V, stride_u, stride_z,
                                     race, BLOCK_V, IEEE, COUPLED)
    pdl_release(PDL)
    tl.store(pmax_ptr + rows * n_parts + pid, best, mask=rmask)
    tl.store(pidx_ptr + rows * n_parts + pid, best_idx, mask=rmask)


def markov_chain(anchors: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, u: torch.Tensor, z: torch.Tensor,
                 drafts: torch.Tensor, finish: bool = True, coupling=None) -> ChainTail | None:
    """The greedy chain of all γ slots: anchors [B] int64, W1 [V, R], W2 [V, R], u [B, γ, V] float32 ->
    z [B, γ, V] float32 (z_k = u_k + W2·W1[d_{k-1}], d_{-1} = the anchor) and drafts [B, γ] int64 (argmax of z_k).
    γ launches and one final reduce; the same z and drafts as markov_step slot by slot.
    finish=False: the last slot's partials are returned, not reduced: the caller's next kernel reduces them
    (finish_chain, or the confidence kernel of ops/triton_propose.py) and writes drafts[:, γ-1].
    coupling: (key bases [B] int64, temperatures [B] float32, anchor positions [B] int64): the rows with a
    temperature above 0 draft the race of spec/coupling.py (the target's keyed noise) instead of the argmax."""
    b, gamma, v = u.shape
    r = w1.shape[1]
    n_tiles = triton.cdiv(v, BLOCK_V)
    per = triton.cdiv(n_tiles, CHAIN_PROGRAMS)
    programs = triton.cdiv(n_tiles, per)
    chunk = min(1024, triton.next_power_of_2(programs))
    parts = [(torch.empty(b, programs, dtype=torch.float32, device=u.device),
              torch.empty(b, programs, dtype=torch.int32, device=u.device)) for _ in range(2)]
    g = race_noise(coupling, gamma, v) if coupling else None  # [B, γ, V]: the coupled rows' noise per slot
    for k in range(gamma):
        (pmax, pidx), (ppmax, ppidx) = parts[k % 2], parts[(k + 1) % 2]
        _chain_kernel[(programs, triton.cdiv(b, BLOCK_B))](
            anchors, ppmax, ppidx, drafts[:, max(k - 1, 0)], drafts.stride(0), w1, w2, u[:, k], z[:, k], pmax, pidx,
            b, v, u.stride(0), z.stride(0), g[:, k] if coupling else z, g.stride(0) if coupling else 0,
            coupling[1] if coupling else z, TILES=per, R=r, BLOCK_B=BLOCK_B, BLOCK_V=BLOCK_V, FIRST=k == 0,
            CHUNK=chunk, CHUNKS=triton.cdiv(programs, chunk), IEEE=w2.dtype == torch.float32,
            WALK=_slot_walk(k), COUPLED=coupling is not None, num_warps=STEP_WARPS, num_stages=CHAIN_STAGES,
            **pdl_args())
    tail = ChainTail(*parts[(gamma - 1) % 2], programs, chunk, v)
    if not finish:
        return tail
    finish_chain(tail, drafts)
    return None


class ChainTail(NamedTuple):
    """The last slot's per-program (max, first index) [B, programs], not yet reduced to its draft."""
    pmax: torch.Tensor
    pidx: torch.Tensor
    programs: int
    chunk: int
    vocab: int


def finish_chain(tail: ChainTail, drafts: torch.Tensor) -> None:
    """drafts[:, γ-1] from the last slot's partials (one launch)."""
    b = drafts.shape[0]
    scratch = torch.empty(b, dtype=torch.int64, device=drafts.device)
    _argmax_kernel[(b,)](tail.pmax, tail.pidx, scratch, drafts[:, -1], drafts.stride(0), tail.programs,
                         CHUNK=tail.chunk, CHUNKS=triton.cdiv(tail.programs, tail.chunk), **pdl_args())


def supported(w1: torch.Tensor) -> bool:
    """The kernel needs a power-of-two Markov rank of at least 16 (a dot operand)."""
    r = w1.shape[1]
    return r >= 16 and r & (r - 1) == 0
