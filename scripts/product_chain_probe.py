"""Device probe (run in session 12: product_chain_h200_2026-11-30.json): what the product boundaries of a decode layer cost. The same
weight bytes as 36 Qwen3-4B layers, streamed by CUDA-graph replays of chains of products (Gluon, PDL as shipped):
- chain4: the layer's four products (qkv, o + residual, gate_up + SiLU, down + residual): 144 products;
- chain4_norms: the same with the two RMSNorm kernels of the real layer;
- chain2: two products per layer, qkv + o's bytes and gate_up + down's bytes (72 products);
- chain1: one product per layer with all its bytes (36 products);
each row of the output feeding the next product (a true dependency chain). The spread between chain1 and chain4 is
what a schedule streaming across op boundaries could recover; chain1 against the floor is what one long product
reaches. usage: python scripts/product_chain_probe.py OUT.json [rows]
"""
from __future__ import annotations

import gc
import json
import sys

import torch

from gluon_gemv_probe import layer_products, run, timed
from sparkdec.bench.kernels import copy_bandwidth
from sparkdec.bench.shapes import SHAPES
from sparkdec.ops import gluon_gemv as gg
from sparkdec.ops import triton_gemm as tg
from sparkdec.ops.triton_fused import rms_norm

DEV, DT, LAYERS = "cuda", torch.bfloat16, 36


def chain4(rows: int, norms: bool) -> float:
    c = SHAPES["qwen3-4b"]
    prods = layer_products("qwen3-4b")
    weights = [{name: torch.randn(n, k, device=DEV, dtype=DT) * (0.1 / k ** 0.5) for name, (n, k, _) in prods.items()}
               for _ in range(LAYERS)]
    nw = torch.ones(c.hidden_size, device=DEV, dtype=DT)
    h = torch.randn(rows, c.hidden_size, device=DEV, dtype=DT)
    q = c.num_attention_heads * c.head_dim

    def forward():
        x = h
        for lw in weights:
            qkv = run(rms_norm(x, nw, 1e-6) if norms else x, lw["qkv"], {}, None, True)
            x = run(qkv[:, :q], lw["o"], {"residual": True}, x, True)
            a = run(rms_norm(x, nw, 1e-6) if norms else x, lw["gate_up"], {"silu": True}, None, True)
            x = run(a, lw["down"], {"residual": True}, x, True)
        return x

    ms = timed(forward)
    del weights
    return ms


def chain_equal_bytes(rows: int, parts: list[int]) -> float:
    """Products of K = hidden with the given row counts per layer, each fed by the previous one's first columns."""
    k = SHAPES["qwen3-4b"].hidden_size
    for n in parts:  # a Gluon product for these shapes (the shipped tile of the 4B gate_up)
        gg.CONFIGS[(n, k)] = (64, 128, 4, 1)
        tg.CONFIGS[(n, k)] = (32, 128, 1, 4, 4)
    weights = [[torch.randn(n, k, device=DEV, dtype=DT) * (0.1 / k ** 0.5) for n in parts] for _ in range(LAYERS)]
    h = torch.randn(rows, k, device=DEV, dtype=DT)

    def forward():
        x = h
        for lw in weights:
            for w in lw:
                x = run(x, w, {}, None, True)[:, :k]
        return x.contiguous()

    ms = timed(forward)
    del weights
    return ms


def main() -> None:
    out = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    torch.manual_seed(0)
    bw = copy_bandwidth()
    k = SHAPES["qwen3-4b"].hidden_size
    prods = layer_products("qwen3-4b")
    layer_bytes = sum(n * kk * 2 for n, kk, _ in prods.values())
    attn_bytes = sum(prods[p][0] * prods[p][1] * 2 for p in ("qkv", "o"))
    rows_of = lambda nbytes: -(-nbytes // (2 * k * 64)) * 64  # weight rows of K = hidden with these bytes (x64)
    res = {"device": torch.cuda.get_device_name(), "copy_bandwidth": bw, "rows": rows, "layers": LAYERS,
           "layer_bytes": layer_bytes, "floor_ms": LAYERS * layer_bytes / bw * 1e3, "runs": {}}
    plans = {"chain4": lambda: chain4(rows, False), "chain4_norms": lambda: chain4(rows, True),
             "chain2": lambda: chain_equal_bytes(rows, [rows_of(attn_bytes), rows_of(layer_bytes - attn_bytes)]),
             "chain1": lambda: chain_equal_bytes(rows, [rows_of(layer_bytes)])}
    for name, fn in plans.items():
        ms = fn()
        res["runs"][name] = {"ms": ms, "us_per_layer": ms * 1e3 / LAYERS, "fraction_of_floor": res["floor_ms"] / ms}
        print(name, {a: round(b, 3) for a, b in res["runs"][name].items()}, flush=True)
        gc.collect()
        torch.cuda.empty_cache()
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
