"""Device probe: where a decode layer's attention chain spends its time, from %globaltimer stamps in its kernels.

The short-context decode graph's timeline (graph_timeline_h200_2026-11-30_session19.json) shows the attention split
ending about 9 us after the q/k norm + RoPE kernel, with its keys' loads not the cause (the Gluon split copying them
early still takes 7). This captures the lone row's short graph (4B shape, ctx 1k) with ops/stamps.py on, replays it,
and reports per layer (medians over layers 2-33, us): when RoPE's programs were released from their PDL wait and
ended, when the split's programs started, were released and ended (those with keys and the rest apart), and the same
for the combine. With SPLIT_DEAD_EXIT variants ("dead_exit") it repeats them with the split's programs that hold no
key ending at once.

usage: python scripts/split_stamps_probe.py OUT.json [variant ...]   (variants of scripts/ab_decode.py; default base)
"""
from __future__ import annotations

import json
import statistics
import sys

import torch

from ab_decode import VARIANTS, patched  # scripts/ on the path
from sparkdec.bench.kernels import make_engine, prefill
from sparkdec.bench.shapes import random_models
from sparkdec.engine import graphs
from sparkdec.ops import stamps

LAUNCHES = 64
PROGRAMS = {"rope": 64, "split": 4096, "combine": 64}


def med(xs):
    return round(statistics.median(xs), 2) if xs else None


def layer_anatomy(b: dict, layer: int) -> dict:
    """One layer's times (us), relative to the RoPE kernel's last program's end."""
    rope, split, comb = b["rope"][layer], b["split"][layer], b["combine"][layer]
    if not (split[:, 2] > 0).any():
        raise SystemExit("split_stamps_probe: the split kernel wrote no stamps (the Gluon split, which the short "
                         "graph up to 1280 keys runs since session 21, has none): probe a variant with the Triton "
                         "split, e.g. short_triton")
    rope = rope[rope[:, 2] > 0]
    comb = comb[comb[:, 2] > 0]
    ran = split[split[:, 2] > 0]
    live = ran[ran[:, 3] == 1]
    dead = ran[ran[:, 3] == 0]
    t = float(rope[:, 2].max())
    us = lambda v: (float(v) - t) / 1e3  # noqa: E731
    out = {"rope_first_release": us(rope[:, 1].min()), "rope_last_release": us(rope[:, 1].max()),
           "split_programs_live": int(live.shape[0]), "split_programs_dead": int(dead.shape[0]),
           "split_first_start": us(ran[:, 0].min()), "split_last_start": us(ran[:, 0].max()),
           "split_live_first_release": us(live[:, 1].min()), "split_live_last_release": us(live[:, 1].max()),
           "split_live_work_median": float((live[:, 2] - live[:, 1]).median()) / 1e3,
           "split_live_work_max": float((live[:, 2] - live[:, 1]).max()) / 1e3,
           "split_live_last_end": us(live[:, 2].max()), "split_last_end": us(ran[:, 2].max()),
           "combine_first_start": us(comb[:, 0].min()), "combine_first_release": us(comb[:, 1].min()),
           "combine_last_end": us(comb[:, 2].max())}
    if dead.shape[0]:
        out["split_dead_last_start"] = us(dead[:, 0].max())
        out["split_dead_last_end"] = us(dead[:, 2].max())
    return out


def probe(models, name: str) -> dict:
    with patched(VARIANTS[name]):
        eng = make_engine(models, 1024, spec=False)
        seq = prefill(eng, 1024, 64)
        g = eng.runner.graphs
        stamps.alloc(PROGRAMS, LAUNCHES, eng.runner.device)
        bufs = dict(stamps.BUFFERS)  # (stamps.off() below turns the launches' stamps off, not the captured graph's)
        original = graphs.capture_one

        def capture_one(forward, t, pool):  # the capture's launches take the stamp rows 0, 1, ... in order
            stamps.reset()
            return original(forward, t, pool)

        graphs.capture_one = capture_one
        try:
            short = graphs.capture_short((1,), g._forward, None)
        finally:
            graphs.capture_one = original
            stamps.off()
        s = seq.anchor_position
        pieces = [(seq.block_table, [seq.anchor], [s])]
        g._fill(pieces, [seq.block_table], 1)
        g.short = short
        graph = g.graph_for(pieces, 1)[0]  # the short graph whose bound holds the row's keys
        for _ in range(3):
            graph.replay()
        for v in bufs.values():
            v.zero_()
        graph.replay()
        torch.cuda.synchronize()
        host = {k: v.cpu() for k, v in bufs.items()}
        layers = [layer_anatomy(host, i) for i in range(2, 34)]
        del eng, seq, graph, short, bufs
        torch.cuda.empty_cache()
    return {key: med([lay[key] for lay in layers if key in lay]) for key in layers[0]}


def main(out: str, names: list[str]) -> None:
    models = random_models("qwen3-4b")
    res = {"device": torch.cuda.get_device_name(), "shape": "qwen3-4b", "ctx": 1024, "rows": 1,
           "graph": "the lone row's short-context graph that holds its keys (engine/graphs.SHORT_BOUNDS, SHORT_PDL)",
           "units": "us after the RoPE kernel's last program ended (medians over layers 2-33)",
           "command": "python scripts/split_stamps_probe.py OUT " + " ".join(names), "variants": {}}
    for name in names:
        res["variants"][name] = probe(models, name)
        print(name, json.dumps(res["variants"][name]), flush=True)
        with open(out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["short_triton"])  # (base: the Gluon split at 1k, which writes no stamps)
