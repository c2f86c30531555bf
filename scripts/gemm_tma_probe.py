"""Device probe: a TMA-fed (tensor-descriptor, multi-stage pipelined) variant of ops/triton_gemm.py's product
against the shipped kernel and cuBLAS on the Qwen3-4B decode shapes, at M = 1 and 16 (graph-timed, L2
defeated as in scripts/sweep_gemm.py). Also checks that the variant's bits equal the shipped kernel's.
usage: python scripts/gemm_tma_probe.py OUT.json
"""
from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from scripts.sweep_gemm import graph_time
from sparkdec.ops import triton_gemm as tg
from sparkdec.ops.triton_gemm import finish_tile, pdl_release, pdl_wait

SHAPES = {"qkv": (6144, 2560, "plain", (1, 2)), "o": (2560, 4096, "residual", (2, 4, 8)),
          "gate_up": (19456, 2560, "silu", (1,)), "down": (2560, 9728, "residual", (2, 4))}
TILES = [(64, 128), (128, 64), (128, 128), (32, 256), (64, 256)]
STAGES = (4, 6)


@triton.jit
def _gemm_tma_kernel(x_desc, w_desc, out_ptr, res_ptr, ws_ptr, cnt_ptr, M, N, stride_om, stride_rm,
                     K: tl.constexpr, SILU: tl.constexpr, RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, STAGES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_s = tl.program_id(2)
    OUT_N: tl.constexpr = BLOCK_N // 2 if SILU else BLOCK_N
    K_SLICE: tl.constexpr = K // SPLIT_K
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    k_begin = pid_s * K_SLICE
    pdl_wait(1)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in tl.range(0, K_SLICE, BLOCK_K, num_stages=STAGES):
        x = x_desc.load([pid_m * BLOCK_M, k_begin + k0])
        w = w_desc.load([pid_n * BLOCK_N, k_begin + k0])
        acc = tl.dot(x, tl.trans(w), acc)
    pdl_release(1)
    finish_tile(acc, out_ptr, res_ptr, ws_ptr, cnt_ptr, rows, rmask, pid_m, pid_n, pid_s, N, stride_om, stride_rm,
                SILU, RESIDUAL, BLOCK_M, BLOCK_N, OUT_N, SPLIT_K, out_ptr.dtype.element_ty)


def gemm_tma(x, w, cfg, silu=False, residual=None, out=None):
    bn, bk, split, stages = cfg
    m, k = x.shape
    n = w.shape[0] // 2 if silu else w.shape[0]
    grid = (triton.cdiv(m, 16), triton.cdiv(w.shape[0], bn), split)
    ws, cnt = out, out
    if split > 1:
        ws = torch.empty(split * grid[0] * grid[1] * 16 * bn, dtype=torch.float32, device=x.device)
        cnt = tg._counters(x.device, grid[0] * grid[1])
    res = residual if residual is not None else out
    _gemm_tma_kernel[grid](TensorDescriptor.from_tensor(x, [16, bk]), TensorDescriptor.from_tensor(w, [bn, bk]), out,
                           res, ws, cnt, m, n, out.stride(0), res.stride(0), K=k, SILU=silu,
                           RESIDUAL=residual is not None, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split,
                           STAGES=stages, num_warps=4, launch_pdl=True)
    return out


def main(out_path: str) -> None:
    res = {"device": torch.cuda.get_device_name(), "shapes": {}}
    dev, dt = "cuda", torch.bfloat16
    for name, (n, k, mode, splits) in SHAPES.items():
        silu = mode == "silu"
        nbytes = n * k * 2
        copies = max(2, min(24, (3 << 30) // nbytes))
        ws = [torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5 for _ in range(copies)]
        entry = {"bytes": nbytes}
        for m in (1, 16):
            x = torch.randn(m, k, device=dev, dtype=dt)
            outs = [torch.empty(m, n // 2 if silu else n, device=dev, dtype=dt) for _ in range(copies)]
            resid = torch.randn(m, n, device=dev, dtype=dt) if mode == "residual" else None
            ours = graph_time(lambda i: tg.gemm(x, ws[i], silu=silu, residual=resid, out=outs[i]), copies)
            cublas = graph_time(lambda i: F.linear(x, ws[i]), copies)
            ref_cfg = tg.pick_config(n, k)
            row = {"shipped_us": ours, "shipped_cfg": list(ref_cfg), "cublas_us": cublas, "tma": {}}
            for bn, bk in TILES:
                for split in splits:
                    for st in STAGES:
                        cfg = (bn, bk, split, st)
                        if k % (split * bk):
                            continue
                        call = lambda i: gemm_tma(x, ws[i], cfg, silu=silu, residual=resid, out=outs[i])
                        try:
                            us = graph_time(call, copies)
                        except Exception as exc:  # shared memory etc.
                            row["tma"][str(cfg)] = repr(exc)[:120]
                            continue
                        same = None
                        if split == ref_cfg[2]:
                            a = tg.gemm(x, ws[0], silu=silu, residual=resid)
                            b = gemm_tma(x, ws[0], cfg, silu=silu, residual=resid, out=torch.empty_like(a))
                            same = bool(torch.equal(a, b))
                        row["tma"][str(cfg)] = [us, same]
            good = {c: v for c, v in row["tma"].items() if isinstance(v, list)}
            best = min(good, key=lambda c: good[c][0]) if good else None
            row["best_tma"] = [best, good[best][0]] if best else None
            entry[f"m{m}"] = row
            print(f"{name} M={m}: shipped {ours:.1f} us ({nbytes / ours / 1e6:.2f} TB/s), cublas {cublas:.1f}, "
                  f"best TMA {row['best_tma']} ({nbytes / good[best][0] / 1e6:.2f} TB/s)" if best else "no TMA",
                  flush=True)
        res["shapes"][name] = entry
        ws = None
        torch.cuda.empty_cache()
        with open(out_path, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
