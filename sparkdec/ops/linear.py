"""Batch-invariant matrix product: a row's result never depends on how many rows share the call."""
from __future__ import annotations

import torch
import torch.nn.functional as F

# NOTE: CPU GEMM kernels pick different reduction orders for the last M % 8 rows and for M < 4, so a
# token's logits would depend on the batch. Padding M to a multiple of ROW_TILE keeps every row in the
# same microkernel path (checked by tests/test_ops.py for every M up to 80). CUDA uses the Triton kernel of
# ops/triton_gemm.py, whose rows never depend on M.
ROW_TILE = 16


def linear(x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [M, K] @ weight[N, K]^T -> [M, N], with per-row results independent of M. out_dtype: the product in
    x's dtype, then converted (float32 logits; one launch on CUDA)."""
    if x.is_cuda:
        from sparkdec.ops.triton_gemm import gemm

        return gemm(x.contiguous(), weight, out_dtype=out_dtype)
    m = x.shape[0]
    padded = -(-m // ROW_TILE) * ROW_TILE
    if padded != m:
        x = torch.cat([x, x.new_zeros(padded - m, x.shape[1])])
    y = F.linear(x, weight)[:m]
    return y if out_dtype is None else y.to(out_dtype)
