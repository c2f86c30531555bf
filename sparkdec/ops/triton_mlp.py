"""Persistent MLP (CUDA, up to 16 rows): gate_up+SiLU, a grid barrier, then down+residual, in one launch.

Decode and verify rows are latency-bound at every kernel boundary: the next product's programs start, wait for
the previous kernel, then ramp up their weight stream. Here the programs stay resident: after their gate_up
tiles they load the first down-weight tile, meet at a grid barrier (the down product needs every SiLU output),
and go on. Each tile is computed exactly as ops/triton_gemm.py computes it (same BLOCK_N, BLOCK_K, SPLIT_K and
warps, the same K-step and slice order), so a row's bits equal the two-launch path's: rows that go through the
ordinary kernels (long batches, prefill) and rows that go through this one agree (DESIGN §3.4).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.ops.triton_gemm import (BLOCK_M, _counters, _load_w, _load_x, _mma, finish_tile, pdl_args, pdl_release,
                                      pdl_wait, pick_config)

PERSISTENT = True  # False: two ordinary launches (the A/B baseline)
PROGRAMS_PER_SM = 4  # resident programs per SM (all must be resident at once: the barrier waits for every one)
STAGES = 4
# tile widths (None: the ordinary kernels' configs). A row's bits do not depend on BLOCK_N (only on the K order and
# SPLIT_K: scripts/probe_tile_bits.py); narrower tiles give more work items than resident programs
GATE_UP_BLOCK_N: int | None = None
DOWN_BLOCK_N: int | None = 16
_BARRIERS: dict[torch.device, torch.Tensor] = {}
_SMS: dict[torch.device, int] = {}
_RESIDENT: dict[tuple, bool] = {}  # compiled variant -> whether PROGRAMS_PER_SM of its programs fit on one SM
SM_REGISTERS, SM_SHARED_BYTES = 65536, 228 * 1024  # Hopper (sm_90)


@triton.jit
def _tile_acc(x_ptr, w_ptr, w_first, rows, rmask, wrows, wmask, k_begin, stride_xm, stride_wn, K: tl.constexpr,
              K_SLICE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              IEEE: tl.constexpr):
    """x[rows, k_begin : k_begin + K_SLICE] @ W[wrows, same]^T in BLOCK_K steps, as _gemm_kernel; w_first: the first
    step's weight tile, loaded by the caller."""
    ks = tl.arange(0, BLOCK_K)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + (k_begin + ks)[None, :],
                mask=rmask[:, None] & (k_begin + ks < K)[None, :], other=0.0, cache_modifier=".cg")
    acc = _mma(tl.zeros([BLOCK_M, BLOCK_N], tl.float32), x, w_first, IEEE)
    for k0 in range(BLOCK_K, K_SLICE, BLOCK_K):
        kk = k_begin + k0 + ks
        kmask = kk < K
        # NOTE: .cg: the rows were written by other programs of this launch (never cached in this SM's L1)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + kk[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0,
                    cache_modifier=".cg")
        acc = _mma(acc, x, _load_w(w_ptr, wrows, wmask, kk, kmask, stride_wn), IEEE)
    return acc


@triton.jit
def _grid_barrier(bar_ptr):
    """Every program of the launch arrives; none leaves before all have. bar_ptr[0]: arrivals (the last one resets
    it), bar_ptr[1]: generation (bumped by the last one; the others wait for it to change)."""
    tl.debug_barrier()  # this program's stores before its arrival
    gen = tl.atomic_add(bar_ptr + 1, 0, sem="acquire")
    arrived = tl.atomic_add(bar_ptr, 1, sem="acq_rel")
    if arrived == tl.num_programs(0) - 1:
        tl.atomic_xchg(bar_ptr, 0)
        tl.atomic_add(bar_ptr + 1, 1, sem="release")
    else:
        while tl.atomic_add(bar_ptr + 1, 0, sem="acquire") == gen:
            pass
    tl.debug_barrier()


