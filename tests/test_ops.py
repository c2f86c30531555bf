"""Ops: every fast or padded path equals its reference row by row."""
from __future__ import annotations

import torch

from sparkdec.ops.linear import linear


def test_linear_rows_do_not_depend_on_batch_size():
    torch.manual_seed(0)
    for k, n in [(64, 509), (96, 160), (384, 1024), (1024, 384)]:
        w, x = torch.randn(n, k), torch.randn(130, k)
        ref = torch.stack([linear(x[i:i + 1], w)[0] for i in range(130)])
        for m in list(range(1, 40)) + [63, 64, 65, 127, 130]:
            assert torch.equal(linear(x[:m], w), ref[:m]), (k, n, m)
        assert torch.allclose(ref, x @ w.T, rtol=1e-5, atol=1e-5)
