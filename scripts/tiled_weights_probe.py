"""Device probe (session 33): does HBM stream the Gluon products' weights faster stored tile by tile?

A row-major [N, K] weight gives each [64, 128] TMA tile as 64 row segments of 256 bytes, 5-20 KB apart; stored tile
by tile (ops/tiled_weights.py) the same tile is one contiguous 16 KB block and the tiles of one K step lie side by
side. (Session 33 ran it on copies, with a second order, a row of tiles after another: code in b259369.) Same values, same products: the probe
checks the bits. It times, in one run, against the copy bandwidth measured first:
- each Qwen3-4B layer product at 1 row, alone (CUDA-graph replays over distinct weight copies, PDL as shipped);
- the 36-layer chain of the four products with the real layer's two RMSNorm kernels (chain4_norms of
  scripts/product_chain_probe.py), row-major and tiled in place, alternated twice.
usage: python scripts/tiled_weights_probe.py OUT.json
"""
from __future__ import annotations

import json
import sys

import torch

from gluon_gemv_probe import graph_us, layer_products, run, timed
from sparkdec.bench.kernels import copy_bandwidth
from sparkdec.bench.shapes import SHAPES
from sparkdec.ops import gluon_gemv as gg
from sparkdec.ops.tiled_weights import set_tiled_
from sparkdec.ops.triton_fused import rms_norm

DEV, DT, LAYERS = "cuda", torch.bfloat16, 36
TAGS = ["rows", "tiled"]
ORDERS = [0, 1, 0, 1]  # TAGS' indices, in the order run


def register(weights: list[torch.Tensor], tiled: int) -> None:
    """Store each weight tile by tile in the Gluon table's tiles (tiled) or row-major, in place."""
    for w in weights:
        set_tiled_(w, tuple(gg.CONFIGS[tuple(w.shape)][:2]) if tiled else None)


def product_alone(n: int, k: int, kw: dict, order: int, copies: int) -> tuple[float, int]:
    """(us per launch over `copies` distinct weights in one graph, elements differing from the row-major product)."""
    ws = [torch.randn(n, k, device=DEV, dtype=DT) / k ** 0.5 for _ in range(copies)]
    x = torch.randn(8, k, device=DEV, dtype=DT)
    r = torch.randn(8, n // 2 if kw.get("silu") else n, device=DEV, dtype=DT)
    ref = [run(x[:m], ws[0], kw, r, True).clone() for m in (1, 8)]
    register(ws, order)
    diffs = sum(int((run(x[:m], ws[0], kw, r, True) != want).sum()) for m, want in zip((1, 8), ref))
    return graph_us(x[:1], ws, kw, r, True), diffs


def layer_chain(weights: list[dict]):
    """forward() of the 36-layer product chain with the real layer's norms, one row (fixed input)."""
    c = SHAPES["qwen3-4b"]
    nw = torch.ones(c.hidden_size, device=DEV, dtype=DT)
    h = torch.randn(1, c.hidden_size, device=DEV, dtype=DT, generator=torch.Generator(DEV).manual_seed(1))
    q = c.num_attention_heads * c.head_dim

    def forward():
        x = h
        for lw in weights:
            qkv = run(rms_norm(x, nw, 1e-6), lw["qkv"], {}, None, True)
            x = run(qkv[:, :q], lw["o"], {"residual": True}, x, True)
            a = run(rms_norm(x, nw, 1e-6), lw["gate_up"], {"silu": True}, None, True)
            x = run(a, lw["down"], {"residual": True}, x, True)
        return x

    return forward


def main() -> None:
    out = sys.argv[1]
    torch.manual_seed(0)
    bw = copy_bandwidth()
    prods = layer_products("qwen3-4b")
    res = {"device": torch.cuda.get_device_name(), "copy_bandwidth": bw, "products": {}, "chain": {}}
    for name, (n, k, kw) in prods.items():
        copies = max(4, int(400e6 // (n * k * 2)))
        row = {"floor_us": n * k * 2 / bw * 1e6}
        for order in ORDERS:
            us, diffs = product_alone(n, k, kw, order, copies)
            tag = TAGS[order]
            row.setdefault(f"{tag}_us", []).append(us)
            row[f"{tag}_differing"] = row.get(f"{tag}_differing", 0) + diffs
        for tag in TAGS:
            row[f"{tag}_TBps"] = n * k * 2 / min(row[f"{tag}_us"]) / 1e6
        res["products"][name] = row
        print(name, {a: (round(b, 3) if isinstance(b, float) else b) for a, b in row.items()}, flush=True)
        torch.cuda.empty_cache()
    weights = [{name: torch.randn(n, k, device=DEV, dtype=DT) * (0.1 / k ** 0.5) for name, (n, k, _) in prods.items()}
               for _ in range(LAYERS)]
    flat = [w for lw in weights for w in lw.values()]
    layer_bytes = sum(n * k * 2 for n, k, _ in prods.values())
    res["chain"]["floor_ms"] = LAYERS * layer_bytes / bw * 1e3
    outs = {}
    for order in ORDERS:
        register(flat, order)
        forward = layer_chain(weights)
        ms = timed(forward)
        tag = TAGS[order]
        res["chain"].setdefault(f"{tag}_ms", []).append(ms)
        outs.setdefault(tag, forward().clone())
        print("chain4_norms", tag, round(ms, 4), "ms", round(res["chain"]["floor_ms"] / ms, 4), "of floor", flush=True)
    register(flat, 0)
    res["chain"]["outputs_equal"] = all(torch.equal(outs["rows"], o) for o in outs.values())
    print("chain outputs equal:", res["chain"]["outputs_equal"])
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
