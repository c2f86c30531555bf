"""Device: where plain decoding's time outside the graph replays goes (Qwen3-4B shape, ctx 1k, one request decoded one
step ahead, as `sparkdec bench kernels` times it). From a profile of the whole request: the step period against the
back-to-back replay, the device ops between two steps' graphs (copies, fills) with their times, and how long the
device waits for the request's first step. usage: python scripts/decode_loop_gaps.py OUT.json"""
from __future__ import annotations

import json
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from sparkdec.bench.kernels import DECODE_TOKENS, decode_replays_ms, make_engine, prefill, request_ms, sync
from sparkdec.bench.shapes import random_models

CTX = 1024


def device_events(prof) -> list[tuple[str, float, float]]:
    """(name, start us, duration us) of every device op (kernels, copies, sets), in start order."""
    ev = [e for e in prof.events() if e.device_type.name == "CUDA"]
    return sorted(((e.name, e.time_range.start, e.time_range.end - e.time_range.start) for e in ev),
                  key=lambda e: e[1])


def after_heads(events, heads: list[int], count: int = 12) -> list[list[dict]]:
    """Per step: the `count` device ops after its LM head (the argmax, the copies and fills between the graphs, the
    next graph's first kernels), their starts relative to the LM head's end."""
    out = []
    for a in heads:
        end = events[a][1] + events[a][2]
        out.append([{"name": n[:70], "start_us": round(s - end, 2), "dur_us": round(d, 2)}
                    for n, s, d in events[a + 1:a + 1 + count]])
    return out


def main(out_path: str) -> None:
    models = random_models("qwen3-4b")
    eng = make_engine(models, CTX, spec=False)
    request_ms(eng, CTX, DECODE_TOKENS, seed=1)  # warm: graphs captured, kernels compiled
    ms = request_ms(eng, CTX, DECODE_TOKENS, seed=2)
    seq = prefill(eng, CTX, 1 + DECODE_TOKENS, seed=3)
    first_position = seq.anchor_position
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("decode_loop"):
            while len(seq.output_ids) < DECODE_TOKENS:  # not to its end: the replays below need its pages
                eng.step()
            sync()
    loop = next(e for e in prof.events() if e.name == "decode_loop")
    events = device_events(prof)
    heads = [i for i, (n, s, d) in enumerate(events) if d > 100 and "gemm" in n.lower()]  # the LM head per step
    period = [events[b][1] - events[a][1] for a, b in zip(heads, heads[1:])]
    first = events[0][1] - loop.time_range.start
    replay = decode_replays_ms(eng, seq, first_position, stride=16)
    res = {"device": torch.cuda.get_device_name(), "shape": "qwen3-4b", "ctx": CTX, "request_ms_per_token": ms,
           "steps_profiled": len(heads), "step_period_median_us": statistics.median(period),
           "replay_back_to_back_us": replay * 1e3 if replay else None,
           "loop_us": loop.time_range.end - loop.time_range.start,
           "first_device_op_after_loop_start_us": first,
           "last_device_op_end_to_loop_end_us": loop.time_range.end - max(s + d for _, s, d in events),
           "boundaries": after_heads(events, heads)[5:8]}
    print(json.dumps({k: v for k, v in res.items() if k != "boundaries"}, indent=1))
    for rows in res["boundaries"]:
        print("--")
        for r in rows:
            print(f"   {r['name']:<70} +{r['start_us']:8.2f} us  {r['dur_us']:7.2f} us")
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
