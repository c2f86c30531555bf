"""A split-K product's slices left unsummed for the RMSNorm kernel after it (ops/triton_fused.norm_of).

The decoder layer's o and down products add a residual, and each is followed by an RMSNorm over whole rows. With
`triton_gemm.SUM_IN_NORM`, their Gluon launches store each K slice's partial tile and stop: the norm kernel sums the
slices in slice order, rounds, adds the residual and writes the new residual stream `out` itself (the same
operations as the product's last program, so the same bits), instead of the product's atomic arrival counter and
the reload in its tail. (Staged: the qkv product's slices, with no residual, for the q/k norm + RoPE kernel,
`triton_gemm.QKV_SLICES_TO_ROPE`.)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Partials:
    ws: torch.Tensor  # fp32 [SPLIT_K, tiles, MP, BN] flattened: slice s, tile t, token row m, weight row n
    residual: torch.Tensor | None  # [M, N]: added after the slices' sum is rounded to out's dtype (None: nothing)
    out: torch.Tensor  # [M, N]: residual + product, written by the norm kernel that reads these slices
    split_k: int
    tiles: int
    bn: int
    mp: int

    @property
    def shape(self) -> torch.Size:
        return self.out.shape

    @property
    def is_cuda(self) -> bool:
        return self.out.is_cuda


def materialised(h) -> torch.Tensor:
    """The tensor of h: itself, or the buffer the norm kernel reading h's slices writes (in stream order)."""
    return h.out if isinstance(h, Partials) else h
