"""Device run on the shipped tiny pair: bf16 speculative vs plain, greedy and seeded sampled (identical tokens?),
tokens/s, AL."""
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


def compare(plain, spec, params_for) -> dict:
    """Per prompt: plain vs speculative tokens/s and differing tokens at batch 1, then all prompts as one batch."""
    rows, diff, tot = [], 0, 0
    for i, p in enumerate(PROMPTS):
        a, ta = timed(plain, p, params_for(i))
        b, tb = timed(spec, p, params_for(i))
        d = sum(x != y for x, y in zip(a.token_ids, b.token_ids)) + abs(len(a.token_ids) - len(b.token_ids))
        diff, tot = diff + d, tot + len(a.token_ids)
        rows.append({"prompt": p[:30], "plain_tok_s": len(a.token_ids) / ta, "spec_tok_s": len(b.token_ids) / tb,
                     "speedup": ta / tb, "al": b.stats["mean_acceptance_length"], "differing_tokens": d})
        print(rows[-1], flush=True)
    batch = [params_for(i) for i in range(len(PROMPTS))]
    batch_a, batch_b = plain.generate(PROMPTS, batch), spec.generate(PROMPTS, batch)
    bdiff = sum(x != y for a, b in zip(batch_a, batch_b) for x, y in zip(a.token_ids, b.token_ids))
    return {"prompts": rows, "differing_tokens_batch1": diff, "tokens_compared": tot,
            "differing_tokens_batch6": bdiff, "mean_speedup": sum(r["speedup"] for r in rows) / len(rows),
            "mean_al": sum(r["al"] for r in rows) / len(rows)}


def main(out_path: str) -> None:
    plain = LLM(speculative=False, device="cuda", dtype="bfloat16", max_num_seqs=8)
    spec = LLM(device="cuda", spec_bypass=False, dtype="bfloat16", max_num_seqs=8)
    for llm in (plain, spec):
        llm.generate([PROMPTS[0]], SamplingParams(max_tokens=16, ignore_eos=True))  # warm-up
    res = {"device": torch.cuda.get_device_name(), "dtype": "bfloat16"}
    res.update(compare(plain, spec, lambda i: SamplingParams(max_tokens=256, ignore_eos=True)))
    # exact sampled match (the default accept mode): seeded sampled speculative output equals seeded plain output
    res["sampled"] = {"params": "temperature 0.8, top_p 0.95, seed 100 + prompt index", **compare(
        plain, spec, lambda i: SamplingParams(max_tokens=256, ignore_eos=True, temperature=0.8, top_p=0.95,
                                              seed=100 + i))}
    print(json.dumps(res))
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
