"""A/B of the sampler graphs (engine/sampler_graphs.py) against the eager race on the shipped tiny pair, sampled at
T 0.8 and top-p 0.95: plain decoding and speculation every round, one request at a time and four together; one engine
per mode, the two settings interleaved over PASSES passes; tokens/s, and the tokens checked equal.
Usage: python scripts/ab_sampler_graphs.py OUT.json [device]"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from sparkdec import LLM, SamplingParams
from sparkdec.bench import provenance
from sparkdec.engine import sampler_graphs

PROMPTS = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    ", "class Stack:\n",
           "for key, value in items:\n"]
MAX_TOKENS = 256
PASSES = 5
MODES = {"plain": dict(draft=None, speculative=False), "spec": dict(spec_bypass=False)}
SAMPLING = dict(temperature=0.8, top_p=0.95)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run(llm, concurrency: int) -> tuple[float, list]:
    """All prompts, `concurrency` at a time -> (seconds, each prompt's tokens)."""
    tokens = []
    sync()
    t = time.perf_counter()
    for i in range(0, len(PROMPTS), concurrency):
        batch = PROMPTS[i:i + concurrency]
        params = [SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, seed=11 + i + j, **SAMPLING)
                  for j in range(len(batch))]
        tokens += [o.token_ids for o in llm.generate(batch, params)]
    sync()
    return time.perf_counter() - t, tokens


def main(out_path: str, device: str = "cuda") -> None:
    results = {}
    for concurrency in (1, 4):
        for mode, kw in MODES.items():
            llm = LLM(device=device, max_num_seqs=concurrency, **kw)
            run(llm, concurrency)  # warm-up (and the forms' captures)
            rates, tokens = {True: [], False: []}, {}
            for _ in range(PASSES):
                for on in (True, False):
                    sampler_graphs.SAMPLER_GRAPHS = on
                    secs, tokens[on] = run(llm, concurrency)
                    rates[on].append(sum(map(len, tokens[on])) / secs)
            sampler_graphs.SAMPLER_GRAPHS = True
            key = f"{mode}_c{concurrency}"
            results[key] = {"graphs_tokens_per_s": statistics.median(rates[True]),
                            "eager_tokens_per_s": statistics.median(rates[False]), "passes": rates,
                            "same_tokens": tokens[True] == tokens[False],
                            "captures": llm.engine.runner.sampler_graphs.captures
                            if llm.engine.runner.sampler_graphs is not None else 0}
            r = results[key]
            print(f"{key}: graphs {r['graphs_tokens_per_s']:.0f} tokens/s, eager {r['eager_tokens_per_s']:.0f}, "
                  f"same tokens {r['same_tokens']}, captures {r['captures']}")
            del llm
    record = {"device": torch.cuda.get_device_name() if device == "cuda" else device, "date": time.strftime("%Y-%m-%d"), "commit": provenance.commit(),
              "command": " ".join(["python"] + sys.argv),
              "config": {"pair": "shipped tiny", "prompts": PROMPTS, "max_tokens": MAX_TOKENS, "passes": PASSES,
                         "sampling": SAMPLING, "modes": MODES}, "results": results}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1, default=str)


if __name__ == "__main__":
    main(*sys.argv[1:])
