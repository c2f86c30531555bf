"""A lone decode row's attention (split + combine) at the Qwen3-4B shape with nothing else on the device: how long
one layer's chain takes when no product shares the SMs or HBM with it.

In the decode graph the combine ends 12.4-15 us after the RoPE kernel (split_stamps_*_session21_opre.json), and the
split's programs work 5.5 us on one 64-key step. Here the same launches are captured back to back in one CUDA graph,
each layer's caches its own (so no layer hits another's keys in L2), and timed per layer.
usage: python scripts/attention_alone_probe.py OUT.json [contexts: 1024,8192] [variants: triton_p64,triton_r168]
"""
from __future__ import annotations

import json
import sys

import torch

from sparkdec.bench.kernels import replay_ms
from sparkdec.engine.context import build_context
from sparkdec.ops import stamps
from sparkdec.ops import triton_attention as ta

HQ, HKV, D, PS = 32, 8, 128, 16
LAYERS = 36
WINDOW = 40960  # the graphs' max_kv_len (Qwen3's own window, as the bench)
ONLY = [v for v in (sys.argv[3].split(",") if len(sys.argv) > 3 else []) if v]  # variants to run (default all)
KERNELS: list[dict] = []
STAMPED: list[dict] = []  # split_anatomy of the stamped variants, in order  # per timed variant: {kernel: mean us} (on when the list is not empty)


def layer_inputs(ctx_len: int):
    pages = (ctx_len + PS) // PS + 1
    caches = [(torch.randn(pages * PS, HKV, D, device="cuda", dtype=torch.bfloat16),
               torch.randn(pages * PS, HKV, D, device="cuda", dtype=torch.bfloat16)) for _ in range(LAYERS)]
    ctx = build_context([(list(range(pages)), [ctx_len], False)], PS, "cuda")
    q = torch.randn(1, HQ, D, device="cuda", dtype=torch.bfloat16)
    return caches, ctx, q


def time_chain(caches, ctx, q, settings: dict, gluon: bool) -> float:
    """us per layer: LAYERS attention calls captured back to back, replayed. settings["_stamps"]: the split kernel
    stamps its programs (ops/stamps.py) and their medians go to STAMPED."""
    settings = dict(settings)
    stamped = settings.pop("_stamps", False)
    saved = {k: getattr(ta, k) for k in settings}
    for k, v in settings.items():
        setattr(ta, k, v)
    if stamped:
        stamps.alloc({"split": 4096}, LAYERS, q.device)
    try:
        out = torch.empty_like(q)
        blocks = (ctx.block_lead, ctx.block_rows)
        first = ctx.positions if gluon else None

        def chain():
            for kc, vc in caches:
                ta.triton_paged_attention(q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, PS, WINDOW,
                                          D ** -0.5, blocks=blocks, out=out, first_written=first)
        chain()
        torch.cuda.synchronize()
        stamps.reset()  # the capture's launches take the stamp rows 0 .. LAYERS - 1
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chain()
        us = replay_ms(graph) / LAYERS * 1e3
        if KERNELS:  # each kernel's own mean duration (us) in one replay, from the profiler
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                graph.replay()
                torch.cuda.synchronize()
            for e in prof.key_averages():
                if e.device_time_total > 0 and e.count >= LAYERS:
                    KERNELS[-1][e.key[:80]] = round(e.device_time_total / e.count, 2)
        if stamped:
            buf = stamps.BUFFERS["split"]
            buf.zero_()
            graph.replay()
            torch.cuda.synchronize()
            STAMPED.append(split_anatomy(buf.cpu()))
        return us
    finally:
        stamps.off()
        for k, v in saved.items():
            setattr(ta, k, v)


def split_anatomy(buf: torch.Tensor) -> dict:
    """Medians (us) over the layers' programs whose first step stamped its products: from the PDL wait's release,
    the kv lengths' arrival (col 4), the page ids' (5), the keys' and values' (6), the products' (7), the end (2)."""
    rows = buf.reshape(-1, buf.shape[-1])  # [layers * programs, COLS]
    live = rows[rows[:, 7] > 0].double()
    span = lambda a, b: round(float((live[:, b] - live[:, a]).median()) / 1e3, 3)  # noqa: E731
    return {"programs": int(live.shape[0]), "start_to_release": span(0, 1), "lengths": span(1, 4),
            "page_ids": span(4, 5), "keys_values": span(5, 6), "products": span(6, 7), "stores_end": span(7, 2),
            "release_to_end": span(1, 2)}


