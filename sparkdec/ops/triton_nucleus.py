"""Sampled tokens on CUDA without a sort: softmax, top-p's cut by a search over probability thresholds, the keyed race.

For logits x [R, V] and one draw per row (its mixed key sampling._mix(seed, position, stream)), in about a dozen short
launches and no host read:
1. `_stats_kernel`: for each BLOCK-wide chunk of x / T (top-k's cut applied), its max and sum of exp(x / T - max);
2. `_probs_kernel`: every program of a row folds the chunks' (max, sum) in chunk order (the same Z in each), writes
   p = exp(x / T - M) / Z and runs the first pass of the search below;
3. `_pass_kernel` (PASSES - 1 launches after the first pass): top-p's cut. S(t), the mass of the entries with p > t,
   is always summed in one order (per thread along a chunk, then across the chunk's SUB lanes, then the chunks in
   order), so it can only fall as t rises. Each pass evaluates S at NT thresholds spread over the current interval
   [lo, hi] of float32 bit patterns, with S(lo) >= top_p > S(hi); the row's last program to finish (an arrival
   counter) sums the chunks and narrows the interval NT-fold. When hi = lo + 1, v = float(hi) is the smallest
   probability whose mass above stays below top_p. Kept: p > v, and of the entries equal to v the
   ceil((top_p - S(v)) / v) (at least 1) with the smallest ids. That is sampling's rule (the smallest set,
   probability descending and ties to the smaller id, whose mass reaches top_p) with the masses summed in another
   order; if even S(0) < top_p nothing is dropped.
   `_cut_kernel` counts the entries equal to v and, when the cut falls inside that run (bf16 logits make runs of
   equal probabilities common), finds the id of the first one dropped.
4. `_race_kernel` and ops/triton_markov.py's in-order argmax: token = argmax over kept entries of x / T - log E_i, the
   race of ops/triton_sample.py.
A row's bits depend on that row alone: the row count is only a grid axis.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.ops.triton_markov import tiles_argmax
from sparkdec.ops.triton_noise import log_exp_of_key, noise_args

BLOCK = 1024  # vocabulary entries per program (fixes the order of Z's and S's sums)
SUB = 128  # entries per step of a program's threshold sums (part of that order too)
NT = 16  # thresholds per pass (H200, 8 rows: 16 took 124 us a draw, 32 178; scripts/nucleus_probe.py)
NUM_WARPS = 4  # warps of the softmax and search programs
ONE_UP = 0x3F800001  # the bit pattern just above 1.0f: S there is 0
KEEP_ALL = -0x40800000  # the bits of -1.0f: with lo = KEEP_ALL - 1 the search is over and p > -1 keeps every entry
RACE_BLOCK = 1024  # vocabulary entries per race program
_ONE_UP, _KEEP_ALL = tl.constexpr(ONE_UP), tl.constexpr(KEEP_ALL)  # (what kernels may read of module globals)


def passes_needed(width: int = ONE_UP, nt: int = NT) -> int:
    """Passes that narrow an interval of `width` bit patterns to 1 (each leaves at most ceil(width / nt))."""
    n = 0
    while width > 1:
        width, n = -(-width // nt), n + 1
    return n


PASSES = passes_needed()


@triton.jit
def _scaled(x_ptr, stride_x, kth_ptr, r, cols, V, temperature, HAS_KTH: tl.constexpr):
    """x / T for cols of row r (top-k's cut and cols >= V: -inf)."""
    x = tl.math.div_rn(tl.load(x_ptr + r * stride_x + cols, mask=cols < V, other=0.0).to(tl.float32), temperature)
    keep = cols < V
    if HAS_KTH:
        keep = keep & (x >= tl.load(kth_ptr + r))
    return tl.where(keep, x, float("-inf"))


@triton.jit
def _stats_kernel(x_ptr, stride_x, kth_ptr, ms_ptr, V, C, temperature, HAS_KTH: tl.constexpr,
                  BLOCK: tl.constexpr):
    c = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    x = _scaled(x_ptr, stride_x, kth_ptr, r, c * BLOCK + tl.arange(0, BLOCK), V, temperature, HAS_KTH)
    m = tl.max(x, 0)
    s = tl.sum(tl.exp(x - tl.where(m == float("-inf"), 0.0, m)), 0)
    tl.store(ms_ptr + (r * C + c) * 2, m)
    tl.store(ms_ptr + (r * C + c) * 2 + 1, s)


@triton.jit
def _thresholds(lo, hi, NT: tl.constexpr):
    """NT bit patterns lo + floor((hi - lo) * k / NT), k = 0 .. NT - 1 (int32 [NT])."""
    k = tl.arange(0, NT).to(tl.int64)
    return (lo.to(tl.int64) + (hi.to(tl.int64) - lo.to(tl.int64)) * k // NT).to(tl.int32)


@triton.jit
def _tile_masses(p, u, acc):
    """acc [SUB, NT] += p [SUB] where p > float(u[k]) (else 0): running sums per thread, reduced over SUB once per
    program (`_arrive`); every threshold k is summed the same way."""
    return acc + tl.where(p[:, None] > u.to(tl.float32, bitcast=True)[None, :], p[:, None], 0.0)


@triton.jit
def _pick(k, at, values, fallback):
    """values[at] (a [NT] vector), or fallback where at is past its end."""
    picked = tl.sum(tl.where(k == at, values, 0), 0)
    return tl.where(at < k.shape[0], picked, fallback)


@triton.jit
def _decide(st_ptr, sf_ptr, part_ptr, r, C, u, lo, hi, top_p, NT: tl.constexpr, CP2: tl.constexpr):
    """The row's last program: the chunks' sums in chunk order, then the narrowed interval (state: lo, hi; S(hi))."""
    cc = tl.arange(0, CP2)
    k = tl.arange(0, NT)
    at = (r * C + cc)[:, None] * NT + k[None, :]
    s = tl.sum(tl.load(part_ptr + at, mask=(cc < C)[:, None], other=0.0, cache_modifier=".cg"), 0)  # [NT]
    a = tl.sum((s >= top_p).to(tl.int32), 0) - 1  # the last threshold still at top_p (they come first)
    if a < 0:  # only in the first pass (S(lo) >= top_p after it): even S(0) < top_p, nothing is dropped
        tl.store(st_ptr + r * 2, _KEEP_ALL - 1)
        tl.store(st_ptr + r * 2 + 1, _KEEP_ALL)
    else:
        tl.store(st_ptr + r * 2, _pick(k, a, u, lo))
        tl.store(st_ptr + r * 2 + 1, _pick(k, a + 1, u, hi))
        tl.store(sf_ptr + r, _pick(k, a + 1, s, tl.load(sf_ptr + r)))


@triton.jit
def _arrive(ws_ptr, arrivals_ptr, st_ptr, sf_ptr, r, c, C, u, lo, hi, acc, top_p, NT: tl.constexpr,
            CP2: tl.constexpr):
    """Store this chunk's sums; the row's last program to arrive decides (and resets the counter)."""
    tl.store(ws_ptr + (r * C + c) * NT + tl.arange(0, NT), tl.sum(acc, 0))
    tl.debug_barrier()  # every thread's stores before the release
    if tl.atomic_add(arrivals_ptr + r, 1, sem="acq_rel") == C - 1:
        _decide(st_ptr, sf_ptr, ws_ptr, r, C, u, lo, hi, top_p, NT, CP2)
        tl.atomic_xchg(arrivals_ptr + r, 0)


@triton.jit
def _probs_kernel(x_ptr, stride_x, kth_ptr, ms_ptr, p_ptr, ws_ptr, arrivals_ptr, st_ptr, sf_ptr, V, C, temperature,
                  top_p, HAS_KTH: tl.constexpr, BLOCK: tl.constexpr, SUB: tl.constexpr, NT: tl.constexpr,
                  CP2: tl.constexpr):
    c = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    cc = tl.arange(0, CP2)
    m = tl.load(ms_ptr + (r * C + cc) * 2, mask=cc < C, other=float("-inf"))
    big = tl.max(m, 0)
    z = tl.sum(tl.load(ms_ptr + (r * C + cc) * 2 + 1, mask=cc < C, other=0.0) * tl.exp(m - big), 0)
    lo = tl.full([], 0, tl.int32)
    hi = tl.full([], _ONE_UP, tl.int32)
    u = _thresholds(lo, hi, NT)
    acc = tl.zeros([SUB, NT], tl.float32)
    for j in tl.static_range(BLOCK // SUB):
        cols = c * BLOCK + j * SUB + tl.arange(0, SUB)
        x = _scaled(x_ptr, stride_x, kth_ptr, r, cols, V, temperature, HAS_KTH)
        p = tl.math.div_rn(tl.exp(x - big), z)
        tl.store(p_ptr + r * V + cols, p, mask=cols < V)
        acc = _tile_masses(p, u, acc)
    if c == 0:  # the first pass's S(hi) before any program decides: nothing is above 1
        tl.store(sf_ptr + r, 0.0)
    _arrive(ws_ptr, arrivals_ptr, st_ptr, sf_ptr, r, c, C, u, lo, hi, acc, top_p, NT, CP2)


@triton.jit
def _pass_kernel(p_ptr, ws_ptr, arrivals_ptr, st_ptr, sf_ptr, V, C, top_p, BLOCK: tl.constexpr, SUB: tl.constexpr,
                 NT: tl.constexpr, CP2: tl.constexpr):
    c = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    lo = tl.load(st_ptr + r * 2)
    hi = tl.load(st_ptr + r * 2 + 1)
    if hi - lo > 1:
        u = _thresholds(lo, hi, NT)
        acc = tl.zeros([SUB, NT], tl.float32)
        for j in tl.static_range(BLOCK // SUB):
            cols = c * BLOCK + j * SUB + tl.arange(0, SUB)
            acc = _tile_masses(tl.load(p_ptr + r * V + cols, mask=cols < V, other=0.0), u, acc)
        _arrive(ws_ptr, arrivals_ptr, st_ptr, sf_ptr, r, c, C, u, lo, hi, acc, top_p, NT, CP2)


@triton.jit
def _cut_kernel(p_ptr, st_ptr, sf_ptr, cut_ptr, wn_ptr, arrivals_ptr, V, C, top_p, BLOCK: tl.constexpr,
                CP2: tl.constexpr):
    """After the search (hi = lo + 1): v = float(hi), and the id below which the entries equal to v are kept (V: all
    of them). Each program counts its chunk's entries equal to v; the row's last one adds them up and, if the cut
    falls inside that run, finds the chunk holding it and ranks that chunk's tied entries in id order."""
    c = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    hi = tl.load(st_ptr + r * 2 + 1)
    v = hi.to(tl.float32, bitcast=True)
    cols = c * BLOCK + tl.arange(0, BLOCK)
    eq = (tl.load(p_ptr + r * V + cols, mask=cols < V, other=-1.0) == v).to(tl.int32)
    tl.store(wn_ptr + r * C + c, tl.sum(eq, 0))
    tl.debug_barrier()
    if tl.atomic_add(arrivals_ptr + r, 1, sem="acq_rel") == C - 1:
        cc = tl.arange(0, CP2)
        counts = tl.load(wn_ptr + r * C + cc, mask=cc < C, other=0, cache_modifier=".cg")
        need = tl.maximum(tl.math.ceil(tl.math.div_rn(top_p - tl.load(sf_ptr + r), v)), 1.0)  # tied entries kept
        cut = V
        if (hi != _KEEP_ALL) & (need < tl.sum(counts, 0).to(tl.float32)):  # the cut is inside the run
            rank = need.to(tl.int32) + 1  # the first dropped tied entry, 1-based in id order
            upto = tl.cumsum(counts, 0)
            home = tl.sum((upto < rank).to(tl.int32), 0)  # the chunk holding it
            before = tl.sum(tl.where(cc < home, counts, 0), 0)
            hcols = home * BLOCK + tl.arange(0, BLOCK)
            heq = (tl.load(p_ptr + r * V + hcols, mask=hcols < V, other=-1.0) == v).to(tl.int32)
            at = (heq == 1) & (tl.cumsum(heq, 0) + before == rank)
            cut = tl.min(tl.where(at, hcols, V), 0)
        tl.store(cut_ptr + r * 2, hi)
        tl.store(cut_ptr + r * 2 + 1, cut)
        tl.atomic_xchg(arrivals_ptr + r, 0)


@triton.jit
def _race_kernel(x_ptr, stride_x, kth_ptr, p_ptr, cut_ptr, key_ptr, pmax_ptr, pidx_ptr, V, n_tiles, temperature,
                 golden, m1, m2, HAS_KTH: tl.constexpr, HAS_CUT: tl.constexpr, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    cols = t * BLOCK + tl.arange(0, BLOCK)
    x = _scaled(x_ptr, stride_x, kth_ptr, r, cols, V, temperature, HAS_KTH)
    keep = x > float("-inf")
    if HAS_CUT:
        v = tl.load(cut_ptr + r * 2).to(tl.float32, bitcast=True)
        p = tl.load(p_ptr + r * V + cols, mask=cols < V, other=0.0)
        keep = keep & ((p > v) | ((p == v) & (cols < tl.load(cut_ptr + r * 2 + 1))))
    score = tl.where(keep, x.to(tl.float64) + log_exp_of_key(tl.load(key_ptr + r), cols, golden, m1, m2),
                     float("-inf"))
    best, where = tl.max(score, 0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(pmax_ptr + r * n_tiles + t, best)
    tl.store(pidx_ptr + r * n_tiles + t, t * BLOCK + where)


_ARRIVALS: dict[torch.device, torch.Tensor] = {}


def arrivals_for(device: torch.device, rows: int) -> torch.Tensor:
    """Per-row arrival counters (each search pass leaves them at 0). A larger row count replaces the buffer: a CUDA
    graph captured over it must hold the one it was captured with (engine/sampler_graphs.py)."""
    if device not in _ARRIVALS or _ARRIVALS[device].numel() < rows:
        _ARRIVALS[device] = torch.zeros(max(rows, 64), dtype=torch.int32, device=device)
    return _ARRIVALS[device]


def nucleus(x: torch.Tensor, temperature: float, top_p: float, kth: torch.Tensor | None = None):
    """x [R, V] logits -> (p [R, V] float32, cut [R, 2] int32: the bits of v and the tie id; see the module
    docstring). kth [R] float32: keep x / T >= kth (top-k)."""
    r, v = x.shape
    c = triton.cdiv(v, BLOCK)
    cp2 = triton.next_power_of_2(c)
    dev = x.device
    ms = torch.empty(r, c, 2, dtype=torch.float32, device=dev)
    p = torch.empty(r, v, dtype=torch.float32, device=dev)
    ws = torch.empty(r, c, NT, dtype=torch.float32, device=dev)
    wn = torch.empty(r, c, dtype=torch.int32, device=dev)
    st = torch.empty(r, 2, dtype=torch.int32, device=dev)
    sf = torch.empty(r, dtype=torch.float32, device=dev)
    cut = torch.empty(r, 2, dtype=torch.int32, device=dev)
    arrivals = arrivals_for(dev, r)
    k = kth if kth is not None else ms
    t, tp = float(temperature), float(top_p)
    _stats_kernel[(c, r)](x, x.stride(0), k, ms, v, c, t, HAS_KTH=kth is not None, BLOCK=BLOCK,
                          num_warps=NUM_WARPS)
    _probs_kernel[(c, r)](x, x.stride(0), k, ms, p, ws, arrivals, st, sf, v, c, t, tp, HAS_KTH=kth is not None,
                          BLOCK=BLOCK, SUB=SUB, NT=NT, CP2=cp2, num_warps=NUM_WARPS)
    for _ in range(PASSES - 1):
        _pass_kernel[(c, r)](p, ws, arrivals, st, sf, v, c, tp, BLOCK=BLOCK, SUB=SUB, NT=NT, CP2=cp2,
                             num_warps=NUM_WARPS)
    _cut_kernel[(c, r)](p, st, sf, cut, wn, arrivals, v, c, tp, BLOCK=BLOCK, CP2=cp2, num_warps=NUM_WARPS)
    return p, cut


def race(x: torch.Tensor, temperature: float, keys: torch.Tensor, top_p: float = 1.0,
         kth: torch.Tensor | None = None) -> torch.Tensor:
    """x [R, V] logits, keys [R] int64 (each row's mixed key), top_p, kth [R] (top-k) -> tokens [R] int64."""
    r, v = x.shape
    p = cut = None
    if top_p < 1.0:
        p, cut = nucleus(x, temperature, top_p, kth)
    n_tiles = triton.cdiv(v, RACE_BLOCK)
    pmax = torch.empty(r, n_tiles, dtype=torch.float64, device=x.device)
    pidx = torch.empty(r, n_tiles, dtype=torch.int32, device=x.device)
    _race_kernel[(n_tiles, r)](x, x.stride(0), kth if kth is not None else x, p if p is not None else x,
                               cut if cut is not None else pidx, keys, pmax, pidx, v, n_tiles, float(temperature),
                               *noise_args(), HAS_KTH=kth is not None, HAS_CUT=p is not None, BLOCK=RACE_BLOCK)
    return tiles_argmax(pmax, pidx, PDL=0)
