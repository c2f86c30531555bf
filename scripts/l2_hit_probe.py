"""Device probe: does a weight tile asked of L2 ahead of time make a later Gluon product read it faster?

Every L2 prefetch tried in the decode graph (sessions 6-19) made decode slower by about what the prefetched bytes
cost to stream once more, as if the product never hit them. This times the o product of the Qwen3-4B shape (21 MB,
ops/gluon_gemv.py, one row) after L2 is flushed, with in between: nothing (cold), the same product once (its weights
then sit in L2: hot), or one of several ways of asking L2 for the weights (bulk cp.async.bulk.prefetch.L2,
per-line prefetch.global.L2 with and without evict_last, loads through L2 that keep nothing). A spin of a few tens
of microseconds separates the request from the timed product, so the requests have landed.

usage: python scripts/l2_hit_probe.py OUT.json   (H200; well under a minute)
"""
from __future__ import annotations

import json
import statistics
import sys

import torch
import triton
import triton.language as tl

from sparkdec.ops import gluon_gemv, triton_gemm

_BULK = tl.constexpr("""{
.reg .pred p;
setp.ne.u32 p, $2, 0;
@p cp.async.bulk.prefetch.L2.global [$1], $3;
mov.u32 $0, 0;
}""")
_LINE = tl.constexpr("prefetch.global.L2 [$1]; mov.u32 $0, 0;")
_LINE_LAST = tl.constexpr("prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0;")


@triton.jit
def _bulk_kernel(ptr, n_bytes, CHUNK: tl.constexpr):
    """Program p: chunks p*128 .. p*128+127 of CHUNK bytes (one per thread)."""
    c = tl.program_id(0) * 128 + tl.arange(0, 128)
    start = c.to(tl.int64) * CHUNK
    live = (start < n_bytes).to(tl.int32)
    size = tl.minimum(n_bytes - start, CHUNK).to(tl.int32)
    tl.inline_asm_elementwise(_BULK, "=r,l,r,r", [ptr.to(tl.pointer_type(tl.int8)) + start, live, size],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _line_kernel(ptr, n_lines, LAST: tl.constexpr):
    """One 128-byte line per thread."""
    c = tl.program_id(0) * 128 + tl.arange(0, 128)
    addr = ptr.to(tl.pointer_type(tl.int8)) + tl.minimum(c, n_lines - 1).to(tl.int64) * 128
    if LAST:
        tl.inline_asm_elementwise(_LINE_LAST, "=r,l", [addr], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.inline_asm_elementwise(_LINE, "=r,l", [addr], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _touch_kernel(ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Loads through L2 (.cg) whose sum is kept only if it is impossible (so the loads stay)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(ptr + offs, mask=offs < n, other=0, cache_modifier=".cg")
    s = tl.sum(v.to(tl.float32), 0)
    if s == 12345.678:
        tl.store(out_ptr, s)


def probe(shape, reps: int = 150) -> dict:
    """Median and min time of the product of weight [N, K] (one row) after each kind of request, kinds interleaved
    within each repetition (so drift hits them alike)."""
    dev = torch.device("cuda")
    w = (torch.randn(*shape, device=dev) * 0.02).to(torch.bfloat16)
    x = torch.randn(1, shape[1], device=dev).to(torch.bfloat16)
    flush = torch.empty(512 << 20, dtype=torch.uint8, device=dev)
    dummy = torch.zeros(1, device=dev)
    nbytes = w.numel() * 2

    def product():
        return triton_gemm.gemm(x, w)

    ref = product().clone()

    def ask(kind):
        if kind == "bulk16k":
            _bulk_kernel[(triton.cdiv(nbytes, 16384 * 128),)](w, nbytes, CHUNK=16384)
        elif kind == "bulk4k":
            _bulk_kernel[(triton.cdiv(nbytes, 4096 * 128),)](w, nbytes, CHUNK=4096)
        elif kind in ("line", "line_last"):
            _line_kernel[(triton.cdiv(nbytes // 128, 128),)](w, nbytes // 128, LAST=kind == "line_last")
        elif kind == "touch":
            _touch_kernel[(triton.cdiv(w.numel(), 4096),)](w.view(-1), dummy, w.numel(), BLOCK=4096)
        elif kind == "hot":
            product()

    kinds = ("cold", "hot", "bulk16k", "bulk4k", "line", "line_last", "touch")
    times = {k: [] for k in kinds}
    for _ in range(reps):
        for kind in kinds:
            flush.zero_()
            ask(kind)
            torch.cuda._sleep(100_000)  # ~50 us at 1.98 GHz: the requests land
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            got = product()
            b.record()
            torch.cuda.synchronize()
            times[kind].append(a.elapsed_time(b) * 1e3)
            assert torch.equal(got, ref)
    res = {k: {"median_us": statistics.median(v), "min_us": min(v)} for k, v in times.items()}
    for k, v in res.items():
        print(f"{shape} {k:>10}: median {v['median_us']:.2f} us, min {v['min_us']:.2f}", flush=True)
    return {"weight_bytes": nbytes, "gluon": gluon_gemv.supports(x, w, triton_gemm.split_k_of(*shape)) is not None,
            "results_us": res}


def main(out: str) -> None:
    torch.manual_seed(0)
    res = {"device": torch.cuda.get_device_name(), "rows": 1,
           "products": {"o_2560x4096": probe((2560, 4096)), "qkv_6144x2560": probe((6144, 2560))},
           "command": "python scripts/l2_hit_probe.py OUT.json"}
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
