"""Device probe: what one kernel boundary costs when the consumer waits on the PDL grid dependency against a flag.

A CUDA graph replays a chain of LINKS tiny kernels; every program of link i reads what the programs of link i - 1
wrote and writes its own value (a true dependency). Per link (us), for producer/consumer grids of G programs:
- pdl2: each kernel waits with griddepcontrol.wait, then lets the next launch (the engine's PDL mode 2);
- flag2: no grid wait; each kernel spins (acquire) until the previous link's G programs have arrived on its counter,
  then lets the next launch; the last of its own programs to read that counter resets it;
- flag3: as flag2, but the next kernel may launch at this one's start (it then spins beside this one).
Values are checked after the replays, so a protocol bug shows as an error, not as a fast time.
usage: python scripts/flag_chain_probe.py OUT.json
"""
from __future__ import annotations

import json
import sys

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

LINKS = 360


@triton.jit
def _pdl_link(src, dst, G_IN: tl.constexpr):
    pid = tl.program_id(0)
    gdc_wait()
    gdc_launch_dependents()
    v = tl.load(src + (pid * 7) % G_IN)
    tl.store(dst + pid, v + 1)


@triton.jit
def _flag_link(src, dst, cnt_in, seen_in, cnt_out, G_IN: tl.constexpr, G: tl.constexpr, EARLY: tl.constexpr):
    pid = tl.program_id(0)
    if EARLY:
        gdc_launch_dependents()
    c = tl.atomic_add(cnt_in, 0, sem="acquire")
    while c < G_IN:
        c = tl.atomic_add(cnt_in, 0, sem="acquire")
    if not EARLY:
        gdc_launch_dependents()
    v = tl.load(src + (pid * 7) % G_IN, cache_modifier=".cg")
    if tl.atomic_add(seen_in, 1, sem="relaxed") == G - 1:  # every program has read cnt_in: reset it for the next replay
        tl.atomic_xchg(seen_in, 0, sem="relaxed")
        tl.atomic_xchg(cnt_in, 0, sem="relaxed")
    tl.store(dst + pid, v + 1)
    tl.debug_barrier()
    tl.atomic_add(cnt_out, 1, sem="release")


def chain(kind: str, g: int):
    bufs = [torch.zeros(g, dtype=torch.int32, device="cuda") for _ in range(LINKS + 1)]
    cnt = torch.zeros(LINKS + 1, dtype=torch.int32, device="cuda")
    seen = torch.zeros(LINKS + 1, dtype=torch.int32, device="cuda")

    def run():
        if kind != "pdl2":  # link 0's input counter (set by plain kernels before the chain) and the last one's
            cnt[0:1].fill_(g)
            cnt[LINKS:].zero_()
        for i in range(LINKS):
            if kind == "pdl2":
                _pdl_link[(g,)](bufs[i], bufs[i + 1], G_IN=g, launch_pdl=True)
            else:
                _flag_link[(g,)](bufs[i], bufs[i + 1], cnt[i:], seen[i:], cnt[i + 1:], G_IN=g, G=g,
                                 EARLY=kind == "flag3", launch_pdl=True)
    return run, bufs, cnt


def timed(kind: str, g: int) -> dict:
    run, bufs, cnt = chain(kind, g)
    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    times = []
    for _ in range(25):
        bufs[0].add_(1)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / LINKS)
    ok = bool((bufs[-1] == bufs[0][0] + LINKS).all()) and (kind == "pdl2" or int(cnt[LINKS]) == g)
    times.sort()
    return {"us_per_link": times[len(times) // 2], "min_us": times[0], "values_ok": ok}


def main() -> None:
    out = {"device": torch.cuda.get_device_name(), "links": LINKS, "runs": {}}
    for g in (1, 32, 128):
        for kind in ("pdl2", "flag2", "flag3", "pdl2"):
            key = f"{kind}_g{g}" + ("#2" if f"{kind}_g{g}" in out["runs"] else "")
            out["runs"][key] = timed(kind, g)
            print(key, out["runs"][key], flush=True)
    json.dump(out, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
