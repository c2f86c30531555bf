"""Device: time ops/triton_gemm.py against cuBLAS on the Qwen3-4B/8B decode shapes and sweep its tile configs.

Each timing is a CUDA graph of L launches over L different weight copies (L2 defeated), at M rows (16 by
default; decode and verify up to 64 rows share the 16-row tile), called as the engine calls it (SiLU or
residual epilogue). Prints and writes JSON: per shape cuBLAS µs (plain product), our µs per config (PDL on and
off for the best), and under "configs" the best per shape, in the format of sparkdec/ops/gemm_configs.json.
--wide: a larger candidate set (BLOCK_N 16..128, BLOCK_K 64..512, stages 3..5), compiled first in parallel
worker processes (Triton's on-disk cache), then timed here. --only PREFIX: shapes whose name starts with it.
usage: python scripts/sweep_gemm.py OUT.json [--quick] [--wide] [--m M] [--only 4b]
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


def configs(n: int, k: int, quick: bool, wide: bool = False):
    if n > 100000:
        return [(bn, 128, 1, 4, st) for bn in (64, 128) for st in (3, 4)]
    if wide:
        return wide_configs(n, k)
    out = []
    for bn, bk, split, st in itertools.product((32, 64), (128, 256), (1, 2, 4, 8), (4,)):
        if k % (split * bk) or (quick and st == 3):
            continue
        out.append((bn, bk, split, 4, st))
    return out


def wide_configs(n: int, k: int) -> list[tuple[int, int, int, int, int]]:
    """Tiles of at most 32 KB per stage, at least 64 programs, the K slice a multiple of BLOCK_K."""
    out = []
    for bn, bk, split, st in itertools.product((16, 32, 64, 128), (64, 128, 256, 512), (1, 2, 4, 8), (3, 4, 5)):
        if k % (split * bk) or bn * bk * 2 > 32768 or (n // bn) * split < 64 or (bn * bk * 2 * st > 160000):
            continue
        out.append((bn, bk, split, 4, st))
    return out


def _compile_worker(jobs: list[tuple[int, int, str, int, tuple]]) -> int:
    """Compile each (n, k, mode, m, config) by a warmup launch (fills Triton's on-disk cache)."""
    import triton

    kernel = tg._gemm_kernel

    class _Warm:  # kernel[grid](...) -> kernel.warmup(..., grid=grid): compiles, launches nothing
        def __getitem__(self, grid):
            return lambda *a, **kw: kernel.warmup(*a, grid=grid, **kw)

    tg._gemm_kernel = _Warm()
    done = 0
    for n, k, mode, m, cfg in jobs:
        tg.CONFIGS[(n, k)] = cfg
        x = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(n, k, device="cuda", dtype=torch.bfloat16)
        resid = torch.empty(m, n, device="cuda", dtype=torch.bfloat16) if mode == "residual" else None
        try:
            tg.gemm(x, w, silu=mode == "silu", residual=resid)
            done += 1
        except Exception:  # out of resources: the timing loop records it
            pass
    del triton
    return done


def precompile(shapes: dict, m: int, wide: bool, quick: bool, workers: int = 12) -> None:
    import multiprocessing as mp

    jobs = [(n, k, mode, m, cfg) for n, k, mode in shapes.values() for cfg in configs(n, k, quick, wide)]
    parts = [jobs[i::workers] for i in range(workers)]
    with mp.get_context("spawn").Pool(workers) as pool:
        print(f"compiled {sum(pool.map(_compile_worker, parts))} of {len(jobs)} configs", flush=True)


def main(out_path: str, quick: bool, wide: bool = False, m: int = 16, only: str = "") -> None:
    res = {"device": torch.cuda.get_device_name(), "m": m, "shapes": {}, "configs": {}}
    dev, dt = "cuda", torch.bfloat16
    shapes = {name: v for name, v in SHAPES.items() if name.startswith(only)}
    if wide:
        precompile(shapes, m, wide, quick)
    for name, (n, k, mode) in shapes.items():
        silu = mode == "silu"
        nbytes = n * k * 2
        copies = max(2, min(24, (3 << 30) // nbytes))
        ws = [torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5 for _ in range(copies)]
        x = torch.randn(m, k, device=dev, dtype=dt)
        outs = [torch.empty(m, n // 2 if silu else n, device=dev, dtype=dt) for _ in range(copies)]
        resid = torch.randn(m, n, device=dev, dtype=dt) if mode == "residual" else None
        call = lambda i: tg.gemm(x, ws[i], silu=silu, residual=resid, out=outs[i])
        cublas = graph_time(lambda i: F.linear(x, ws[i]), copies)
        entry = {"N": n, "K": k, "mode": mode, "bytes": nbytes, "cublas_us": cublas,
                 "cublas_TBps": nbytes / cublas / 1e6, "configs": {}}
        best = None
        for cfg in configs(n, k, quick, wide):
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


def _opt(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


if __name__ == "__main__":
    main(sys.argv[1], "--quick" in sys.argv, "--wide" in sys.argv, int(_opt("--m", "16")), _opt("--only", ""))
