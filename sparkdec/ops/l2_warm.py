"""L2 warming on a side stream (staged, off): while a layer's attention chain runs, a parallel kernel reads gate_up's
first weight columns so that gate_up's first ring fill finds them in L2.

Why: from the qkv product's end to the o product's end (about 14 us per layer, Qwen3-4B at ctx 1k) HBM carries only
o's 21 MB and the keys; gate_up's programs fill their rings (about 20 MB) only once o's programs leave the shared
memory, under the norm after o, which that fill slows. Every earlier L2 request of those bytes came from a kernel on
the PDL chain and was issued all at once (docs/research/megakernel-gluon.md, sessions 19-21). Here the reads come
from a kernel on a parallel graph branch (forked after qkv, joined at the forward's end), each program with one
[64, 128] tile in flight, so the chain neither waits for them nor queues behind a flood. The loads are real loads,
not prefetch hints: in scripts/l2_hit_probe.py a product after ".cg loads" ran as fast as after itself.

Nothing here changes a bit: the kernel only reads the weights. COLS = 0 (the default) launches nothing.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

COLS = 0  # the weight columns from 0 read in every row (a multiple of 128); 0: off
PROGRAMS = 132
DELAY_NS = 0  # the kernel's programs wait this long before their first load (while o's ring fill lands)
EVICT_LAST = False  # the loads' L2 eviction priority: evict_last keeps them over o's streaming tiles
TILE_ROWS = 64
TILE_COLS = 128
PROGRAMS_MAX = 1024
_SIDE: dict[torch.device, torch.cuda.Stream] = {}
_SINKS: dict[torch.device, torch.Tensor] = {}
_FORKED: list[torch.cuda.Stream] = []


@triton.jit
def _touch_kernel(w_ptr, sink_ptr, rows, stride, COL_TILES: tl.constexpr, TILE_R: tl.constexpr,
                  TILE_C: tl.constexpr, EVICT: tl.constexpr, DELAY: tl.constexpr = 0):
    """Read w[:, :COL_TILES * TILE_C] in [TILE_R, TILE_C] tiles, column tile by column tile (the order a product's
    programs stream them in), the program's tiles strided by the grid; DELAY ns after the program starts."""
    if DELAY:
        t0 = _now()
        while _now() - t0 < DELAY:
            pass
    pid = tl.program_id(0)
    row_tiles = tl.cdiv(rows, TILE_R)
    r = tl.arange(0, TILE_R)
    c = tl.arange(0, TILE_C)
    acc = tl.zeros([TILE_R, TILE_C], tl.float32)
    for t in range(pid, row_tiles * COL_TILES, tl.num_programs(0)):
        row = (t % row_tiles) * TILE_R + r  # [TILE_R]
        col = (t // row_tiles) * TILE_C + c  # [TILE_C]
        ptrs = w_ptr + row[:, None].to(tl.int64) * stride + col[None, :]
        if EVICT:
            v = tl.load(ptrs, mask=row[:, None] < rows, other=0.0, eviction_policy="evict_last")  # (not with .cg)
        else:
            v = tl.load(ptrs, mask=row[:, None] < rows, other=0.0, cache_modifier=".cg")
        acc += v.to(tl.float32)
    total = tl.sum(tl.sum(acc, axis=1), axis=0)
    tl.store(sink_ptr + pid, total, mask=total != total)  # stored only for a NaN: the loads must stay, the store not


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    if device not in _SIDE:
        _SIDE[device] = torch.cuda.Stream(device)
    return _SIDE[device]


def _sink(device: torch.device) -> torch.Tensor:
    """A float per program, written only if its loads summed to NaN."""
    if device not in _SINKS:
        _SINKS[device] = torch.zeros(PROGRAMS_MAX, dtype=torch.float32, device=device)
    return _SINKS[device]


def fork(weight: torch.Tensor) -> None:
    """Read weight[:, :COLS] on the side stream, after what the current stream has queued so far (COLS 0: nothing)."""
    if not COLS or not weight.is_cuda:
        return
    cols = min(COLS, weight.shape[1])
    assert cols % TILE_COLS == 0 and weight.stride(1) == 1, "l2_warm.COLS: a multiple of 128 of a row-major weight"
    main = torch.cuda.current_stream(weight.device)
    side = _side_stream(weight.device)
    side.wait_stream(main)
    programs = min(PROGRAMS, PROGRAMS_MAX)
    with torch.cuda.stream(side):
        _touch_kernel[(programs,)](weight, _sink(weight.device), weight.shape[0], weight.stride(0),
                                   COL_TILES=cols // TILE_COLS, TILE_R=TILE_ROWS, TILE_C=TILE_COLS,
                                   EVICT=EVICT_LAST, DELAY=DELAY_NS, num_warps=4)
    if side not in _FORKED:
        _FORKED.append(side)


def join() -> None:
    """The current stream waits for every side stream fork() used since the last join (a graph capture must end
    joined)."""
    main = torch.cuda.current_stream()
    while _FORKED:
        main.wait_stream(_FORKED.pop())
