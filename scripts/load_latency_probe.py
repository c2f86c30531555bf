"""What one dependent global load costs on the device: L2 hit, L2 miss in a page whose translation is warm, and the
first touch of a page after the decode's weight bytes streamed by (a TLB miss), by pointer chasing.

The split kernel's programs chain three dependent loads (lengths and query, page ids, keys and values) after their PDL
wait and take about 5.5 us (split_stamps_*_session21_opre.json, even with no weight bytes streaming beside them).
This says what each of those round trips can cost.
usage: python scripts/load_latency_probe.py OUT.json
"""
from __future__ import annotations

import json
import statistics
import sys

import torch
import triton
import triton.language as tl

HOPS = 32
PAGE = 2 << 20  # bytes: the large pages the allocator maps big tensors with
SPACING = 64 << 20  # bytes between the chain's pages
_NOW = tl.constexpr("mov.u64 $0, %globaltimer;")


@triton.jit
def _chase(a_ptr, start, out_ptr, HOPS: tl.constexpr):
    """One thread follows HOPS links a[i] -> a[a[i]] (int64 element indices) and stores the time it took."""
    i = start.to(tl.int64)
    t0 = tl.inline_asm_elementwise(_NOW, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    for _ in range(HOPS):
        i = tl.load(a_ptr + i, cache_modifier=".cg")
    t1 = t0
    if i >= 0:  # the clock is read only once the last link arrived (a control dependency on it)
        t1 = tl.inline_asm_elementwise(_NOW, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr, t1 - t0)
    tl.store(out_ptr + 1, i)


def chain(a: torch.Tensor, offsets: list[int]) -> int:
    """Link the int64 elements at byte offsets in order (the last one to itself); -> the first element's index."""
    idx = [o // 8 for o in offsets]
    for cur, nxt in zip(idx, idx[1:] + idx[-1:]):
        a[cur] = nxt
    return idx[0]


def run(a, start, out) -> float:
    _chase[(1,)](a, start, out, HOPS=HOPS, num_warps=1)
    torch.cuda.synchronize()
    return out[0].item() / HOPS  # ns per load


def main(path: str) -> None:
    dev = torch.device("cuda")
    a = torch.zeros((HOPS + 1) * SPACING // 8, dtype=torch.int64, device=dev)
    flood = torch.empty(8 << 30, dtype=torch.uint8, device=dev)  # about the 4B decode's weight bytes per token
    sink = torch.empty_like(flood)
    out = torch.zeros(2, dtype=torch.int64, device=dev)
    line = 4096  # a second line in the same page, far from the first (no sector or line prefetch reaches it)
    cold = chain(a, [h * SPACING for h in range(HOPS)])  # one line in each of HOPS pages
    warm = chain(a, [h * SPACING + line for h in range(HOPS)])  # another line in each of the same pages
    run(a, cold, out)  # compile
    res = {"cold_page_ns": [], "warm_page_l2_miss_ns": [], "l2_hit_ns": [], "same_page_chain_ns": []}
    one_page = chain(a, [HOPS * SPACING + 8192 * h for h in range(HOPS)])  # HOPS lines of one 2 MB page
    for _ in range(5):
        sink.copy_(flood)  # stream 8 GB: evicts L2 and whatever translations the copy displaces
        torch.cuda.synchronize()
        res["cold_page_ns"].append(run(a, cold, out))
        res["warm_page_l2_miss_ns"].append(run(a, warm, out))
        res["l2_hit_ns"].append(run(a, cold, out))
        sink.copy_(flood)
        torch.cuda.synchronize()
        res["same_page_chain_ns"].append(run(a, one_page, out))  # first link misses the TLB, the rest hit it
    summary = {k: round(statistics.median(v), 1) for k, v in res.items()}
    doc = {"device": torch.cuda.get_device_name(), "hops": HOPS, "page_bytes": PAGE, "flood_bytes": flood.numel(),
           "units": "ns per dependent load (median of 5 runs of a chain of 32)", "median": summary, "runs": res,
           "command": "python scripts/load_latency_probe.py OUT"}
    print(json.dumps(summary))
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
