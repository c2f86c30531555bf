"""Device probe of the Gluon product (ops/gluon_gemv.py) against the Triton kernel: bits, time per product, a
36-layer product chain, and the tile table it would ship.

usage: python scripts/gluon_gemv_probe.py OUT_DIR [shape ...]   (shapes: qwen3-4b qwen3-8b; default qwen3-4b)
writes OUT_DIR/gluon_gemv_probe.json and OUT_DIR/gluon_configs.json (the fastest Gluon tile per product at 1 row).
Times are CUDA-graph replays of back-to-back launches over distinct weight copies (L2 defeated), PDL as shipped.
"""
from __future__ import annotations

import json
import os
import sys

import torch

from sparkdec.bench.kernels import copy_bandwidth, replay_ms
from sparkdec.bench.shapes import SHAPES
from sparkdec.ops import gluon_gemv as gg
from sparkdec.ops import triton_gemm as tg

DEV, DT = "cuda", torch.bfloat16
# (BN, BK, STAGES, XRING) variants of the Gluon product
TILES = [(64, 128, 4, 1), (64, 128, 6, 1), (64, 256, 3, 1), (64, 256, 4, 1), (128, 128, 4, 1), (64, 256, 3, 0)]


def layer_products(shape: str) -> dict[str, tuple[int, int, dict]]:
    """name -> (weight rows, K, gemm kwargs) of one decoder layer's four products."""
    c = SHAPES[shape]
    h, q, kv, i = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim, \
        c.intermediate_size
    return {"qkv": (q + 2 * kv, h, {}), "o": (h, q, {"residual": True}), "gate_up": (2 * i, h, {"silu": True}),
            "down": (h, i, {"residual": True})}


def run(x, w, kw, r, gluon: bool):
    tg.GLUON = gluon
    return tg.gemm(x, w, residual=r[: x.shape[0]] if kw.get("residual") else None, silu=kw.get("silu", False))


