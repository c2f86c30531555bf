"""Device: time ops/triton_gemm.py against cuBLAS on the Qwen3-4B/8B decode shapes and sweep its tile configs.

Each timing is a CUDA graph of L launches over L different weight copies (L2 defeated), at M = 16 rows (the
smallest verify tier), called as the engine calls it (SiLU or residual epilogue). Prints and
writes JSON: per shape cuBLAS µs (plain product), our µs per config (PDL on and off for the best), and under
"configs" the best per shape, in the format of sparkdec/ops/gemm_configs.json.
usage: python scripts/sweep_gemm.py OUT.json [--quick]
"""
from __future__ import annotations

import itertools
import json
import sys

import torch
import torch.nn.functional as F

from sparkdec.ops import triton_gemm as tg

SHAPES = {  # name: (weight rows, K, how the engine calls it)
    "4b.qkv": (6144, 2560, "plain"), "4b.o": (2560, 4096, "residual"), "4b.gate_up": (19456, 2560, "silu"),
    "4b.down": (2560, 9728, "residual"), "4b.lm_head": (151936, 2560, "plain"),
    "8b.qkv": (6144, 4096, "plain"), "8b.o": (4096, 4096, "residual"), "8b.gate_up": (24576, 4096, "silu"),
    "8b.down": (4096, 12288, "residual"), "8b.lm_head": (151936, 4096, "plain"),
}


def graph_time(fn, copies: int, reps: int = 20) -> float:
    """µs per call of fn(i) for i over the weight copies, captured in one graph."""
    for i in range(copies):
        fn(i)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(copies):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / reps / copies


def configs(n: int, k: int, quick: bool):
    if n > 100000:
        return [(bn, 128, 1, 4, st) for bn in (64, 128) for st in (3, 4)]
    out = []
    for bn, bk, split, st in itertools.product((32, 64), (128, 256), (1, 2, 4, 8), (4,)):
        if k % (split * bk) or (quick and st == 3):
            continue
        out.append((bn, bk, split, 4, st))
    return out


def main(out_path: str, quick: bool) -> None:
    res = {"device": torch.cuda.get_device_name(), "m": 16, "shapes": {}, "configs": {}}
    dev, dt = "cuda", torch.bfloat16
    for name, (n, k, mode) in SHAPES.items():
        silu = mode == "silu"
        nbytes = n * k * 2
        copies = max(2, min(24, (3 << 30) // nbytes))
        ws = [torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5 for _ in range(copies)]
        x = torch.randn(16, k, device=dev, dtype=dt)
        outs = [torch.empty(16, n // 2 if silu else n, device=dev, dtype=dt) for _ in range(copies)]
        resid = torch.randn(16, n, device=dev, dtype=dt) if mode == "residual" else None
        call = lambda i: tg.gemm(x, ws[i], silu=silu, residual=resid, out=outs[i])
        cublas = graph_time(lambda i: F.linear(x, ws[i]), copies)
        entry = {"N": n, "K": k, "mode": mode, "bytes": nbytes, "cublas_us": cublas,
                 "cublas_TBps": nbytes / cublas / 1e6, "configs": {}}
        best = None
        for cfg in configs(n, k, quick):
            tg.CONFIGS[(n, k)] = cfg
            try:
                us = graph_time(call, copies)
            except Exception as exc:  # a config that does not compile (shared memory) is skipped
                entry["configs"][str(cfg)] = repr(exc)[:200]
                continue
            entry["configs"][str(cfg)] = us
            if best is None or us < best[1]:
                best = (cfg, us)
        tg.CONFIGS[(n, k)] = best[0]
        tg.PDL_MODE = 0
        no_pdl = graph_time(call, copies)
        tg.PDL_MODE = 1
        entry.update(best=list(best[0]), best_us=best[1], best_TBps=nbytes / best[1] / 1e6, best_no_pdl_us=no_pdl)
        res["shapes"][name] = entry
        res["configs"][f"{n},{k}"] = list(best[0])
        print(f"{name}: cublas {cublas:.1f} us ({entry['cublas_TBps']:.2f} TB/s), ours {best[1]:.1f} us "
              f"({entry['best_TBps']:.2f} TB/s) {best[0]}, without PDL {no_pdl:.1f} us", flush=True)
        ws = outs = None
        torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], "--quick" in sys.argv)
