"""A/B of the prefix cache on the shipped tiny pair: 8 requests that share a long system prompt, sent one after another
(as chat turns arrive), with the cache off, on, off, on (a fresh engine each, in one process: an order effect shows as
a difference between the pairs); time to first token and total time per request (median over the requests after the
first, which fills the cache), prompt tokens found cached, and whether all gave the same tokens.
usage: python scripts/ab_prefix_cache.py OUT.json [device]"""
from __future__ import annotations

import gc
import json
import platform
import statistics
import sys
import time

import torch

from sparkdec import LLM, SamplingParams
from sparkdec.bench import provenance

SYSTEM = "You are a careful Python programmer. Answer with code only, no prose, and keep names short. " * 24
QUESTIONS = ["def parse(line):\n", "import os\n", "class Config:\n", "def main():\n", "for x in items:\n",
             "with open(path) as f:\n", "try:\n", "async def fetch(url):\n"]


def run(caching: bool, device: str | None) -> dict:
    llm = LLM(prefix_caching=caching, spec_bypass=False, device=device, threads=2 if device in (None, "cpu") else None)
    llm.generate(["warm-up"], SamplingParams(max_tokens=4))
    params = SamplingParams(max_tokens=32, ignore_eos=True)
    ttft, total, tokens = [], [], []
    for q in QUESTIONS:
        out = llm.generate([SYSTEM + q], params)[0]
        ttft.append(out.stats["prefill_s"] * 1e3)
        total.append((out.stats["prefill_s"] + out.stats["decode_s"]) * 1e3)
        tokens.append(out.token_ids)
    sched = llm.engine.scheduler
    timing = {k: (v if k == "steps" else round(v * 1e3, 2)) for k, v in llm.engine.rounds.timing.items()}
    return {"engine_timing_ms": timing, "ttft_ms": ttft, "total_ms": total,
            "median_ttft_ms_after_first": statistics.median(ttft[1:]),
            "median_total_ms_after_first": statistics.median(total[1:]), "prompt_tokens": len(out.prompt_token_ids),
            "prefix_queries": sched.prefix_queries, "prefix_hits": sched.prefix_hits, "tokens": tokens}


def main() -> None:
    out = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else None
    runs = {}
    for name, caching in (("off", False), ("on", True), ("off_2", False), ("on_2", True)):
        runs[name] = run(caching, device)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    for name, r in runs.items():
        print(name, {k: v for k, v in r.items() if k not in ("tokens", "ttft_ms", "total_ms")})
    same = all(r.pop("tokens") == runs["off"]["tokens"] for r in list(runs.values())[1:]) and bool(runs["off"].pop("tokens"))
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'x86_64'})",
              "date": time.strftime("%Y-%m-%d"), "commit": provenance.commit(), "command": " ".join(["python"] + sys.argv),
              "requests": len(QUESTIONS), "max_tokens": 32, "runs": runs, "same_tokens": same,
              "ttft_ratio_off_over_on": runs["off"]["median_ttft_ms_after_first"] / runs["on"]["median_ttft_ms_after_first"],
              "ttft_ratio_off_over_on_2": runs["off_2"]["median_ttft_ms_after_first"]
              / runs["on_2"]["median_ttft_ms_after_first"],
              "total_ratio_off_over_on_2": runs["off_2"]["median_total_ms_after_first"]
              / runs["on_2"]["median_total_ms_after_first"]}
    json.dump(result, open(out, "w"), indent=1)
    print("same tokens", same, "TTFT off/on", round(result["ttft_ratio_off_over_on"], 2), "second pair",
          round(result["ttft_ratio_off_over_on_2"], 2), "total off/on second pair", round(result["total_ratio_off_over_on_2"], 2))


if __name__ == "__main__":
    main()
