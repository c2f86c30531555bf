"""Random requests (greedy / sampled, top-k / top-p / min_p, a repetition penalty, stop strings, guided) on the shipped
pair: plain decoding's tokens against speculation with the bypass on (CPU; its choices follow timings, so plain and
speculative steps mix). usage: python scripts/fuzz_equal_tokens.py SEED [KV_CACHE_TOKENS]; prints the requests that
differ (none expected). A small KV cache forces preemption."""
import random
import sys

from sparkdec import LLM, SamplingParams, Guided
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
prompts = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    ", "The standard library provides",
           "class Stack:\n", "for key, value in items:\n", "This module defines functions for", "Reply in JSON: "]
def params():
    kw = dict(max_tokens=rng.randint(5, 90))
    if rng.random() < 0.6:
        kw.update(temperature=rng.choice([0.6, 0.9, 1.2]), seed=rng.randint(0, 99))
        if rng.random() < 0.5: kw["top_k"] = rng.choice([5, 20, 64])
        if rng.random() < 0.5: kw["top_p"] = rng.choice([0.8, 0.95])
        if rng.random() < 0.2: kw["min_p"] = 0.05
    if rng.random() < 0.3: kw["repetition_penalty"] = 1.2
    if rng.random() < 0.2: kw["stop"] = (rng.choice(["\n\n", ")", "the"]),)
    if rng.random() < 0.25:
        kw["guided"] = rng.choice([Guided(regex=r"[ -~\n]{1,300}"), Guided(regex=r"[a-z_]{1,12}\(\d{1,3}\)"),
                                   Guided(choice=("yes", "no"))])
    elif rng.random() < 0.3:
        kw["ignore_eos"] = True
    return SamplingParams(**kw)
n = 16
ps = [params() for _ in range(n)]
pr = [rng.choice(prompts) for _ in range(n)]
plain = LLM(draft=None, speculative=False, max_num_seqs=6, kv_cache_tokens=int(sys.argv[2]) if len(sys.argv) > 2 else None)
spec = LLM(spec_bypass=True, max_num_seqs=6, kv_cache_tokens=int(sys.argv[2]) if len(sys.argv) > 2 else None)
a = [o.token_ids for o in plain.generate(pr, ps)]
b = [o.token_ids for o in spec.generate(pr, ps)]
bad = [i for i in range(n) if a[i] != b[i]]
print("seed", sys.argv[1:], "differ:", bad, [ps[i] for i in bad][:2])
