"""Device probe (session 14): persistent Gluon products (ops/gluon_gemv.py PROGRAMS: a program streams several
(tile, K slice) items through one ring) in the 36-layer Qwen3-4B product chain with its RMSNorm kernels
(product_chain_probe.chain4), against one program per item and against the kernel of the last commit (OLD_GEMV, a
copy of the old module). Every variant's chain output must equal the old kernel's bit for bit.
usage: python scripts/persistent_chain_probe.py OUT.json [old_gluon_gemv.py]
"""
from __future__ import annotations

import gc
import importlib.util
import json
import sys

import torch

import product_chain_probe as pcp
from sparkdec.bench.kernels import copy_bandwidth
from sparkdec.ops import gluon_gemv as gg
from sparkdec.ops import triton_gemm as tg

QKV, O, GATE_UP, DOWN = (6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728)
ALL = (QKV, O, GATE_UP, DOWN)
SHIPPED = dict(gg.CONFIGS)


def _same(n: int) -> dict:
    return {s: n for s in ALL}


# name -> (PROGRAMS, tile overrides)
VARIANTS = {
    "items": ({}, {}),
    "p132": (_same(132), {}),
    "p264": (_same(264), {}),
    "balanced": ({QKV: 96, O: 160, GATE_UP: 152, DOWN: 160}, {}),
    "p132_s8": (_same(132), {O: (64, 128, 8, 1), GATE_UP: (64, 128, 8, 1), DOWN: (64, 128, 8, 1),
                             QKV: (64, 128, 8, 1)}),
    "p264_s3": (_same(264), {O: (64, 128, 3, 1), GATE_UP: (64, 128, 3, 1), DOWN: (64, 128, 3, 1),
                             QKV: (64, 128, 3, 1)}),
    "p132_s6": (_same(132), {O: (64, 128, 6, 1), GATE_UP: (64, 128, 6, 1), DOWN: (64, 128, 6, 1),
                             QKV: (64, 256, 3, 1)}),
}


def run_chain(seed: int = 0) -> tuple[float, torch.Tensor]:
    """ms of the chain (product_chain_probe.chain4 with norms) and its output."""
    outs = []
    orig = pcp.timed

    def timed(forward):
        ms = orig(forward)
        outs.append(forward().clone())
        return ms

    pcp.timed = timed
    torch.manual_seed(seed)
    try:
        ms = pcp.chain4(1, True)
    finally:
        pcp.timed = orig
    return ms, outs[0]


def main() -> None:
    out = sys.argv[1]
    old_path = sys.argv[2] if len(sys.argv) > 2 else None
    res = {"device": torch.cuda.get_device_name(), "copy_bandwidth": copy_bandwidth(), "runs": {}}
    new_module = tg.gluon_gemv
    ref = None
    order = (["old"] if old_path else []) + list(VARIANTS) + (["old#2"] if old_path else []) + ["items#2"]
    for name in order:
        base = name.split("#")[0]
        if base == "old":
            spec = importlib.util.spec_from_file_location("old_gluon_gemv", old_path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            mod.CONFIGS.update(SHIPPED)  # its table file is not beside the copy
            tg.gluon_gemv = mod
        else:
            tg.gluon_gemv = new_module
            programs, tiles = VARIANTS[base]
            gg.PROGRAMS.clear()
            gg.PROGRAMS.update(programs)
            gg.CONFIGS.clear()
            gg.CONFIGS.update({**SHIPPED, **tiles})
            assert all(gg.supports(torch.empty(1, k, device="cuda", dtype=torch.bfloat16),
                                   torch.empty(n, k, device="cuda", dtype=torch.bfloat16), 1) for n, k in ALL)
        ms, y = run_chain()
        if ref is None:
            ref = y
        entry = {"ms": ms, "us_per_layer": ms * 1e3 / pcp.LAYERS, "equal_to_first": bool(torch.equal(y, ref))}
        res["runs"][name] = entry
        print(name, entry, flush=True)
        gc.collect()
        torch.cuda.empty_cache()
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
    tg.gluon_gemv = new_module


if __name__ == "__main__":
    main()
