"""A/B of the speculation bypass (spec/bypass.py) on the shipped pair: tokens/s of plain decoding, speculation every
round (bypass off) and speculation with the bypass, on prose sampled at T 1.0 and 1.5 (low acceptance) and code
decoded greedily (high acceptance), at concurrency 1 and 4; interleaved, the median of three passes kept; the tokens
checked equal across the three.
Usage: python scripts/ab_bypass.py OUT.json [device]"""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time

import torch

from sparkdec import LLM, SamplingParams
from sparkdec.bench import provenance

PROSE = ["The standard library provides", "This module defines functions for", "In this tutorial, you will learn how",
         "The following example shows"]
CODE = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    ", "class Stack:\n",
        "for key, value in items:\n"]
CASES = {"prose_T1.0": (PROSE, dict(temperature=1.0)), "prose_T1.5": (PROSE, dict(temperature=1.5)),
         "code_greedy": (CODE, {})}
MAX_TOKENS = 256
PASSES = 3
THREADS = 1  # (CPU: one thread times the tiny models most steadily on a shared 2-core machine)
ENGINES = {"plain": dict(draft=None, speculative=False), "spec": dict(spec_bypass=False),
           "bypass": dict(spec_bypass=True)}


def run(llm, prompts, params, concurrency: int) -> tuple[list, float, int]:
    outs, t = [], time.perf_counter()
    for i in range(0, len(prompts), concurrency):
        outs += llm.generate(prompts[i:i + concurrency], params[i:i + concurrency])
    return outs, time.perf_counter() - t, sum(o.stats.get("bypassed_tokens", 0) for o in outs)


def bypass_costs(bypass) -> dict:
    """What the bypass's choices rested on: its timed forward ms by token count, propose ms by sequence count, and
    the ratios of real step times to them by kind of step."""
    return {"forward_ms": bypass.costs.forward_points, "propose_ms": bypass.costs.propose_points,
            "ratios": {f"{'spec' if s else 'plain'}_{'sampled' if d else 'greedy'}": r
                       for (s, d), r in bypass.ratio.items()}}


def main(out_path: str, device: str = "cpu") -> None:
    results = {}
    for concurrency in (1, 4):
        threads = THREADS if device == "cpu" else None
        llms = {name: LLM(device=device, max_num_seqs=concurrency, threads=threads, **kw) for name, kw in ENGINES.items()}
        for llm in llms.values():
            llm.generate(CODE[:1], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
            llm.engine.time_bypass_costs(concurrency)  # (before the clock starts)
        for case, (prompts, kw) in CASES.items():
            params = [SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, seed=11 + i, **kw) for i in range(len(prompts))]
            row, tokens = {name: {"tokens_per_s_passes": []} for name in llms}, {}
            for _ in range(PASSES):  # interleaved; the median pass kept
                for name, llm in llms.items():
                    outs, secs, bypassed = run(llm, prompts, params, concurrency)
                    n = sum(len(o.token_ids) for o in outs)
                    row[name]["tokens_per_s_passes"].append(n / secs)
                    row[name].update(rounds=sum(o.stats.get("rounds", 0) for o in outs), bypassed_tokens=bypassed)
                    tokens[name] = [o.token_ids for o in outs]
            for r in row.values():
                r["tokens_per_s"] = statistics.median(r["tokens_per_s_passes"])
            same = tokens["plain"] == tokens["spec"] == tokens["bypass"]
            results[f"{case}_c{concurrency}"] = {**row, "same_tokens": same}
            print(f"{case} c={concurrency}: plain {row['plain']['tokens_per_s']:.0f}, spec "
                  f"{row['spec']['tokens_per_s']:.0f}, bypass {row['bypass']['tokens_per_s']:.0f} tokens/s "
                  f"({row['bypass']['bypassed_tokens']} bypassed), same tokens {same}", flush=True)
        results[f"bypass_costs_c{concurrency}"] = costs = bypass_costs(llms["bypass"].engine.bypass)
        print(f"c={concurrency} bypass costs: {costs}", flush=True)
    record = {"device": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'x86_64'})",
              "date": time.strftime("%Y-%m-%d"), "commit": provenance.commit(), "command": " ".join(["python"] + sys.argv),
              "config": {"pair": "shipped tiny", "max_tokens": MAX_TOKENS, "torch_threads": torch.get_num_threads(), "passes": PASSES,
                         "engines": ENGINES, "cases": {c: (p, kw) for c, (p, kw) in CASES.items()}},
              "results": results}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