VARIANTS = {
    "triton_p64": ({}, False),
    "triton_p32": ({"PROGRAMS_ONE_ROW": 32}, False),
    "gluon_p32_last": ({"PROGRAMS_ONE_ROW": 32, "GLUON_SPLIT": True, "GLUON_PROGRAMS": 32,
                        "GLUON_BLOCK_LAST": True}, True),
    "triton_p128": ({"PROGRAMS_ONE_ROW": 128}, False),
    # (session 21: SPLIT_STAGES 1 or 3 timed as the default, 7.70 / 22.5 us at 1k / 8k)
    "triton_w8": ({"SPLIT_WARPS": 8}, False),  # (other bits)
    "triton_no_pdl": ({}, False),  # the split and combine launched without PDL (see time_chain)
    # the split's programs stamped at each dependent step (each stamp adds a reduction: compare its time with p64's)
    "stamped_p64": ({"_stamps": True}, False),
    # register caps: three (168) or four (128) programs per SM instead of two; the same bits
    "triton_r168": ({"SPLIT_MAXNREG": 168}, False),
    "triton_r128": ({"SPLIT_MAXNREG": 128}, False),
    "triton_p128_r168": ({"PROGRAMS_ONE_ROW": 128, "SPLIT_MAXNREG": 168}, False),
    # smaller fine splits and steps: a program's path is shorter (other bits: the reduction order changes)
    "fine32_b32": ({"FINE_SPLIT": 32, "SPLIT_BLOCK_N": 32}, False),
    "fine32_b32_p128": ({"FINE_SPLIT": 32, "SPLIT_BLOCK_N": 32, "PROGRAMS_ONE_ROW": 128}, False),
    "fine16_b16_p128": ({"FINE_SPLIT": 16, "SPLIT_BLOCK_N": 16, "PROGRAMS_ONE_ROW": 128}, False),
}


def main(path: str) -> None:
    KERNELS.append({})
    res = {"device": torch.cuda.get_device_name(), "shape": "qwen3-4b attention (32 q heads, 8 kv heads, d 128)",
           "rows": 1, "window": WINDOW, "units": "us per layer (split + combine, 36 layers back to back in a graph)",
           "command": "python scripts/attention_alone_probe.py " + " ".join(sys.argv[1:]), "us_per_layer": {}}
    for ctx_len in [int(c) for c in (sys.argv[2] if len(sys.argv) > 2 else "1024,2048,8192").split(",")]:
        caches, ctx, q = layer_inputs(ctx_len)
        for name, (settings, gluon) in VARIANTS.items():
            if ONLY and name not in ONLY:
                continue
            if name == "triton_no_pdl":
                from sparkdec.ops import triton_gemm
                kinds = triton_gemm.PDL_KINDS
                triton_gemm.PDL_KINDS = {**kinds, "split": 0, "combine": 0}
                try:
                    us = time_chain(caches, ctx, q, settings, gluon)
                finally:
                    triton_gemm.PDL_KINDS = kinds
            else:
                us = time_chain(caches, ctx, q, settings, gluon)
            res["us_per_layer"][f"{name} ctx {ctx_len}"] = round(us, 2)
            res.setdefault("kernel_us", {})[f"{name} ctx {ctx_len}"] = KERNELS[-1]
            if name.startswith("stamped"):
                res.setdefault("split_anatomy_us", {})[f"{name} ctx {ctx_len}"] = STAMPED[-1]
                print(f"{name} ctx {ctx_len}: split anatomy {STAMPED[-1]}", flush=True)
            print(f"{name} ctx {ctx_len}: {us:.2f} us per layer; kernels {KERNELS[-1]}", flush=True)
            KERNELS.append({})
        del caches
    with open(path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
