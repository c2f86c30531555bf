"""Device A/B on the shipped tiny pair: plain greedy decoding one step ahead (engine/lookahead.py) against the ordinary
round, in one process, interleaved, median of REPS runs over the prompts of tiny_pair_gpu.py; tokens compared.
usage: python scripts/ab_lookahead.py OUT.json"""
from __future__ import annotations

import json
import statistics
import sys

import torch

from sparkdec import LLM, SamplingParams
from tiny_pair_gpu import PROMPTS, timed

REPS = 5


def main(out_path: str) -> None:
    llms = {"lookahead": LLM(speculative=False, device="cuda", dtype="bfloat16", max_num_seqs=8),
            "ordinary": LLM(speculative=False, device="cuda", dtype="bfloat16", max_num_seqs=8, lookahead=False)}
    params = SamplingParams(max_tokens=256, ignore_eos=True)
    runs = {k: [] for k in llms}
    tokens = {}
    for rep in range(REPS + 1):  # the first pass warms up and is not counted
        for name, llm in llms.items():
            total_t, total_n = 0.0, 0
            for i, p in enumerate(PROMPTS):
                out, t = timed(llm, p, params)
                total_t, total_n = total_t + t, total_n + len(out.token_ids)
                tokens[(name, i)] = out.token_ids
            if rep:
                runs[name].append(total_n / total_t)
    res = {"device": torch.cuda.get_device_name(), "reps": REPS, "mode": "plain greedy, batch 1, 256 tokens",
           "tokens_per_s_median": {k: statistics.median(v) for k, v in runs.items()}, "tokens_per_s_runs": runs,
           "differing_tokens": sum(a != b for i in range(len(PROMPTS))
                                   for a, b in zip(tokens[("lookahead", i)], tokens[("ordinary", i)]))}
    print(json.dumps(res))
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
