"""Device probe: can one persistent launch whose loader runs ahead of its dependencies stream a decode's product
chain near the bandwidth floor? (The megakernel question of docs/research/megakernel-gluon.md, timing only.)

The bytes of 36 Qwen3-4B layers' four products (qkv, o, gate_up, down; each op's K steps cut stream-K into equal
ranges per CTA) as one Gluon launch of one CTA per SM. Each CTA walks a host-built task list (build_tasks: op, weight
rows, K steps, x slice, output tile, counters): tasks of op i come before those of op i + 1 in every list.
Partitions per CTA:
- a 1-warp loader streams the weight tiles of the whole list through a STAGES-deep TMA ring; it waits only for free
  ring slots, never for activations, so the next op's weights arrive while this op's dependencies resolve;
- 4 consumer warps: they poll (acquire) the counters a task depends on (every task of the op before, or only the
  tiles its x slice reads, or per K step with PIPE), load the task's x slice, run the wgmma chain (swap-AB, 8 token
  rows, 1 live), store the tile and bump its counters (release).
Outputs are not the model's math (partial tiles overwrite each other); only the dependency chain and the bytes are
real. Against it, in the same run: the shipped separate Gluon products with PDL (scripts/product_chain_probe.py's
chain4) and the floor. usage: python scripts/stream_chain_probe.py OUT.json [variant ...] (see main)
"""
from __future__ import annotations

import json
import os
import sys

import torch
import triton

from sparkdec.bench.kernels import copy_bandwidth
from sparkdec.ops import gluon_gemv as gg

if gg.AVAILABLE:
    from triton.experimental.gluon.language.nvidia.ampere import async_copy

    from sparkdec.ops.gluon_gemv import (TensorDescriptor, fence_async_shared, gl, gluon, mbarrier, tma,
                                         warpgroup_mma, warpgroup_mma_wait)

BN, BK, MP = 64, 128, 8  # weight tile rows, K step, token rows of the wgmma (swap-AB)
REGS = 152  # registers of the second consumer warpgroup (the loader gets 40)
MAX_KSTEPS = 20  # the longest task's K steps (qkv and gate_up: 2560 / 128): the x slice buffer
# per task: op, weight row, K steps, x offset, x stride, out offset, out stride, the counter its output bumps, and the
# counters it waits for (first, count; each until its target)
FIELDS = 10
LAYERS = int(os.environ.get("STREAM_LAYERS", 36))  # (fewer: a quick debug run)
# (weight rows N, K, split-K: unused, the work is cut stream-K) of a Qwen3-4B layer's products, in order
OPS = [(6144, 2560, 1), (2560, 4096, 4), (19456, 2560, 1), (2560, 9728, 4)]

