"""Device debugging: capture the pieces of the greedy propose (Qwen3-4B shape) one by one; report what breaks."""
from __future__ import annotations

import traceback

import torch

from sparkdec.bench.shapes import random_models
from sparkdec.engine.context import ForwardContext
from sparkdec.engine.llm_engine import Engine, EngineConfig

models = random_models("qwen3-4b")
eng = Engine(EngineConfig(device="cuda", max_model_len=2048, kv_cache_tokens=8192, max_num_seqs=4, cuda_graphs=False),
             models=models)
r = eng.runner
r.fuse_weights()
g, b, dev = 7, 1, "cuda"
ctx = ForwardContext(positions=torch.arange(100, 107, device=dev), slot_mapping=torch.arange(100, 107, device=dev),
                     block_tables=torch.arange(128, device=dev).view(1, -1), page_size=16,
                     row_seq=torch.zeros(7, dtype=torch.int32, device=dev),
                     row_kv_len=torch.full((7,), 107, dtype=torch.int32, device=dev), max_kv_len=2048)
anchors = torch.tensor([5], device=dev)
d = r.drafter
h = None


def block():
    ids = torch.full((b, g), 151669, dtype=torch.long, device=dev)
    ids[:, 0] = anchors
    return d.block_hidden(ids.view(-1), ctx, r.draft_kv.layers)


h = block()
pieces = {
    "block_hidden": block,
    "base_logits": lambda: d.base_logits(h),
    "markov_w1": lambda: d.markov_head.markov_w1(anchors),
    "markov_bias": lambda: d.markov_head.bias(d.markov_head.markov_w1(anchors), h[:1], None),
    "confidence": lambda: d.confidence_head(torch.cat([h[:1], d.markov_head.markov_w1(anchors)], -1)),
    "chain": lambda: d.markov_chain(h.view(1, 7, -1), anchors, lambda z, k: z.argmax(-1)),
}
for name, fn in pieces.items():
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        torch.cuda.synchronize()
        print(name, "captures OK")
    except Exception as exc:
        print(name, "FAILS:", "".join(traceback.format_exception_only(exc))[:600])
        torch.cuda.synchronize()
        break

# The whole ProposeGraphs path, one tier at a time, with the full error.
from sparkdec.engine import graphs as graphs_mod

for tiers in [(1, 2, 4)]:
    graphs_mod.PROPOSE_TIERS = tiers
    try:
        pg = graphs_mod.ProposeGraphs(r, 4, r.max_positions, r.trash_page)
        pg.capture()
        out = pg.run([list(range(16))], [5], [100], pg.tier_for(1)) if 1 in tiers else None
        torch.cuda.synchronize()
        print("ProposeGraphs", tiers, "OK")
    except Exception as exc:
        print("ProposeGraphs", tiers, "FAILS:")
        traceback.print_exc()
        break

graphs_mod.PROPOSE_TIERS = (1, 2, 4, 8, 16, 32, 64)
from sparkdec.bench.kernels import make_engine

try:
    make_engine(models, 1024, spec=True)
    print("full engine OK")
except Exception:
    traceback.print_exc()
