"""Device: profile one 1024-token prefill of the Qwen3-4B shape (second prompt, kernels compiled): top CUDA kernels."""
from __future__ import annotations

import time

import torch
from torch.profiler import ProfilerActivity, profile

from sparkdec.bench.kernels import make_engine, prefill
from sparkdec.bench.shapes import random_models

eng = make_engine(random_models("qwen3-4b"), 1024, spec=False)
prefill(eng, 1024, 1)
torch.cuda.synchronize()
t = time.perf_counter()
prefill(eng, 1024, 1, seed=1)
torch.cuda.synchronize()
print(f"prefill wall {1e3 * (time.perf_counter() - t):.1f} ms")
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    prefill(eng, 1024, 1, seed=2)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=60))
