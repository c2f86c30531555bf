"""A/B of the drafts of exact-sampled speculation on the shipped tiny pair: the drafter's argmax against the coupled
race (spec/coupling.py), 8 prompts in one batch, per sampling setting; mean acceptance length, tokens/s (median of
3 timed batches after a warm-up) and whether each gave plain sampled decoding's tokens.
usage: python scripts/ab_coupling.py OUT.json [device] [--filters]   (--filters: tight top-k / top-p settings, with the
race on whatever the filters: how coupling.MIN_TOP_K and MIN_TOP_P were chosen)"""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time

import torch

from sparkdec import LLM, SamplingParams
from sparkdec.bench import provenance
from sparkdec.engine.llm_engine import DEFAULT_PAIR
from sparkdec.spec import coupling

PROMPTS = ["The history of the city", "Once upon a time", "def fibonacci(n):", "The best way to learn",
           "In 1905, Einstein", "Water boils at", "My favourite food is", "The stock market"]
SETTINGS = [dict(temperature=0.8), dict(temperature=1.0), dict(temperature=0.7, top_p=0.9),
            dict(temperature=1.0, top_p=0.95)]
FILTER_SETTINGS = [dict(temperature=0.8, top_k=1), dict(temperature=0.8, top_k=3), dict(temperature=0.8, top_k=20),
                   dict(temperature=0.8, top_p=0.5), dict(temperature=1.0, top_k=50)]


def timed(llm, params) -> tuple[list, list[float]]:
    times = []
    for _ in range(3):
        t = time.perf_counter()
        outs = llm.generate(PROMPTS, params)
        times.append(time.perf_counter() - t)
    return outs, times


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--filters"]
    out, device = args[0], args[1] if len(args) > 1 else None
    settings = FILTER_SETTINGS if "--filters" in sys.argv else SETTINGS
    if settings is FILTER_SETTINGS:
        coupling.MIN_TOP_K, coupling.MIN_TOP_P = 0, 0.0
    threads = 2 if device in (None, "cpu") else None
    plain = LLM(model=str(DEFAULT_PAIR / "target"), max_num_seqs=8, device=device, threads=threads)
    spec = LLM(max_num_seqs=8, spec_bypass=False, device=device, threads=threads)
    spec.generate(PROMPTS[:2], SamplingParams(max_tokens=8, temperature=0.8, seed=1))
    runs = {}
    for kw in settings:
        params = [SamplingParams(max_tokens=64, ignore_eos=True, seed=11 + i, **kw) for i in range(len(PROMPTS))]
        ref = [o.token_ids for o in plain.generate(PROMPTS, params)]
        name = ",".join(f"{k}={v}" for k, v in kw.items())
        runs[name] = {}
        for coupled in (False, True):
            coupling.COUPLED = coupled
            outs, times = timed(spec, params)
            runs[name]["coupled" if coupled else "argmax"] = {
                "mean_acceptance_length": statistics.mean(o.stats["mean_acceptance_length"] for o in outs),
                "tokens_per_s": sum(len(o.token_ids) for o in outs) / statistics.median(times), "seconds": times,
                "same_tokens_as_plain": [o.token_ids for o in outs] == ref}
            print(name, "coupled" if coupled else "argmax", runs[name]["coupled" if coupled else "argmax"], flush=True)
    commit = provenance.commit()
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'x86_64'})",
              "date": time.strftime("%Y-%m-%d"), "commit": commit, "command": " ".join(["python"] + sys.argv),
              "configuration": "shipped tiny pair, accept exact, 8 prompts batched, 64 tokens, seeds 11..18",
              "runs": runs}
    json.dump(result, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
