"""Device: profile one prefill of the Qwen3-4B shape (second prompt, kernels compiled): top CUDA kernels.
usage: python scripts/profile_prefill.py [prompt tokens, default 1024]"""
from __future__ import annotations

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from sparkdec.bench.kernels import make_engine, prefill
from sparkdec.bench.shapes import random_models

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
eng = make_engine(random_models("qwen3-4b"), n, spec=False)
prefill(eng, n, 1)
torch.cuda.synchronize()
t = time.perf_counter()
prefill(eng, n, 1, seed=1)
torch.cuda.synchronize()
print(f"prefill wall {1e3 * (time.perf_counter() - t):.1f} ms")
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    prefill(eng, n, 1, seed=2)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=60))