if gg.AVAILABLE:
    BN_, BK_, MP_, MAXK_ = gl.constexpr(BN), gl.constexpr(BK), gl.constexpr(MP), gl.constexpr(MAX_KSTEPS)
    FIELDS_ = gl.constexpr(FIELDS)

    @gluon.jit
    def _loader(w_desc, tasks_ptr, n_tasks, w_ring, ready, empty, STAGES: gl.constexpr):
        """Every weight tile of this CTA's tasks, in order, into the ring (waits only for free slots)."""
        base = tasks_ptr + gl.program_id(0) * n_tasks * FIELDS_
        g = 0
        for t in range(n_tasks):
            w_row = gl.load(base + t * FIELDS_ + 1)
            steps = gl.load(base + t * FIELDS_ + 2)
            for k in range(steps):
                s = g % STAGES
                mbarrier.wait(empty.index(s), ((g // STAGES) & 1) ^ 1)
                mbarrier.expect(ready.index(s), w_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(w_desc, [w_row + k * 64, 0], ready.index(s), w_ring.index(s))
                g += 1

    @gluon.jit
    def _wait_range(cnt_ptr, tgt_ptr, first, count, num_warps: gl.constexpr):
        """Spin until counters first .. first + count - 1 (count <= 128) reach their targets (acquire)."""
        cl: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        q = gl.arange(0, 32 * num_warps, layout=cl)
        live = q < count
        want = gl.load(tgt_ptr + first + q, mask=live, other=0)
        zero = gl.zeros([32 * num_warps], gl.int32, layout=cl)
        short = gl.sum((gl.atomic_add(cnt_ptr + first + q, zero, mask=live, sem="acquire") < want).to(gl.int32), 0)
        while short > 0:
            short = gl.sum((gl.atomic_add(cnt_ptr + first + q, zero, mask=live, sem="acquire") < want).to(gl.int32),
                           0)

    @gluon.jit
    def _ready_steps(cnt_ptr, tgt_ptr, first, done, steps, num_warps: gl.constexpr):
        """PIPE: spin until K step `done` of the task can run -> how many steps from it on can (their two x tiles of
        the op before are complete; counters first + 2 k, first + 2 k + 1), at least 1."""
        cl: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        q = gl.arange(0, 32 * num_warps, layout=cl)
        live = q < 2 * (steps - done)
        at = first + 2 * done + q
        want = gl.load(tgt_ptr + at, mask=live, other=0)
        zero = gl.zeros([32 * num_warps], gl.int32, layout=cl)
        bad = live & (gl.atomic_add(cnt_ptr + at, zero, mask=live, sem="acquire") < want)
        n = gl.minimum(gl.min(gl.where(bad, q, 1 << 20), 0) // 2, steps - done)
        while n == 0:
            bad = live & (gl.atomic_add(cnt_ptr + at, zero, mask=live, sem="acquire") < want)
            n = gl.minimum(gl.min(gl.where(bad, q, 1 << 20), 0) // 2, steps - done)
        return n

    @gluon.jit
    def _consumer(act_ptr, tasks_ptr, cnt_ptr, tgt_ptr, n_tasks, M, w_ring, x_bufs, ready, empty, STAGES: gl.constexpr,
                  LAG: gl.constexpr, PIPE: gl.constexpr, NC: gl.constexpr, PARITY: gl.constexpr, NW: gl.constexpr):
        """Tasks t with t % NC == PARITY of this CTA's list (NC consumer warpgroups take tasks in turn)."""
        base = tasks_ptr + gl.program_id(0) * n_tasks * FIELDS_
        xl: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [NW, 1], [1, 0])
        rows = gl.arange(0, MP_, layout=gl.SliceLayout(1, xl))
        cols = gl.arange(0, BK_, layout=gl.SliceLayout(0, xl))
        acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                        instr_shape=[16, MP_, 16])
        el: gl.constexpr = gl.BlockedLayout([2, 1], [4, 8], [NW, 1], [1, 0])
        on = gl.arange(0, BN_, layout=gl.SliceLayout(1, el))
        om = gl.arange(0, MP_, layout=gl.SliceLayout(0, el))
        g = 0
        last_op = -1
        last_x = -1
        last_steps = 0
        w_first = 0
        w_count = 0
        for t in range(n_tasks):
            rec = base + t * FIELDS_
            steps = gl.load(rec + 2)
            if t % NC != PARITY:  # the other consumer's task: its tiles still pass through the ring
                g += steps
            else:
                op = gl.load(rec)
                x_off = gl.multiple_of(gl.load(rec + 3), 64)  # (tiles start at multiples of 64 elements)
                x_stride = gl.multiple_of(gl.load(rec + 4), 64)
                out_off = gl.load(rec + 5)
                out_stride = gl.load(rec + 6)
                out_cnt = gl.load(rec + 7)
                first = gl.load(rec + 8)
                count = gl.load(rec + 9)
                new_op = op != last_op
                if PIPE:  # run the K steps whose x is ready, in K order, as they become ready
                    acc = gl.zeros([BN_, MP_], gl.float32, layout=acc_l)
                    done = 0
                    while done < steps:
                        avail = steps - done
                        if count > 0:
                            avail = _ready_steps(cnt_ptr, tgt_ptr, first, done, steps, NW)
                        gl.thread_barrier()
                        for k in gl.static_range(MAXK_):
                            ptrs = act_ptr + x_off + rows[:, None] * x_stride + (k * BK_ + cols)[None, :]
                            live = ((rows < M) & (k >= done) & (k < done + avail))[:, None]
                            async_copy.async_copy_global_to_shared(x_bufs.index(k), ptrs, mask=live, cache_modifier=".cg")
                        async_copy.commit_group()
                        async_copy.wait_group(0)
                        fence_async_shared()
                        gl.thread_barrier()
                        for k in range(done, done + avail):
                            s = g % STAGES
                            mbarrier.wait(ready.index(s), (g // STAGES) & 1)
                            acc = warpgroup_mma(w_ring.index(s), x_bufs.index(k).permute((1, 0)), acc, is_async=True)
                            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                            mbarrier.arrive(empty.index(s), count=1)
                            g += 1
                        done += avail
                    last_op = op
                else:
                    # wait unless what this task reads was already waited for (same op, inside the last range)
                    if (count > 0) & (new_op | (first < w_first) | (first + count > w_first + w_count)):
                        _wait_range(cnt_ptr, tgt_ptr, first, count, NW)
                        w_first = first
                        w_count = count
                    last_op = op
                    gl.thread_barrier()  # every thread after the acquire, and the previous task's MMAs done with x_bufs
                    # the x slice: every tile's cp.async issued at once, one wait (rows >= M read nothing and stay zero); the
                    # same slice as the last task's (op unchanged) is still there
                    fresh = (x_off != last_x) | (steps > last_steps) | new_op
                    last_x = gl.where(fresh, x_off, last_x)
                    last_steps = gl.where(fresh, steps, last_steps)
                    for k in gl.static_range(MAXK_):
                        ptrs = act_ptr + x_off + rows[:, None] * x_stride + (k * BK_ + cols)[None, :]
                        live = ((rows < M) & (k < steps) & fresh)[:, None]
                        async_copy.async_copy_global_to_shared(x_bufs.index(k), ptrs, mask=live, cache_modifier=".cg")
                    async_copy.commit_group()
                    async_copy.wait_group(0)
                    fence_async_shared()
                    gl.thread_barrier()
                    acc = gl.zeros([BN_, MP_], gl.float32, layout=acc_l)
                    for k in range(steps):
                        s = g % STAGES
                        mbarrier.wait(ready.index(s), (g // STAGES) & 1)
                        acc = warpgroup_mma(w_ring.index(s), x_bufs.index(k).permute((1, 0)), acc, is_async=True)
                        if LAG:  # keep one wgmma in flight: the previous step's is done, free its stage
                            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
                            mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES), count=1, pred=k > 0)
                        else:
                            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                            mbarrier.arrive(empty.index(s), count=1)
                        g += 1
                    if LAG:
                        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                        mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES), count=1, pred=steps > 0)
                y = gl.convert_layout(acc, el).to(gl.bfloat16)  # [BN_, MP_]
                gl.store(act_ptr + out_off + om[None, :] * out_stride + on[:, None], y)
                gl.thread_barrier()  # every thread's stores before the release
                gl.atomic_add(cnt_ptr + op, 1, sem="release")  # (op counters: the end-of-run check)
                gl.atomic_add(cnt_ptr + out_cnt, 1, sem="release")

    @gluon.jit
    def _stream_kernel(w_desc, act_ptr, tasks_ptr, cnt_ptr, tgt_ptr, n_tasks, M, STAGES: gl.constexpr, LAG: gl.constexpr,
                       PIPE: gl.constexpr, NC: gl.constexpr, REGS: gl.constexpr, num_warps: gl.constexpr):
        w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN_, BK_], w_desc.layout)
        xsl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([MP_, BK_], gl.bfloat16)
        x_bufs = gl.allocate_shared_memory(gl.bfloat16, [MAXK_, MP_, BK_], xsl)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(ready.index(s), count=1)
            mbarrier.init(empty.index(s), count=1)
        if NC == 1:
            gl.warp_specialize([(_consumer, (act_ptr, tasks_ptr, cnt_ptr, tgt_ptr, n_tasks, M, w_ring, x_bufs, ready,
                                             empty, STAGES, LAG, PIPE, 1, 0, num_warps)),
                                (_loader, (w_desc, tasks_ptr, n_tasks, w_ring, ready, empty, STAGES))], [1], [48])
        else:  # a second consumer warpgroup with its own x buffers takes every other task
            x_bufs2 = gl.allocate_shared_memory(gl.bfloat16, [MAXK_, MP_, BK_], xsl)
            gl.warp_specialize([(_consumer, (act_ptr, tasks_ptr, cnt_ptr, tgt_ptr, n_tasks, M, w_ring, x_bufs, ready,
                                             empty, STAGES, LAG, PIPE, 2, 0, num_warps)),
                                (_consumer, (act_ptr, tasks_ptr, cnt_ptr, tgt_ptr, n_tasks, M, w_ring, x_bufs2, ready,
                                             empty, STAGES, LAG, PIPE, 2, 1, 4)),
                                (_loader, (w_desc, tasks_ptr, n_tasks, w_ring, ready, empty, STAGES))], [4, 1],
                               [REGS, 40])


def build_tasks(ctas: int, fine: bool, waves: int = 1, layers: int = LAYERS):
    """-> (tasks int32 [ctas, n, FIELDS], counter targets int32, weight rows of [., BK] tiles, activation elements,
    ops). Each op's K steps (tile after tile) are cut into ctas equal ranges (stream-K): CTA c takes range c, as one
    task per tile piece of at most MAX_KSTEPS steps, so every CTA streams the same bytes of every op. Counters: one
    per op (its tasks), then one per output tile (the pieces that write it). A task waits for every task of the op
    before (fine False: an all-to-all step, as a norm between products needs) or only for the tiles of the op before
    that its x slice reads (fine True). waves > 1: each op's tiles in that many consecutive groups, one after the other
    (every CTA takes its range of group 0, then of group 1, ...), so the first output tiles, the next op's first K
    steps, are done early. Lists are padded with no-op tasks (0 K steps, no wait)."""
    n_ops = layers * len(OPS)
    tile_base, nb = [], n_ops
    for _ in range(layers):
        for n, _k, _s in OPS:
            tile_base.append(nb)
            nb += n // BN
    targets = [0] * nb
    lists = [[] for _ in range(ctas)]
    w_row, act_off, x_off, x_stride = 0, MP * 2560, 0, 2560  # act [0, MP * 2560): the first op's x
    for op in range(n_ops):
        n, k, _split = OPS[op % len(OPS)]
        steps, tiles = k // BK, n // BN
        total = tiles * steps
        groups = min(waves, tiles)
        for c, wave in ((c, w) for w in range(groups) for c in range(ctas)):
            t0, t1 = wave * tiles // groups, (wave + 1) * tiles // groups
            span = (t1 - t0) * steps
            lo, hi = t0 * steps + c * span // ctas, t0 * steps + (c + 1) * span // ctas
            while lo < hi:
                tile, k0 = divmod(lo, steps)
                k1 = min(steps, k0 + hi - lo, k0 + MAX_KSTEPS)  # (x_bufs holds MAX_KSTEPS steps)
                if op == 0:
                    first, count = 0, 0
                elif fine:  # the previous op's output tiles under x columns [k0 * BK, k1 * BK)
                    first, count = tile_base[op - 1] + k0 * BK // BN, (k1 - k0) * BK // BN
                else:
                    first, count = op - 1, 1
                lists[c].append([op, w_row + (tile * steps + k0) * BN, k1 - k0, x_off + k0 * BK, x_stride,
                                 act_off + tile * BN, n, tile_base[op] + tile, first, count])
                targets[op] += 1
                targets[tile_base[op] + tile] += 1
                lo += k1 - k0
        w_row += total * BN
        x_off, x_stride = act_off, n
        act_off += MP * n
    longest = max(len(lst) for lst in lists)
    for lst in lists:  # padding: no K steps, no wait; stores into a scratch tile and bumps a spare counter
        lst += [[0, 0, 0, 0, BN, act_off, BN, nb, 0, 0]] * (longest - len(lst))
    return (torch.tensor(lists, dtype=torch.int32), torch.tensor(targets + [0], dtype=torch.int32), w_row,
            act_off + MP * BN, n_ops)


def stream_ms(stages: int, bw: float, lag: bool = False, deps: str = "all", pipe: bool = False, waves: int = 1,
              consumers: int = 1) -> dict:
    """One launch streaming the 36 layers (deps: 'all', 'fine' or 'none') -> ms (median of 15) and checks."""
    dev = torch.device("cuda")
    ctas = torch.cuda.get_device_properties(dev).multi_processor_count
    tasks, targets, w_rows, act_len, ops = build_tasks(ctas, fine=deps == "fine", waves=waves)
    if deps == "none":  # no task waits: the stream alone
        tasks[:, :, 9] = 0
    w = torch.empty(w_rows, BK, dtype=torch.bfloat16, device=dev).normal_(0, 0.02)
    act = torch.zeros(act_len, dtype=torch.bfloat16, device=dev)
    act[:2560].normal_()
    tasks_d, tgt = tasks.to(dev), targets.to(dev)
    cnt = torch.zeros(targets.numel(), dtype=torch.int32, device=dev)
    desc = TensorDescriptor.from_tensor(w, [BN, BK], gl.NVMMASharedLayout.get_default_for([BN, BK], gl.bfloat16))

    def launch():
        cnt.zero_()
        _stream_kernel[(ctas,)](desc, act, tasks_d, cnt, tgt, tasks.shape[1], 1, STAGES=stages, LAG=lag,
                                PIPE=pipe, NC=consumers, REGS=REGS, num_warps=4)

    launch()
    torch.cuda.synchronize()
    done = cnt.cpu()
    times = []
    for _ in range(15):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        launch()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    ms = times[len(times) // 2]
    nbytes = w_rows * BK * 2
    res = {"stages": stages, "lag": lag, "deps": deps, "pipe": pipe, "waves": waves, "consumers": consumers, "ms": ms, "us_per_layer": ms * 1e3 / LAYERS,
           "floor_ms": nbytes / bw * 1e3, "fraction_of_floor": nbytes / bw * 1e3 / ms,
           "tasks_done_ok": bool((done[1:-1] == targets[1:-1]).all()), "finite": bool(torch.isfinite(act.float()).all())}
    del w
    torch.cuda.empty_cache()
    return res


def main() -> None:
    """argv[2:]: variants 'S_DEPS[_lag][_pipe][_wW][_c2]' (S: ring stages; DEPS: all, fine or none; pipe: K steps run
    as their x tiles complete (fine); wW: W waves per op; c2: two consumer warpgroups taking tasks in turn: it compiles
    (184 KB of shared memory at 6 stages) but failed on the H200 with an unspecified launch failure, not debugged)."""
    variants = sys.argv[2:] or ["6_all", "6_fine", "6_none"]
    bw = copy_bandwidth()
    out = {"device": torch.cuda.get_device_name(), "copy_bandwidth": bw, "layers": LAYERS, "runs": {}}
    for v in variants:
        st, deps = v.split("_")[:2]
        parts = v.split("_")
        waves = int(next((p[1:] for p in parts if p.startswith("w")), 1))
        out["runs"][f"stream_s{v}"] = r = stream_ms(int(st), bw, lag="lag" in parts, deps=deps, pipe="pipe" in parts,
                                                   waves=waves, consumers=2 if "c2" in parts else 1)
        print(f"stream_s{v}", {a: (round(b, 4) if isinstance(b, float) else b) for a, b in r.items()}, flush=True)
    if os.environ.get("STREAM_NO_CHAIN4") == "1":
        json.dump(out, open(sys.argv[1], "w"), indent=1)
        return
    from product_chain_probe import chain4  # the shipped separate products with PDL, same run
    ms = chain4(1, False)
    out["runs"]["chain4"] = {"ms": ms, "us_per_layer": ms * 1e3 / LAYERS}
    print("chain4", out["runs"]["chain4"], flush=True)
    json.dump(out, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
