"""Device: the kernel timeline inside CUDA graph replays (Qwen3-4B shape, ctx 1k): decode (1 row), verify (8 rows) and
the propose. Per kernel name: count, time inside the graph; and the gaps between consecutive kernels (idle device
time: launch, drain and ramp at the boundaries). usage: python scripts/graph_timeline.py OUT.json
TIMELINE_CTX=8192 sets the context; TIMELINE_VARIANTS=base,rope3_gluon_last_s2 times each of scripts/ab_decode.py's
variants in turn (the results under their names; default: base only, at the top level as before)."""
from __future__ import annotations

import json
import os
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from sparkdec.bench.kernels import make_engine, prefill
from sparkdec.bench.shapes import random_models


def kernels_of(fn, reps: int = 3) -> list[tuple[str, float, float]]:
    """(name, start us, duration us) of the CUDA kernels of the last of `reps` profiled calls of fn."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
            torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA" and "Memcpy" not in e.name
                     and "Memset" not in e.name), key=lambda e: e.time_range.start)
    # the last call: the kernels after the last gap of more than 30 us (a host synchronize separates the calls)
    cut = max([i for i in range(1, len(events)) if events[i].time_range.start - events[i - 1].time_range.end > 30]
              or [0])
    return [(e.name, e.time_range.start, e.time_range.end - e.time_range.start) for e in events[cut:]]


def exclusive(kernels: list[tuple[str, float, float]]) -> list[float]:
    """Per kernel, how far it pushed the latest end so far (these add up to the replay's span)."""
    done = kernels[0][1]  # the latest end so far
    out = []
    for _, start, dur in kernels:
        out.append(max(0.0, start + dur - max(start, done)))
        done = max(done, start + dur)
    return out


def summarize(kernels: list[tuple[str, float, float]]) -> dict:
    per = defaultdict(lambda: [0, 0.0, 0.0])
    gaps = []
    for i, ((name, start, dur), excl) in enumerate(zip(kernels, exclusive(kernels))):
        per[name[:60]][0] += 1
        per[name[:60]][1] += dur
        per[name[:60]][2] += excl
        if i:
            gaps.append(start - (kernels[i - 1][1] + kernels[i - 1][2]))
    span = kernels[-1][1] + kernels[-1][2] - kernels[0][1]
    return {"kernels": len(kernels), "span_us": span, "busy_us": sum(d for _, _, d in kernels),
            "idle_gaps_us": sum(g for g in gaps if g > 0), "overlap_us": -sum(g for g in gaps if g < 0),
            "median_gap_us": sorted(gaps)[len(gaps) // 2] if gaps else 0.0,
            "per_kernel": {k: {"count": c, "total_us": t, "mean_us": t / c, "exclusive_us": x, "exclusive_mean_us": x / c}
                           for k, (c, t, x) in sorted(per.items(), key=lambda kv: -kv[1][1])}}


def sequence(kernels: list[tuple[str, float, float]], first: int, count: int) -> list[dict]:
    """Kernels first .. first + count - 1 in order: name, start (us from the first), duration, exclusive."""
    excl = exclusive(kernels)
    return [{"name": name[:40], "start_us": round(start - kernels[first][1], 2), "dur_us": round(dur, 2),
             "exclusive_us": round(excl[i], 2)}
            for i, (name, start, dur) in enumerate(kernels) if first <= i < first + count]


def timeline(models, ctx: int) -> dict:
    """The decode, 8-row verify and propose graphs' kernel timelines of a fresh engine at context ctx."""
    eng = make_engine(models, ctx, spec=True)
    seq = prefill(eng, ctx, 64)
    s = seq.anchor_position
    g = eng.runner.graphs
    res = {"device": torch.cuda.get_device_name(), "shape": "qwen3-4b", "ctx": ctx, "window": eng.max_model_len}
    for name, rows in (("decode_1_row", 1), ("verify_8_rows", 8)):
        pieces = [(seq.block_table, [seq.anchor] * rows, list(range(s, s + rows)))]
        tier = g.tier_for(rows, 1)
        g._fill(pieces, [seq.block_table], tier)
        ks = kernels_of(g.graph_for(pieces, tier)[0].replay)
        res[name] = summarize(ks)
        res[name]["layer_sequence"] = sequence(ks, len(ks) // 2, 24)  # a stretch mid-forward: ~2.5 layers
    ks = kernels_of(lambda: eng.runner.propose([seq.block_table], [seq.anchor], [s], lambda z, k: z.argmax(-1),
                                               greedy=True))
    res["propose"] = summarize(ks)
    res["propose"]["layer_sequence"] = sequence(ks, 0, len(ks))
    for name in ("decode_1_row", "verify_8_rows", "propose"):
        r = res[name]
        print(f"{name}: {r['kernels']} kernels, span {r['span_us']:.0f} us, busy {r['busy_us']:.0f}, idle gaps "
              f"{r['idle_gaps_us']:.0f}, overlap {r['overlap_us']:.0f}, median gap {r['median_gap_us']:.2f} us")
        for k, v in list(r["per_kernel"].items())[:9]:
            print(f"   {k:<60} {v['count']:>4} x {v['mean_us']:7.2f} us = {v['total_us']:8.1f}; exclusive "
                  f"{v['exclusive_us']:8.1f}")
        for row in r["layer_sequence"]:
            print(f"      {row['name']:<40} start {row['start_us']:8.2f} dur {row['dur_us']:6.2f} "
                  f"excl {row['exclusive_us']:6.2f}")
    del eng, seq
    torch.cuda.empty_cache()
    return res


def main(out_path: str) -> None:
    models = random_models("qwen3-4b")
    ctx = int(os.environ.get("TIMELINE_CTX", "1024"))
    names = os.environ.get("TIMELINE_VARIANTS")
    if not names:
        res = timeline(models, ctx)
    else:
        from ab_decode import VARIANTS, patched  # scripts/ on the path
        res = {}
        for name in names.split(","):
            with patched(VARIANTS[name]):
                print(f"== {name}", flush=True)
                res[name] = timeline(models, ctx)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
