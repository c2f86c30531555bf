"""Device probe: what a split + combine costs as two PDL-linked kernels against one thread-block-cluster launch.

The attention chain of a decode layer runs a split kernel (one program per key split and kv head) and a combine kernel
that reduces the splits. In one launch of clusters (16 CTAs per kv head, Gluon num_ctas=16) the CTAs store their
partials, meet at a cluster barrier (barrier.cluster arrive.release / wait.acquire) and four of them reduce the
partials: no second grid, no PDL release between them. A CUDA graph replays LINKS such steps, each reading the previous
step's output (a true dependency; int32 values, checked exactly after the replays). Per step (us):
- two2: split and combine kernels, each waiting with griddepcontrol.wait and then letting the next launch (mode 2);
- two3: the split lets the combine launch at its start (mode 3, as the engine's short graphs do);
- cluster: the cluster launch, mode 2.
usage: python scripts/cluster_chain_probe.py OUT.json
"""
from __future__ import annotations

import json
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

LINKS = 240
HEADS, SPLITS, GROUP, D = 8, 16, 4, 128  # kv heads, key splits per kv head, query heads per kv head, head dim


@gluon.jit
def _store(ptrs, values, EVERY_CTA: gl.constexpr):
    """gl.store, or (EVERY_CTA) a store by every CTA of the cluster: with layouts replicated over the cluster's CTAs
    (cga_layout bases all zero) the compiler stores from CTA 0 only, so those stores go through inline PTX."""
    if EVERY_CTA:
        gl.inline_asm_elementwise("st.global.b32 [$1], $2;\n\tmov.u32 $0, 0;", "=r,l,r", [ptrs, values],
                                  dtype=gl.int32, is_pure=False, pack=1)
    else:
        gl.store(ptrs, values)


@gluon.jit
def _split_part(src, ws, h, r, SPLITS: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr, L: gl.constexpr,
                EVERY_CTA: gl.constexpr):
    """Partial r of kv head h: src [HEADS, GROUP, D] -> ws [HEADS, SPLITS, D]."""
    offs = gl.arange(0, D, layout=L)
    v = gl.load(src + (h * GROUP + r % GROUP) * D + offs, cache_modifier=".cg")
    _store(ws + (h * SPLITS + r) * D + offs, v // 2 + r, EVERY_CTA)


@gluon.jit
def _combine_part(ws, dst, h, c, SPLITS: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr, L: gl.constexpr,
                  EVERY_CTA: gl.constexpr):
    """Output c of kv head h: the mean of its SPLITS partials -> dst [HEADS, GROUP, D] (the loop unrolled: the loads
    do not wait on the sums)."""
    d = gl.arange(0, D, layout=L)
    acc = gl.load(ws + h * SPLITS * D + d, cache_modifier=".cg")
    for i in gl.static_range(1, SPLITS):
        acc = acc + gl.load(ws + (h * SPLITS + i) * D + d, cache_modifier=".cg")
    _store(dst + (h * GROUP + c) * D + d, acc // SPLITS + c, EVERY_CTA)


@gluon.jit
def _split_kernel(src, ws, EARLY: gl.constexpr, SPLITS: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    if EARLY:
        gdc_launch_dependents()
    gdc_wait()
    if not EARLY:
        gdc_launch_dependents()
    _split_part(src, ws, gl.program_id(0), gl.program_id(1), SPLITS, GROUP, D, L, False)


@gluon.jit
def _combine_kernel(ws, dst, SPLITS: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    gdc_wait()
    gdc_launch_dependents()
    _combine_part(ws, dst, gl.program_id(0), gl.program_id(1), SPLITS, GROUP, D, L, False)


@gluon.jit
def _cluster_kernel(src, ws, dst, SPLITS: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr):
    # every CTA of the cluster holds whole tensors (CGA bases all zero: replicated over the 16 CTAs)
    L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0], cga_layout=[[0], [0], [0], [0]])
    h = gl.program_id(0)  # the cluster: one kv head
    r = gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)
    gdc_wait()
    gdc_launch_dependents()
    _split_part(src, ws, h, r, SPLITS, GROUP, D, L, True)
    # every thread's stores released to the cluster before any CTA reads them
    done = gl.inline_asm_elementwise(
        "barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n\tmov.u32 $0, 0;", "=r", [],
        dtype=gl.int32, is_pure=False, pack=1)
    if r + done < GROUP:
        _combine_part(ws, dst, h, r, SPLITS, GROUP, D, L, True)


def reference(x: torch.Tensor) -> torch.Tensor:
    """One step on the host: x [HEADS, GROUP, D] int32 -> the next."""
    r = torch.arange(SPLITS, dtype=x.dtype, device=x.device)
    parts = x[:, r % GROUP] // 2 + r[None, :, None]  # [HEADS, SPLITS, D]
    c = torch.arange(GROUP, dtype=x.dtype, device=x.device)
    return (parts.sum(1, keepdim=True) // SPLITS + c[None, :, None]).to(x.dtype)


def step(kind: str, src, ws, dst) -> None:
    consts = dict(SPLITS=SPLITS, GROUP=GROUP, D=D)
    if kind == "cluster":
        _cluster_kernel[(HEADS,)](src, ws, dst, **consts, num_warps=4, num_ctas=SPLITS, launch_pdl=True)
        return
    _split_kernel[(HEADS, SPLITS)](src, ws, EARLY=kind == "two3", **consts, num_warps=4, launch_pdl=True)
    _combine_kernel[(HEADS, GROUP)](ws, dst, **consts, num_warps=4, launch_pdl=True)


def timed(kind: str) -> dict:
    bufs = [torch.zeros(HEADS, GROUP, D, dtype=torch.int32, device="cuda") for _ in range(LINKS + 1)]
    ws = [torch.zeros(HEADS, SPLITS, D, dtype=torch.int32, device="cuda") for _ in range(LINKS)]

    def run():
        for i in range(LINKS):
            step(kind, bufs[i], ws[i], bufs[i + 1])

    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    times = []
    for _ in range(25):
        bufs[0].copy_(torch.randint(0, 1 << 20, bufs[0].shape, dtype=torch.int32, device="cuda"))
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / LINKS)
    want = bufs[0]
    for _ in range(LINKS):
        want = reference(want)
    times.sort()
    return {"us_per_step": times[len(times) // 2], "min_us": times[0], "values_ok": bool(torch.equal(want, bufs[-1]))}


def main() -> None:
    out = {"device": torch.cuda.get_device_name(), "links": LINKS, "shape": [HEADS, SPLITS, GROUP, D], "runs": {}}
    for kind in ("two2", "two3", "cluster", "two3", "cluster"):
        key = kind + ("#2" if kind in out["runs"] else "")
        try:
            out["runs"][key] = timed(kind)
        except Exception as exc:  # noqa: BLE001 - a probe: record what failed and go on
            out["runs"][key] = {"error": repr(exc)[:400]}
        print(key, out["runs"][key], flush=True)
        json.dump(out, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
