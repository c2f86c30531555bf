"""`sparkdec bench speed`: A/B of speculative vs plain decoding per category and concurrency (SPEED-Bench style).

Same prompts, same sampling (temperature 0 by default, --ignore-eos so both legs emit the same token counts),
same engine with speculation on and off. Reports tokens/s, the ratio, acceptance length per category and
whether the outputs are identical (they must be, for greedy).
"""
from __future__ import annotations

import json
import time
from collections import defaultdict

from sparkdec.errors import SparkdecError
from sparkdec.sampling import SamplingParams

DEFAULT_PROMPTS = [
    {"category": "code", "prompt": "def parse(line):\n"},
    {"category": "code", "prompt": "import os\nimport sys\n\n\ndef main(argv):\n    "},
    {"category": "code", "prompt": "class Config:\n    def __init__(self, path):\n        "},
    {"category": "code", "prompt": "    for key, value in sorted(items.items()):\n"},
    {"category": "prose", "prompt": "The standard library provides"},
    {"category": "prose", "prompt": "This module defines functions for"},
    {"category": "prose", "prompt": "In this tutorial, you will learn how"},
    {"category": "prose", "prompt": "The following example shows"},
]


def load_prompts(path: str | None) -> list[dict]:
    """JSONL records with "prompt" (text) and optional "category"; default: a small built-in set."""
    if not path:
        return DEFAULT_PROMPTS
    try:
        with open(path) as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except OSError as exc:
        raise SparkdecError(f"--prompts {path}: cannot read it ({exc.strerror})") from None
    rows = []
    for n, line in lines:
        try:
            rows.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise SparkdecError(f"--prompts {path}: line {n} is not JSON ({exc.msg}); give one JSON object per "
                                "line") from None
    bad = [n for n, r in rows if not isinstance(r, dict) or not isinstance(r.get("prompt"), str) or not r["prompt"]]
    if bad or not rows:
        raise SparkdecError(f"--prompts {path}: " + (f"line {bad[0]} has no \"prompt\" text" if bad else "no prompts")
                            + '; give one {"prompt": "...", "category": "..."} object per line')
    return [{"category": r.get("category", "all"), "prompt": r["prompt"]} for _, r in rows]


def run_leg(engine_kwargs: dict, prompts: list[dict], params: SamplingParams, concurrency: int, spec: bool) -> dict:
    from sparkdec import LLM

    # (no prefix cache: every leg computes its prompts, as the earlier results did)
    llm = LLM(**{**engine_kwargs, "max_num_seqs": concurrency, "speculative": spec, "prefix_caching": False})
    llm.generate([prompts[0]["prompt"]], SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
    if spec:
        llm.engine.time_bypass_costs(concurrency)  # (before the clock starts)
    t = time.perf_counter()
    outs = llm.generate([p["prompt"] for p in prompts], params)
    seconds = time.perf_counter() - t
    tokens = sum(len(o.token_ids) for o in outs)
    per_cat = defaultdict(lambda: [0, 0])  # committed tokens in rounds, rounds
    for p, o in zip(prompts, outs):
        per_cat[p["category"]][0] += o.stats["num_accepted_tokens"] + o.stats["rounds"]
        per_cat[p["category"]][1] += o.stats["rounds"]
    return {"tokens_per_s": tokens / seconds, "seconds": seconds, "tokens": tokens,
            "acceptance_length": {c: (a / r if r else None) for c, (a, r) in per_cat.items()},
            "bypassed_tokens": sum(o.stats.get("bypassed_tokens", 0) for o in outs),
            "outputs": [o.token_ids for o in outs]}


def main(engine_kwargs: dict, prompts_path: str | None, concurrencies: list[int], max_tokens: int,
         temperature: float, seed: int) -> dict:
    prompts = load_prompts(prompts_path)
    params = [SamplingParams(max_tokens=max_tokens, temperature=temperature, ignore_eos=True, seed=seed + i)
              for i in range(len(prompts))]
    results = []
    for c in concurrencies:
        plain = run_leg(engine_kwargs, prompts, params, c, spec=False)
        spec = run_leg(engine_kwargs, prompts, params, c, spec=True)
        row = {"concurrency": c, "plain_tokens_per_s": plain["tokens_per_s"], "spec_tokens_per_s": spec["tokens_per_s"],
               "speedup": spec["tokens_per_s"] / plain["tokens_per_s"],
               "acceptance_length": spec["acceptance_length"], "spec_bypassed_tokens": spec["bypassed_tokens"],
               "identical_outputs": plain["outputs"] == spec["outputs"]}
        results.append(row)
        al = " ".join(f"{k} {v:.2f}" for k, v in row["acceptance_length"].items() if v)
        print(f"c={c}: plain {row['plain_tokens_per_s']:.1f} tok/s, spec {row['spec_tokens_per_s']:.1f} tok/s, "
              f"x{row['speedup']:.2f}, AL {al}, identical {row['identical_outputs']}", flush=True)
    return {"prompts": len(prompts), "max_tokens": max_tokens, "temperature": temperature,
            "spec_bypass": engine_kwargs.get("spec_bypass"), "results": results}
