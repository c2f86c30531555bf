"""Profile one verify forward (eager, 16 rows) and one propose of the Qwen3-4B shape: top CUDA kernels."""
from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from sparkdec.bench.kernels import make_engine, prefill, wall
from sparkdec.bench.shapes import random_models

models = random_models("qwen3-4b")
eng = make_engine(models, 1024, spec=True)
seq = prefill(eng, 1024, 64)
s = seq.anchor_position
pieces = [(seq.block_table, [seq.anchor] * 8, list(range(s, s + 8)))]
g = eng.runner.graphs
tier = g.tier_for(8, 1)
g._fill(pieces, [seq.block_table])
graph = g.graphs[tier][0]
ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
for _ in range(5):
    graph.replay()
ev[0].record()
for _ in range(20):
    graph.replay()
ev[1].record()
torch.cuda.synchronize()
print(f"graph replay only (device): {ev[0].elapsed_time(ev[1]) / 20:.3f} ms")
print(f"verify wall incl. host: {wall(lambda: eng.runner.verify(pieces, list(range(8)))) * 1e3:.3f} ms")
print(f"fill only (host): {wall(lambda: g._fill(pieces, [seq.block_table])) * 1e3:.3f} ms")
eng.runner.graphs = eng.runner.propose_graphs = None  # eager: kernels show one by one
one = [(seq.block_table, [seq.anchor], [s])]
for name, fn in [("decode eager (1 row)", lambda: eng.runner.verify(one, [0])),
                 ("verify eager", lambda: eng.runner.verify(pieces, list(range(8)))),
                 ("propose eager", lambda: eng.runner.propose([seq.block_table], [seq.anchor], [s], lambda z, k: z.argmax(-1),
                                                       greedy=True)[0].tolist())]:
    for _ in range(3):
        fn()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn()
        torch.cuda.synchronize()
    print(f"== {name}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))
