"""Device: where plain decode's wall time goes beyond its graph replay (Qwen3-4B shape, ctx 1k, batch 1). Profiles
engine.step() (the lookahead path) and reports, between consecutive graph replays, the device's idle time and the
copies and kernels it ran outside the graph. usage: python scripts/decode_gaps.py OUT.json"""
from __future__ import annotations

import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from sparkdec.bench.kernels import make_engine, prefill
from sparkdec.bench.shapes import random_models

STEPS = 24


def main() -> None:
    models = random_models("qwen3-4b")
    eng = make_engine(models, 1024, spec=False)
    seq = prefill(eng, 1024, 400)
    for _ in range(16):
        eng.step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(STEPS):
        eng.step()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t) / STEPS * 1e3
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            eng.step()
        torch.cuda.synchronize()
    dev = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    # a graph replay: a run of kernels with no gap > 3 us and more than 100 kernels; what lies between runs is outside
    runs, cur = [], [dev[0]]
    for e in dev[1:]:
        if e.time_range.start - cur[-1].time_range.end > 3 or "Memcpy" in e.name or "Memset" in e.name:
            runs.append(cur)
            cur = []
        cur.append(e)
    runs.append(cur)
    graphs = [r for r in runs if len(r) > 100]
    between = []
    for a, b in zip(graphs, graphs[1:]):
        end, start = a[-1].time_range.end, b[0].time_range.start
        ops = [(e.name[:50], round(e.time_range.end - e.time_range.start, 2)) for e in dev
               if end <= e.time_range.start < start]
        between.append({"gap_us": round(start - end, 2), "ops": ops})
    spans = [r[-1].time_range.end - r[0].time_range.start for r in graphs]
    cpu_ops = {}
    for e in prof.key_averages():
        if e.cpu_time_total > 0 and e.count >= STEPS:
            cpu_ops[e.key[:60]] = round(e.cpu_time_total / STEPS, 1)
    out = {"shape": "qwen3-4b", "ctx": 1024, "steps": STEPS, "decode_wall_ms": wall_ms,
           "graph_span_ms_median": sorted(spans)[len(spans) // 2] / 1e3 if spans else None,
           "between_graphs_us_median": sorted(b["gap_us"] for b in between)[len(between) // 2] if between else None,
           "between_graphs": between[:6],
           "host_us_per_step_by_op": dict(sorted(cpu_ops.items(), key=lambda kv: -kv[1])[:25])}
    print(json.dumps({k: v for k, v in out.items() if k != "host_us_per_step_by_op"}, indent=1)[:3000])
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
