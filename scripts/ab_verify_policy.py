"""A/B of the verify-length policy on the shipped tiny pair: full block against the batch policy (Algorithm 1), the same
8 prompts in one batch, greedy; tokens/s (median of 3 timed batches after a warm-up), mean acceptance length, and
whether both gave the same tokens. usage: python scripts/ab_verify_policy.py OUT.json [device]"""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time

import torch

from sparkdec import LLM, SamplingParams
from sparkdec.bench import provenance

PROMPTS = ["Once upon a time", "The cat", "Hello there", "In a small village", "The weather today",
           "My favourite food", "A long road", "The king said"]


def main() -> None:
    out = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else None
    params = SamplingParams(max_tokens=64, ignore_eos=True)
    runs, tokens = {}, {}
    for policy in ("full", "batch"):
        llm = LLM(verify_policy=policy, spec_bypass=False, max_num_seqs=8, device=device, threads=2 if device in (None, "cpu") else None)
        llm.generate(PROMPTS[:2], SamplingParams(max_tokens=8))
        times = []
        for _ in range(3):
            t = time.perf_counter()
            outs = llm.generate(PROMPTS, params)
            times.append(time.perf_counter() - t)
        tokens[policy] = [o.token_ids for o in outs]
        costs = llm.engine.rounds.step_costs
        runs[policy] = {"tokens_per_s": sum(map(len, tokens[policy])) / statistics.median(times), "seconds": times,
                        "mean_acceptance_length": statistics.mean(o.stats["mean_acceptance_length"] for o in outs),
                        "profile_ms": dict(zip(costs.counts, costs.ms)) if costs else None}
        print(policy, {k: v for k, v in runs[policy].items() if k != "profile_ms"})
    commit = provenance.commit()
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'x86_64'})",
              "date": time.strftime("%Y-%m-%d"), "commit": commit, "command": " ".join(["python"] + sys.argv),
              "prompts": len(PROMPTS), "max_tokens": 64, "runs": runs, "same_tokens": tokens["full"] == tokens["batch"]}
    json.dump(result, open(out, "w"), indent=1)
    print("same tokens", result["same_tokens"])


if __name__ == "__main__":
    main()
