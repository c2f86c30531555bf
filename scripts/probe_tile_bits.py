"""Device probe: do 64- and 128-row tiles (Hopper wgmma) give the same bits per row as the shipped 16-row tiles
(mma.sync)? Times each at M = 1024 (a prefill chunk). usage: python scripts/probe_tile_bits.py OUT.json"""
from __future__ import annotations

import json
import sys

import torch

from scripts.sweep_gemm import graph_time
from sparkdec.ops import triton_gemm as tg

res = {}
for n, k, mode in [(6144, 2560, "plain"), (19456, 2560, "silu"), (2560, 9728, "residual")]:
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    x = torch.randn(1024, k, device="cuda", dtype=torch.bfloat16)
    resid = torch.randn(1024, n, device="cuda", dtype=torch.bfloat16) if mode == "residual" else None
    entry = {}
    ref = None
    for bm, warps, bn in [(16, 4, None), (64, 4, 128), (128, 8, 128), (128, 8, 256)]:
        tg.BLOCK_M = bm
        cfg = tg.pick_config(n, k)
        tg.CONFIGS[(n, k)] = (bn or cfg[0], 64 if bn else cfg[1], cfg[2], warps, 3 if bn else cfg[4])
        try:
            y = tg.gemm(x, w, silu=mode == "silu", residual=resid)
            us = graph_time(lambda i: tg.gemm(x, w, silu=mode == "silu", residual=resid), 2)
        except Exception as exc:
            entry[f"bm{bm}_bn{bn}"] = repr(exc)[:200]
            continue
        finally:
            tg.CONFIGS[(n, k)] = cfg
        if ref is None:
            ref = y
        same = bool(torch.equal(y, ref))
        rows_same = int((y == ref).all(1).sum())
        entry[f"bm{bm}_bn{bn}"] = {"us": us, "tflops": 2 * 1024 * n * k / us / 1e6, "bits_equal": same, "rows_equal": rows_same}
        print(n, k, bm, bn, f"{us:.0f} us", f"{2 * 1024 * n * k / us / 1e6:.0f} TFLOPS", "equal" if same else f"DIFFER ({rows_same}/1024 rows equal)", flush=True)
    tg.BLOCK_M = 16
    res[f"{n},{k}"] = entry
with open(sys.argv[1], "w") as f:
    json.dump(res, f, indent=1)
