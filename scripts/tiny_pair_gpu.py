"""Device run on the shipped tiny pair: bf16 speculative vs plain greedy (bit-identical?), tokens/s, AL."""
from __future__ import annotations

import json
import sys
import time

import torch

from sparkdec import LLM, SamplingParams

PROMPTS = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    ",
           "class Config:\n    def __init__(self, path):\n        ", "The standard library provides",
           "    for key, value in sorted(items.items()):\n", "This module defines functions for"]


def timed(llm, prompt, params):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = llm.generate([prompt], params)[0]
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def main(out_path: str) -> None:
    params = SamplingParams(max_tokens=256, ignore_eos=True)
    plain = LLM(speculative=False, device="cuda", dtype="bfloat16", max_num_seqs=8)
    spec = LLM(device="cuda", dtype="bfloat16", max_num_seqs=8)
    for llm in (plain, spec):
        llm.generate([PROMPTS[0]], SamplingParams(max_tokens=16, ignore_eos=True))  # warm-up
    rows, diff, tot = [], 0, 0
    for p in PROMPTS:
        a, ta = timed(plain, p, params)
        b, tb = timed(spec, p, params)
        d = sum(x != y for x, y in zip(a.token_ids, b.token_ids))
        diff, tot = diff + d, tot + len(a.token_ids)
        rows.append({"prompt": p[:30], "plain_tok_s": 256 / ta, "spec_tok_s": 256 / tb, "speedup": ta / tb,
                     "al": b.stats["mean_acceptance_length"], "differing_tokens": d})
        print(rows[-1], flush=True)
    batch_a = plain.generate(PROMPTS, params)
    batch_b = spec.generate(PROMPTS, params)
    bdiff = sum(x != y for a, b in zip(batch_a, batch_b) for x, y in zip(a.token_ids, b.token_ids))
    res = {"device": torch.cuda.get_device_name(), "dtype": "bfloat16", "prompts": rows,
           "differing_tokens_batch1": diff, "tokens_compared": tot, "differing_tokens_batch6": bdiff,
           "mean_speedup": sum(r["speedup"] for r in rows) / len(rows), "mean_al": sum(r["al"] for r in rows) / len(rows)}
    print(json.dumps(res))
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
