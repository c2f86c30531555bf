"""Device: wall time of one sampled token (sampling.sample_token) on a Qwen3-sized vocabulary row, per setting, with
the torch path and with the fused kernel, and of its parts. usage: python scripts/sampler_profile.py OUT.json"""
from __future__ import annotations

import json
import sys

import torch

from sparkdec import sampling
from sparkdec.bench.kernels import wall
from sparkdec.sampling import SamplingParams, processed_probs, sample_from, sample_token

SETTINGS = {"greedy": dict(temperature=0.0), "t0.8": dict(temperature=0.8), "t0.8_topk50": dict(temperature=0.8, top_k=50),
            "t0.8_topp0.95": dict(temperature=0.8, top_p=0.95),
            "t0.7_topk20_topp0.8": dict(temperature=0.7, top_k=20, top_p=0.8)}


def main(out: str) -> None:
    torch.manual_seed(0)
    logits = torch.randn(151936, device="cuda") * 4
    res = {"device": torch.cuda.get_device_name(), "vocab": logits.numel(), "ms": {}}
    for fused in (False, True):
        sampling.FUSED_SAMPLER = fused
        for name, kw in SETTINGS.items():
            p = SamplingParams(max_tokens=1, **kw)
            pos = iter(range(10 ** 6))
            ms = wall(lambda: sample_token(logits, p, 7, next(pos))) * 1e3
            res["ms"][f"{'fused' if fused else 'torch'}:{name}"] = ms
            print(f"{'fused' if fused else 'torch'} {name}: {ms:.3f} ms", flush=True)
    sampling.FUSED_SAMPLER = False
    p = SamplingParams(max_tokens=1, temperature=0.8, top_p=0.95)
    rows = torch.randn(8, logits.numel(), device="cuda") * 4  # a speculative round's verify rows, in one batch
    res["ms"]["rows8:t0.8_topp0.95"] = wall(lambda: sampling.sample_rows(rows, p, 7, 100).tolist()) * 1e3
    res["ms"]["rows1:t0.8_topp0.95"] = wall(lambda: sampling.sample_rows(rows[:1], p, 7, 100).tolist()) * 1e3
    res["ms"]["part:processed_probs_topp"] = wall(lambda: processed_probs(logits, p).sum().item()) * 1e3
    probs = processed_probs(logits, p)
    res["ms"]["part:sample_from"] = wall(lambda: sample_from(probs, 7, 3)) * 1e3
    print(res["ms"], flush=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
