"""Device A/B on the shipped tiny pair: the per-row sampler against the fused sampler (ops/triton_sample.py), seeded
sampled decoding, plain and speculative, in one process, variants interleaved, median of REPS runs per prompt.
usage: python scripts/ab_sampler.py OUT.json"""
from __future__ import annotations

import json
import statistics
import sys

import torch

from sparkdec import LLM, SamplingParams, sampling
from tiny_pair_gpu import PROMPTS, timed

REPS = 5


def params(i: int) -> SamplingParams:
    return SamplingParams(max_tokens=256, ignore_eos=True, temperature=0.8, top_p=0.95, seed=100 + i)


def main(out_path: str) -> None:
    llms = {"plain": LLM(speculative=False, device="cuda", dtype="bfloat16", max_num_seqs=8),
            "spec": LLM(device="cuda", spec_bypass=False, dtype="bfloat16", max_num_seqs=8)}
    times = {(v, m): [] for v in ("per_row", "fused") for m in llms}
    tokens = {}
    for rep in range(REPS + 1):  # the first pass warms both variants up (compiles) and is not counted
        for variant in ("per_row", "fused"):
            sampling.FUSED_SAMPLER = variant == "fused"
            for mode, llm in llms.items():
                total_t, total_n = 0.0, 0
                for i, p in enumerate(PROMPTS):
                    out, t = timed(llm, p, params(i))
                    total_t, total_n = total_t + t, total_n + len(out.token_ids)
                    tokens[(variant, mode, i)] = out.token_ids
                if rep:
                    times[(variant, mode)].append(total_n / total_t)
    res = {"device": torch.cuda.get_device_name(), "reps": REPS, "params": "temperature 0.8, top_p 0.95, seed 100 + i",
           "tokens_per_s_median": {f"{v}/{m}": statistics.median(x) for (v, m), x in times.items()},
           "tokens_per_s_runs": {f"{v}/{m}": x for (v, m), x in times.items()},
           "spec_vs_plain_differing": {v: sum(a != b for i in range(len(PROMPTS)) for a, b in
                                              zip(tokens[(v, "plain", i)], tokens[(v, "spec", i)]))
                                       for v in ("per_row", "fused")},
           "fused_vs_per_row_differing": sum(a != b for i in range(len(PROMPTS)) for a, b in
                                             zip(tokens[("fused", "plain", i)], tokens[("per_row", "plain", i)]))}
    print(json.dumps(res))
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
