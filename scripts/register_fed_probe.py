"""Device probe (staged in session 35, run in 36): a product whose weights go to registers, not shared memory
(ops/gluon_regfed.py since session 36: each [64, 128] weight tile stored in wgmma's A-fragment order, loaded 16 bytes a
thread at a time, fed to a swap-AB wgmma with A in registers, four tiles in flight per program, the first four
requested before the PDL wait). It asks the two questions of docs/research/megakernel-gluon.md (session 35): does A
from registers give the shared-memory form's bits (the shipped Gluon product's), and how fast does such a product
stream (register_fed_probe_h200_2026-12-02_session36.json: the probe's own kernel, a row tile's K tiles one after
another; the same bits, o faster, the other three slower).

usage: python scripts/register_fed_probe.py OUT.json        (on the H200)
       python scripts/register_fed_probe.py --compile-only  (any machine: compiles for sm_90, checks the loads)
"""
from __future__ import annotations

import json
import sys

import torch
import triton

from sparkdec.ops import gluon_gemv as gg
from sparkdec.ops import gluon_regfed
from sparkdec.ops.tiled_weights import FRAGMENT, set_tiled_
from sweep_gemm import graph_time  # us per launch of fn(i) over weight copies, in one graph

BN, BK = 64, 128


def fragment_order(w: torch.Tensor) -> torch.Tensor:
    """W [N, K] -> a copy stored tile by tile, each tile in fragment order (the engine's REGISTER_FED layout)."""
    t = w.clone()
    set_tiled_(t, (BN, BK, FRAGMENT))
    return t


def reg_gemv(x: torch.Tensor, w_frag: torch.Tensor, out: torch.Tensor, split_k: int = 1, pdl: int = 0) -> torch.Tensor:
    """The register-fed product into out [M, N] (split_k 1), or its slices' fp32 workspace (split_k > 1)."""
    return gluon_regfed.gemv(x, w_frag, out, out, None, split_k, False, False, pdl, defer=split_k > 1)


def compile_only() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    sig = {"w_ptr": "*bf16", "x_ptr": "*bf16", "out_ptr": "*bf16", "res_ptr": "*bf16", "ws_ptr": "*fp32",
           "cnt_ptr": "*i32", "M": "i32", "N": "i32", "stride_xm": "i32", "stride_om": "i32", "stride_rm": "i32"}
    attrs = {(i, ): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4, 5, 8, 9, 10)}
    for k, split in ((4096, 8), (2560, 1)):  # o's shape at its split-K (the defer store), then qkv's
        consts = {"K": k, "SILU": False, "RESIDUAL": split == 1, "PDL": 2, "SPLIT_K": split, "MP": 8,
                  "DEFER": True, "num_warps": 4}
        src = GluonASTSource(gluon_regfed._regfed_kernel, {**sig, **{c: "constexpr" for c in consts}}, consts, attrs)
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
        ptx = kernel.asm["ptx"]
        ops = [line.split()[0] for line in ptx.splitlines() if "ld.global" in line]
        print(f"K {k} split {split}: wgmma", sum("wgmma.mma_async" in line for line in ptx.splitlines()), "loads",
              {op: ops.count(op) for op in sorted(set(ops))})
    # the kernel's reshape and permute, done by torch on one stored tile, must give the tile back
    w = torch.randn(BN, BK)
    v = fragment_order(w).view(2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2).permute(3, 4, 11, 5, 6, 7, 0, 1, 2, 10, 8, 9, 12)
    assert torch.equal(v.reshape(BN, BK), w), "tiled_weights' fragment order and _fragment_tile's permute disagree"
    print("fragment order: the kernel's permutation gives the tile back")
    try:  # registers and spills (cuobjdump ships with triton's NVIDIA backend)
        sys.path.insert(0, "tests")
        from cubin_usage import resource_usage
        print("resources", resource_usage(kernel.asm["cubin"]))
    except Exception as exc:  # informative only
        print("resources unknown:", exc)


def main(path: str) -> None:
    """Per 4B product at its shipped split-K: differing elements against the shipped Gluon product (its output, or its
    slices' workspace), and us per launch of both in a graph over about 1 GB of weight copies, one row, PDL mode 2."""
    torch.manual_seed(0)
    res = {"device": torch.cuda.get_device_name(), "products": {}}
    for name, (n, k, split) in {"qkv": (6144, 2560, 1), "o": (2560, 4096, 8), "gate_up": (19456, 2560, 1),
                                "down": (2560, 9728, 4)}.items():
        cfg = gg.CONFIGS[(n, k)]

        def shipped(x, w, out, pdl=0):
            return gg.gemv(x, w, out, x, None, cfg, split, False, False, pdl, defer=split > 1)

        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        wf = fragment_order(w)
        row = {"split_k": split, "shipped_tiles": cfg}
        for m in (1, 8, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = shipped(x, w, torch.empty(m, n, device="cuda", dtype=x.dtype))
            got = reg_gemv(x, wf, torch.empty(m, n, device="cuda", dtype=x.dtype), split)
            row[f"differing_elements_{m}_rows"] = int((got != ref).sum())
        copies = max(2, (1 << 30) // (n * k * 2))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        wfs = [fragment_order(t) for t in ws]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(1, n, device="cuda", dtype=x.dtype)
        row["shipped_us"] = graph_time(lambda i: shipped(x, ws[i], out, pdl=2), copies)
        row["register_fed_us"] = graph_time(lambda i: reg_gemv(x, wfs[i], out, split, pdl=2), copies)
        row.update(bytes=n * k * 2, copies=copies)
        res["products"][name] = row
        print(name, row, flush=True)
        del ws, wfs
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    compile_only() if sys.argv[1:] == ["--compile-only"] else main(sys.argv[1])
