"""Work one kernel leaves unfinished for the next: a split-K product's slices for the RMSNorm kernel after it
(ops/triton_fused.norm_of), and a decode row's attention splits for the o product (triton_attention.COMBINE_IN_O).

The decoder layer's o and down products add a residual, and each is followed by an RMSNorm over whole rows. With
`triton_gemm.SUM_IN_NORM`, their Gluon launches store each K slice's partial tile and stop: the norm kernel sums the
slices in slice order, rounds, adds the residual and writes the new residual stream `out` itself (the same
operations as the product's last program, so the same bits), instead of the product's atomic arrival counter and
the reload in its tail.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Partials:
    ws: torch.Tensor  # fp32 [SPLIT_K, tiles, MP, BN] flattened: slice s, tile t, token row m, weight row n
    residual: torch.Tensor  # [M, N]: added after the slices' sum is rounded to out's dtype
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


@dataclass
class AttentionSplits:
    """One decode row's attention left as its splits' partials (triton_attention.COMBINE_IN_O): the o product's
    programs reduce them (ops/gluon_combine.py), or `materialised_attention` runs the combine kernel."""
    acc: torch.Tensor  # fp32 [1, Hq, splits, D] flattened: each split's weighted values
    ml: torch.Tensor  # fp32 [1, Hq, splits, 2] flattened: each split's maximum and sum of weights
    row_kv_len: torch.Tensor  # int32 [1]: the row's keys (staged before the forward)
    out: torch.Tensor  # [1, Hq * D]: where the combine writes the row when it runs as a kernel
    splits: int  # splits per (row, head) in acc and ml
    fine: dict  # triton_attention.split_layout's split sizes (SPLIT_N, FINE_N, FINE_SPLITS)

    @property
    def shape(self) -> torch.Size:
        return self.out.shape


def materialised_attention(x) -> torch.Tensor:
    """The tensor of x: itself, or an AttentionSplits' row combined by the combine kernel into x.out."""
    if not isinstance(x, AttentionSplits):
        return x
    from sparkdec.ops.triton_attention import combine

    t, n = x.out.shape
    hq = x.ml.numel() // (2 * t * x.splits)
    combine(x.acc, x.ml, x.row_kv_len, x.out.view(t, hq, n // hq), x.splits, x.fine)
    return x.out
