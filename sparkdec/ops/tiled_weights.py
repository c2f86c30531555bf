"""Weights stored tile by tile in place: the same [N, K] tensor, its memory holding [K / bk, N / bn, bn, bk] tiles.

A row-major weight gives a [bn, bk] TMA tile as bn row segments of 2 * bk bytes, a row (2 * K bytes) apart; stored
tile by tile, K step by K step, the tile is one contiguous block of HBM and the tiles every program of a product
reads at one K step lie side by side. The products (ops/gluon_gemv.py, ops/triton_gemm.py) read such a weight with
tile addressing and the same operations, so their bits do not change. A tensor counts as tiled while the tensor that
was tiled (or a view of the same memory, shape and strides: its state_dict entry) is alive; anything that reads its
values as rows must go through row_major.
"""
from __future__ import annotations

import weakref

import torch

# data_ptr -> (the tiled tensor, weakly; its shape; (bn, bk))
_TILED: dict[int, tuple[weakref.ref, tuple[int, int], tuple[int, int]]] = {}


def tiles_of(w: torch.Tensor) -> tuple[int, int] | None:
    """(bn, bk) where w's memory holds its tiles (set_tiled_), else None."""
    entry = _TILED.get(w.data_ptr())
    if entry is None or entry[0]() is None or entry[1] != tuple(w.shape) or w.stride() != (w.shape[1], 1):
        return None
    return entry[2]


def _as_tiles(w: torch.Tensor, bn: int, bk: int) -> torch.Tensor:
    """Row-major w [N, K] -> [K / bk, N / bn, bn, bk] (a strided view: tile (i, j) at [j, i])."""
    n, k = w.shape
    return w.view(n // bn, bn, k // bk, bk).permute(2, 0, 1, 3)


def tiled_copy(w: torch.Tensor, bn: int, bk: int) -> torch.Tensor:
    """Row-major w [N, K] -> a new [N, K] tensor whose memory holds w's [bn, bk] tiles: tile (i, j) (rows
    i * bn.., columns j * bk..) at flat element (j * N / bn + i) * bn * bk onwards, each tile row-major."""
    n, k = w.shape
    assert n % bn == 0 and k % bk == 0, f"tiled_copy: {tuple(w.shape)} is not a whole number of [{bn}, {bk}] tiles"
    return _as_tiles(w, bn, bk).contiguous().view(n, k)


def row_major(w: torch.Tensor) -> torch.Tensor:
    """w's values as rows: w itself, or a row-major copy where w is stored tile by tile."""
    tiles = tiles_of(w)
    if tiles is None:
        return w
    bn, bk = tiles
    n, k = w.shape
    return w.view(k // bk, n // bn, bn, bk).permute(1, 2, 0, 3).reshape(n, k)


@torch.no_grad()  # (a model's parameters may require grad: the copies are not part of any graph)
def set_tiled_(w: torch.Tensor, tiles: tuple[int, int] | None) -> None:
    """Store w in place tile by tile in (bn, bk) tiles, or row-major (None); nothing to do where it already is."""
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