@triton.jit
def _mlp_kernel(x_ptr, wgu_ptr, mid_ptr, wd_ptr, out_ptr, res_ptr, ws_ptr, cnt_ptr, bar_ptr, M, I,
                stride_xm, stride_gu, stride_mid, stride_wd, stride_om, stride_rm, HID: tl.constexpr,
                INTER: tl.constexpr, BN1: tl.constexpr, BK1: tl.constexpr, BN2: tl.constexpr, BK2: tl.constexpr,
                SPLIT2: tl.constexpr, BLOCK_M: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    rows = tl.arange(0, BLOCK_M)
    rmask = rows < M
    # phase 1: mid = silu(x @ gate^T) * (x @ up^T); tiles pid, pid + progs, ... (the launch has at most as many
    # programs as tiles). The first weight tile is read while the previous kernel drains.
    T1: tl.constexpr = (2 * INTER + BN1 - 1) // BN1
    ks1 = tl.arange(0, BK1)
    wrows = pid * BN1 + tl.arange(0, BN1)
    w = _load_w(wgu_ptr, wrows, wrows < 2 * INTER, ks1, ks1 < HID, stride_gu)
    pdl_wait(PDL)
    for n in range(pid, T1, progs):
        wrows = n * BN1 + tl.arange(0, BN1)
        wmask = wrows < 2 * INTER
        if n != pid:
            w = _load_w(wgu_ptr, wrows, wmask, ks1, ks1 < HID, stride_gu)
        acc = _tile_acc(x_ptr, wgu_ptr, w, rows, rmask, wrows, wmask, 0, stride_xm, stride_gu, HID, HID, BLOCK_M, BN1,
                        BK1, IEEE)
        finish_tile(acc, mid_ptr, mid_ptr, mid_ptr, cnt_ptr, rows, rmask, n, T1, n, 0, I, stride_mid, stride_mid, True,
                    False, BLOCK_M, BN1, BN1 // 2, 1)
    # phase 2: out = residual + mid @ down^T, work item j = (slice j // T2, tile j % T2); its first weight tile is
    # loaded before the barrier
    T2: tl.constexpr = (HID + BN2 - 1) // BN2
    K_SLICE: tl.constexpr = INTER // SPLIT2
    ks2 = tl.arange(0, BK2)
    n2 = pid % T2
    wrows2 = n2 * BN2 + tl.arange(0, BN2)
    kb = (pid // T2) * K_SLICE
    w2 = _load_w(wd_ptr, wrows2, wrows2 < HID, kb + ks2, kb + ks2 < INTER, stride_wd)
    _grid_barrier(bar_ptr)
    for j in range(pid, T2 * SPLIT2, progs):
        n2 = j % T2
        s = j // T2
        kb = s * K_SLICE
        wrows2 = n2 * BN2 + tl.arange(0, BN2)
        wmask2 = wrows2 < HID
        if j != pid:
            w2 = _load_w(wd_ptr, wrows2, wmask2, kb + ks2, kb + ks2 < INTER, stride_wd)
        acc = _tile_acc(mid_ptr, wd_ptr, w2, rows, rmask, wrows2, wmask2, kb, stride_mid, stride_wd, INTER, K_SLICE,
                        BLOCK_M, BN2, BK2, IEEE)
        finish_tile(acc, out_ptr, res_ptr, ws_ptr, cnt_ptr, rows, rmask, n2, T2, n2, s, HID, stride_om, stride_rm,
                    False, True, BLOCK_M, BN2, BN2, SPLIT2)
    pdl_release(PDL)


def _plan(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor):
    """(BN1, BK1, BN2, BK2, SPLIT2, warps) when the persistent kernel can reproduce the two launches' bits, else
    None: the same tile configs (ops/triton_gemm.py pick_config) with equal warps, one 16-row tile, no fp32."""
    if not (PERSISTENT and x.is_cuda and x.shape[0] <= BLOCK_M and x.dtype != torch.float32):
        return None
    hid, inter = down.shape[0], down.shape[1]
    bn1, bk1, split1, warps1, _ = pick_config(gate_up.shape[0], hid)
    bn2, bk2, split2, warps2, _ = pick_config(hid, inter)
    if inter % (split2 * bk2):
        split2 = 1  # as gemm() does
    bn1, bn2 = GATE_UP_BLOCK_N or bn1, DOWN_BLOCK_N or bn2
    if split1 != 1 or warps1 != warps2 or hid % bk1 or gate_up.shape[0] % bn1 or hid % bn2:
        return None
    return bn1, bk1, bn2, bk2, split2, warps1


def _sms(device: torch.device) -> int:
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device]


def _barrier(device: torch.device) -> torch.Tensor:
    if device not in _BARRIERS:
        _BARRIERS[device] = torch.zeros(2, dtype=torch.int32, device=device)
    return _BARRIERS[device]


def mlp(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """residual + down(silu(gate) * up) for x [M, H] (normed), gate_up [2I, H] (rows interleaved, see
    interleave_gate_up), down [H, I], residual [M, H]; one persistent launch when it can give the bits of the
    two-launch path, else those two launches."""
    from sparkdec.ops.triton_gemm import gemm

    plan = _plan(x, gate_up, down)
    if plan is None:
        return gemm(gemm(x, gate_up, silu=True), down, residual=residual)
    bn1, bk1, bn2, bk2, split2, warps = plan
    m, hid = x.shape
    inter = down.shape[1]
    mid = torch.empty(m, inter, dtype=x.dtype, device=x.device)
    out = torch.empty(m, hid, dtype=x.dtype, device=x.device)
    t1, t2 = gate_up.shape[0] // bn1, triton.cdiv(hid, bn2)
    progs = min(t1, t2 * split2, PROGRAMS_PER_SM * _sms(x.device))
    ws = torch.empty(split2 * t2 * BLOCK_M * bn2, dtype=torch.float32, device=x.device) if split2 > 1 else out
    cnt = _counters(x.device, t2)
    args = (x, gate_up, mid, down, out, residual, ws, cnt, _barrier(x.device), m, inter, x.stride(0),
            gate_up.stride(0), mid.stride(0), down.stride(0), out.stride(0), residual.stride(0))
    kw = dict(HID=hid, INTER=inter, BN1=bn1, BK1=bk1, BN2=bn2, BK2=bk2, SPLIT2=split2, BLOCK_M=BLOCK_M, IEEE=False,
              num_warps=warps, num_stages=STAGES, **pdl_args())
    if not _fits(args, kw, progs, warps):
        return gemm(gemm(x, gate_up, silu=True), down, residual=residual)
    _mlp_kernel[(progs,)](*args, **kw)
    return out


def _fits(args, kw, progs: int, warps: int) -> bool:
    """Whether every program of the launch can be resident at once (else the grid barrier would wait forever):
    the compiled kernel's registers and shared memory, PROGRAMS_PER_SM programs per SM."""
    key = tuple(sorted((k, v) for k, v in kw.items())) + (PROGRAMS_PER_SM,)
    if key not in _RESIDENT:
        ck = _mlp_kernel.warmup(*args, grid=(progs,), **kw)
        ck._init_handles()  # NOTE: loads the binary; n_regs is known only then
        regs = ck.n_regs * 32 * warps * PROGRAMS_PER_SM
        _RESIDENT[key] = regs <= SM_REGISTERS and ck.metadata.shared * PROGRAMS_PER_SM <= SM_SHARED_BYTES
    return _RESIDENT[key]