def check_bits(n: int, k: int, kw: dict) -> dict:
    """Gluon rows vs Triton rows (1..16 rows, every tile in TILES that fits): differing elements."""
    w = torch.randn(n, k, device=DEV, dtype=DT) / k ** 0.5
    x = torch.randn(300, k, device=DEV, dtype=DT)
    r = torch.randn(300, n // 2 if kw.get("silu") else n, device=DEV, dtype=DT)
    full = run(x, w, kw, r, gluon=False)
    out = {}
    for tile in TILES:
        gg.CONFIGS[(n, k)] = tile
        diffs = [int((run(x[:m], w, kw, r, gluon=True) != full[:m]).sum()) for m in (1, 7, 8, 9, 16)]
        out[str(tile)] = diffs
    del gg.CONFIGS[(n, k)]
    logits = tg.gemm(x[:3], w, out_dtype=torch.float32)
    out["float_out_equal"] = bool(torch.equal(logits, tg.gemm(x[:3], w).float()))
    tg.GLUON = True
    return out


def time_product(n: int, k: int, kw: dict, rows: int, gluon: bool, copies: int) -> float:
    """us per launch: `copies` launches over distinct weights, captured in one graph."""
    ws = [torch.randn(n, k, device=DEV, dtype=DT) / k ** 0.5 for _ in range(copies)]
    x = torch.randn(rows, k, device=DEV, dtype=DT)
    r = torch.randn(rows, n // 2 if kw.get("silu") else n, device=DEV, dtype=DT)
    return graph_us(x, ws, kw, r, gluon)


def graph_us(x, ws: list, kw: dict, r, gluon: bool) -> float:
    """us per launch of x's product with each weight in ws, the launches back to back in one CUDA graph."""
    for w in ws:
        run(x, w, kw, r, gluon)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for w in ws:
            run(x, w, kw, r, gluon)
    us = replay_ms(g) * 1e3 / len(ws)
    del g
    return us


def chain_ms(shape: str, rows: int, gluon: bool, layers: int = 36) -> float:
    """ms of `layers` x (qkv, o + residual, gate_up + SiLU, down + residual) with distinct weights."""
    prods = layer_products(shape)
    c = SHAPES[shape]
    # NOTE: scaled so that 36 residual layers without norms stay finite
    weights = [{name: torch.randn(n, k, device=DEV, dtype=DT) * (0.1 / k ** 0.5) for name, (n, k, _) in prods.items()}
               for _ in range(layers)]
    h = torch.randn(rows, c.hidden_size, device=DEV, dtype=DT)
    q = c.num_attention_heads * c.head_dim

    def forward():
        x = h
        for lw in weights:
            qkv = run(x, lw["qkv"], {}, None, gluon)
            x = run(qkv[:, :q], lw["o"], {"residual": True}, x, gluon)
            a = run(x, lw["gate_up"], {"silu": True}, None, gluon)
            x = run(a, lw["down"], {"residual": True}, x, gluon)
        return x

    ms = timed(forward)
    del weights
    return ms


def timed(forward) -> float:
    """ms of one graph replay of forward (its output checked finite and equal to an eager call's)."""
    ref = forward()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = forward()
    g.replay()
    torch.cuda.synchronize()
    assert torch.isfinite(got).all() and torch.equal(got, ref)
    ms = replay_ms(g)
    del g
    return ms


def probe_shape(shape: str, bw: float, res: dict, best: dict) -> None:
    prods = layer_products(shape)
    for name, (n, k, kw) in prods.items():
        key = f"{shape}.{name}"
        cfg = tg.pick_config(n, k)
        row = {"n": n, "k": k, "triton_cfg": list(cfg), "floor_us": n * k * 2 / bw * 1e6,
               "bits": check_bits(n, k, kw)}
        copies = max(4, int(400e6 // (n * k * 2)))
        for rows in (1, 8):
            row[f"triton_m{rows}_us"] = time_product(n, k, kw, rows, False, copies)
            for tile in TILES:
                gg.CONFIGS[(n, k)] = tile
                row[f"gluon{tile}_m{rows}_us"] = time_product(n, k, kw, rows, True, copies)
            del gg.CONFIGS[(n, k)]
        # split-K 2 (both kernels: the table's split fixes the bits), for the products that have no split
        if cfg[2] == 1:
            saved = tg.CONFIGS.get((n, k))
            tg.CONFIGS[(n, k)] = (cfg[0], cfg[1], 2, cfg[3], cfg[4])
            gg.CONFIGS[(n, k)] = (64, 128, 4, 1)
            for rows in (1, 8):
                row[f"triton_split2_m{rows}_us"] = time_product(n, k, kw, rows, False, copies)
                row[f"gluon(64, 128, 4, 1)_split2_m{rows}_us"] = time_product(n, k, kw, rows, True, copies)
            row["bits_split2"] = check_bits(n, k, kw)
            if saved is None:
                tg.CONFIGS.pop((n, k))
            else:
                tg.CONFIGS[(n, k)] = saved
            gg.CONFIGS.pop((n, k), None)
        cost = lambda t: row[f"gluon{t}_m1_us"] + row[f"gluon{t}_m8_us"]
        fastest = min(TILES, key=cost)
        row["gluon_wins"] = cost(fastest) < row["triton_m1_us"] + row["triton_m8_us"]
        if row["gluon_wins"]:  # shapes where the Triton kernel is as fast stay on it
            best[f"{n},{k}"] = list(fastest)
        print(key, {a: (round(b, 2) if isinstance(b, float) else b) for a, b in row.items()}, flush=True)
        res["products"][key] = row


def main() -> None:
    out_dir = sys.argv[1]
    shapes = sys.argv[2:] or ["qwen3-4b"]
    torch.manual_seed(0)
    bw = copy_bandwidth()
    res = {"device": torch.cuda.get_device_name(), "copy_bandwidth": bw, "pdl_mode": tg.PDL_MODE, "products": {},
           "chain": {}}
    best: dict[str, list[int]] = {}
    for shape in shapes:
        probe_shape(shape, bw, res, best)
        gg.CONFIGS.update({tuple(int(v) for v in key.split(",")): tuple(t) for key, t in best.items()})
        for rows in (1, 8):
            for gluon in (False, True):
                for mode in (1, 2):
                    tg.PDL_MODE = mode
                    res["chain"][f"{shape}.m{rows}.{'gluon' if gluon else 'triton'}.pdl{mode}"] = \
                        chain_ms(shape, rows, gluon)
                    tg.PDL_MODE = 1
        print({key: round(v, 3) for key, v in res["chain"].items()}, flush=True)
    res["gluon_configs"] = best
    with open(os.path.join(out_dir, "gluon_gemv_probe.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(out_dir, "gluon_configs.json"), "w") as f:
        json.dump(best, f)


if __name__ == "__main__":
    main()
