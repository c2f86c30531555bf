"""Weights stored tile by tile in place: the same [N, K] tensor, its memory holding [K / bk, N / bn, bn, bk] tiles.

A row-major weight gives a [bn, bk] TMA tile as bn row segments of 2 * bk bytes, a row (2 * K bytes) apart; stored
tile by tile, K step by K step, the tile is one contiguous block of HBM and the tiles every program of a product
reads at one K step lie side by side. The products (ops/gluon_gemv.py, ops/triton_gemm.py) read such a weight with
tile addressing and the same operations, so their bits do not change. A tensor counts as tiled while the tensor that
was tiled (or a view of the same memory, shape and strides: its state_dict entry) is alive; anything that reads its
values as rows must go through row_major.

A layout is (bn, bk), or (64, 128, FRAGMENT): the same tiles, each tile's 8192 elements in the order of wgmma's
A-fragment registers (ops/gluon_regfed.py reads them 16 bytes a thread; the Triton kernel reads any element).
"""
from __future__ import annotations

import weakref

import torch

FRAGMENT = "fragment"
# a [64, 128] tile's 13 index bits (r5 .. r0, k6 .. k0) in stored order, most significant first: the stored
# position (c * 128 + t) * 8 + e is register 8c + e of thread t of the tile's A fragment (wgmma m64nMPk16, bf16,
# k_width 2; Gluon 3.6's linear layout of that operand), so bits c2 c1 c0 = k6 k5 k4, t6 t5 = r5 r4, t4 t3 t2 = r2 r1
# r0, t1 t0 = k2 k1, e2 e1 e0 = k3 r3 k0
_FRAGMENT_BITS = (6, 7, 8, 0, 1, 3, 4, 5, 10, 11, 9, 2, 12)
# data_ptr -> (the tiled tensor, weakly; its shape; its layout)
_TILED: dict[int, tuple[weakref.ref, tuple[int, int], tuple]] = {}


def tiles_of(w: torch.Tensor) -> tuple | None:
    """w's layout, (bn, bk) or (bn, bk, FRAGMENT), where its memory holds its tiles (set_tiled_), else None."""
    entry = _TILED.get(w.data_ptr())
    if entry is None or entry[0]() is None or entry[1] != tuple(w.shape) or w.stride() != (w.shape[1], 1):
        return None
    return entry[2]


def _as_tiles(w: torch.Tensor, bn: int, bk: int) -> torch.Tensor:
    """Row-major w [N, K] -> [K / bk, N / bn, bn, bk] (a strided view: tile (i, j) at [j, i])."""
    n, k = w.shape
    return w.view(n // bn, bn, k // bk, bk).permute(2, 0, 1, 3)


def _fragment(tiles: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """[..., 64, 128] tiles -> the same shape with each tile's elements in fragment order (inverse: back)."""
    lead = len(tiles.shape) - 2
    bits = sorted(range(13), key=_FRAGMENT_BITS.__getitem__) if inverse else _FRAGMENT_BITS
    view = tiles.reshape(*tiles.shape[:-2], *[2] * 13)  # [..., r5 .. r0, k6 .. k0] (or stored order)
    return view.permute(*range(lead), *(lead + b for b in bits)).reshape(tiles.shape)


def tiled_copy(w: torch.Tensor, bn: int, bk: int, order: str | None = None) -> torch.Tensor:
    """Row-major w [N, K] -> a new [N, K] tensor whose memory holds w's [bn, bk] tiles: tile (i, j) (rows
    i * bn.., columns j * bk..) at flat element (j * N / bn + i) * bn * bk onwards, each tile row-major (order
    FRAGMENT: in fragment order)."""
    n, k = w.shape
    assert n % bn == 0 and k % bk == 0, f"tiled_copy: {tuple(w.shape)} is not a whole number of [{bn}, {bk}] tiles"
    tiles = _as_tiles(w, bn, bk)
    if order == FRAGMENT:
        assert (bn, bk) == (64, 128), f"tiled_copy: fragment order is for [64, 128] tiles, not [{bn}, {bk}]"
        tiles = _fragment(tiles)
    return tiles.contiguous().view(n, k)


def row_major(w: torch.Tensor) -> torch.Tensor:
    """w's values as rows: w itself, or a row-major copy where w is stored tile by tile."""
    tiles = tiles_of(w)
    if tiles is None:
        return w
    bn, bk = tiles[:2]
    n, k = w.shape
    t = w.view(k // bk, n // bn, bn, bk)
    if tiles[2:] == (FRAGMENT,):
        t = _fragment(t, inverse=True)
    return t.permute(1, 2, 0, 3).reshape(n, k)


@torch.no_grad()  # (a model's parameters may require grad: the copies are not part of any graph)
def set_tiled_(w: torch.Tensor, tiles: tuple | None) -> None:
    """Store w in place tile by tile in layout `tiles` ((bn, bk) or (64, 128, FRAGMENT)), or row-major (None);
    nothing to do where it already is."""
    have = tiles_of(w)
    if have == tiles:
        return
    assert w.is_contiguous(), "set_tiled_: the weight must be contiguous"
    if have is not None:
        w.copy_(row_major(w))
        del _TILED[w.data_ptr()]
    if tiles is not None:
        w.copy_(tiled_copy(w, *tiles))
        _TILED[w.data_ptr()] = (weakref.ref(w), tuple(w.shape), tuple(tiles))
