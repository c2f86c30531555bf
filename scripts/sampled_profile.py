"""Device: where a sampled token's time goes on the Qwen3-4B shape at ctx 1k (plain decode and speculative rounds,
T 0.8 / top-p 0.95): wall ms per token against greedy, and the CUDA kernels of a few steps by total device time,
with the torch sampler and with the fused one. usage: python scripts/sampled_profile.py OUT.json"""
from __future__ import annotations

import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from sparkdec import sampling
from sparkdec.bench.kernels import SAMPLED, decode_ms, make_engine, prefill
from sparkdec.bench.shapes import random_models

CTX = 1024


def kernels(engine, seq, steps: int) -> dict:
    """The device kernels of `steps` engine steps: name -> (calls, total us), the 25 largest, and the span."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            engine.step()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.key_averages():
        if e.device_time_total > 0 and e.device_type.name == "CUDA":
            rows[e.key[:70]] = (e.count, round(e.device_time_total, 1))
    top = dict(sorted(rows.items(), key=lambda kv: -kv[1][1])[:25])
    return {"steps": steps, "device_us_total": round(sum(v[1] for v in rows.values()), 1), "top": top}


def main(out: str) -> None:
    models = random_models("qwen3-4b")
    res = {"device": torch.cuda.get_device_name(), "ctx": CTX, "sampling": SAMPLED, "runs": {}}
    for fused in (False, True):
        sampling.FUSED_SAMPLER = fused
        for spec in (False, True):
            eng = make_engine(models, CTX, spec=spec)
            r = {}
            for name, kw in (("greedy", None), ("sampled", SAMPLED)):
                seq = prefill(eng, CTX, 400, seed=3, sampling=kw)
                decode_ms(eng, seq, 8)  # untimed: kernels of this path compile on first use
                r[f"{name}_ms_per_token"] = decode_ms(eng, seq, 48)
                r[f"{name}_kernels"] = kernels(eng, seq, 8)
                eng.abort(seq.request_id)
            key = f"{'spec' if spec else 'plain'}_{'fused' if fused else 'torch'}"
            res["runs"][key] = r
            print(key, {k: round(v, 3) for k, v in r.items() if k.endswith("token")}, flush=True)
            for k in ("greedy_kernels", "sampled_kernels"):
                print("  ", k, r[k]["device_us_total"], list(r[k]["top"].items())[:12], flush=True)
            del eng
            torch.cuda.empty_cache()
            with open(out, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
