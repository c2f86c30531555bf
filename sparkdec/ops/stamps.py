"""Device timestamps (%globaltimer, ns) that the attention chain's kernels write when a probe turns them on.

Off (the default), a kernel gets STAMPS=0 and a dummy pointer, and compiles exactly as without them. On, each launch
of a kind writes its own rows of BUFFERS[kind] ([launches, programs, COLS] int64: start, after the PDL wait, end, a
value the kernel chooses, then points of its own: the split kernel's are after its query tile and lengths arrived, its
first step's page ids, its keys and values, its products), launch i of the kind in row i % launches
(scripts/split_stamps_probe.py, scripts/attention_alone_probe.py).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BUFFERS: dict[str, torch.Tensor] = {}
COLS = 8  # columns per program
_COLS = tl.constexpr(COLS)
_NEXT: dict[str, int] = {}


def reset() -> None:
    _NEXT.clear()


def args(kind: str, like: torch.Tensor) -> dict:
    """The stamp arguments of one launch of this kind (like: any tensor on the launch's device)."""
    buf = BUFFERS.get(kind)
    if buf is None:
        return {"stamp_ptr": like, "STAMPS": 0}
    i = _NEXT.get(kind, 0)
    _NEXT[kind] = i + 1
    return {"stamp_ptr": buf[i % buf.shape[0]], "STAMPS": 1}


_NOW = tl.constexpr("mov.u64 $0, %globaltimer;")


@triton.jit
def stamp(ptr, slot: tl.constexpr, ON: tl.constexpr):
    """This program's time into row (program) column slot of its launch's stamps."""
    if ON:
        t = tl.inline_asm_elementwise(_NOW, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        _put(ptr, slot, t)


@triton.jit
def stamp_after(ptr, slot: tl.constexpr, dep, when, ON: tl.constexpr):
    """Where `when` holds, this program's time into column slot once the scalar dep has arrived: a branch on dep
    holds the clock read until then (dep: a reduction of what the kernel waits for)."""
    if ON:
        x = dep.to(tl.float32)
        if when & (x == x):
            t = tl.inline_asm_elementwise(_NOW, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
            _put(ptr, slot, t)


@triton.jit
def stamp_value(ptr, value, ON: tl.constexpr):
    """A value of the program's choosing into column 3."""
    if ON:
        _put(ptr, 3, value.to(tl.int64))


@triton.jit
def _put(ptr, slot: tl.constexpr, v):
    n0 = tl.num_programs(0)
    n1 = tl.num_programs(1)
    cta = tl.program_id(0) + tl.program_id(1) * n0 + tl.program_id(2) * n0 * n1
    tl.store(ptr + cta.to(tl.int64) * _COLS + slot, v)


def alloc(kinds: dict[str, int], launches: int, device) -> None:
    """Turn stamps on: kinds {kind: programs per launch}."""
    BUFFERS.clear()
    for kind, programs in kinds.items():
        BUFFERS[kind] = torch.zeros(launches, programs, COLS, dtype=torch.int64, device=device)
    reset()


def off() -> None:
    BUFFERS.clear()
    reset()


__all__ = ["alloc", "args", "off", "reset", "stamp", "stamp_after", "stamp_value"]
