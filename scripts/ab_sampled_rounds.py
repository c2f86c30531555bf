"""Device A/B of exact-sampled speculative rounds: argmax or coupled drafts (spec/coupling.py) x verify rows drawn one
at a time on acceptance or all with the verify (spec/round.py DEVICE_DRAWS). Qwen3-4B shape at ctx 1k (random
weights: round cost; with coupled drafts the shared noise alone makes flat distributions agree), then the shipped
tiny pair, 8 prompts batched (acceptance and tokens/s, and whether each gave plain sampled decoding's tokens).
usage: python scripts/ab_sampled_rounds.py OUT.json"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from sparkdec import LLM, SamplingParams
from sparkdec.bench import provenance
from sparkdec.bench.kernels import SAMPLED, make_engine, spec_rounds
from sparkdec.bench.shapes import random_models
from sparkdec.engine.llm_engine import DEFAULT_PAIR
from sparkdec.spec import coupling
from sparkdec.spec import round as spec_round

VARIANTS = {"argmax_per_row": (False, False), "coupled_per_row": (True, False), "argmax_device": (False, True),
            "coupled_device": (True, True)}
PROMPTS = ["The history of the city", "Once upon a time", "def fibonacci(n):", "The best way to learn",
           "In 1905, Einstein", "Water boils at", "My favourite food is", "The stock market"]


def set_variant(name: str) -> None:
    coupling.COUPLED, spec_round.DEVICE_DRAWS = VARIANTS[name]


def shape_runs(ctx: int = 1024) -> dict:
    spec = make_engine(random_models("qwen3-4b"), ctx, spec=True)
    runs = {}
    for name in list(VARIANTS) + ["argmax_per_row#2", "coupled_device#2"]:
        set_variant(name.split("#")[0])
        r = spec_rounds(spec, ctx, SAMPLED, "sampled")
        r["ms_per_token"] = r["spec_sampled_ms_per_round"] / r["spec_sampled_tokens_per_round"]
        runs[name] = r
        print("qwen3-4b", name, r, flush=True)
    return runs


def tiny_runs() -> dict:
    plain = LLM(model=str(DEFAULT_PAIR / "target"), max_num_seqs=8, device="cuda")
    spec = LLM(max_num_seqs=8, spec_bypass=False, device="cuda")
    params = [SamplingParams(max_tokens=64, ignore_eos=True, temperature=0.8, top_p=0.95, seed=11 + i)
              for i in range(len(PROMPTS))]
    ref = [o.token_ids for o in plain.generate(PROMPTS, params)]
    spec.generate(PROMPTS[:2], params[:2])
    runs = {}
    for name in VARIANTS:
        set_variant(name)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            outs = spec.generate(PROMPTS, params)
            times.append(time.perf_counter() - t)
        runs[name] = {"tokens_per_s": sum(len(o.token_ids) for o in outs) / statistics.median(times), "seconds": times,
                      "mean_acceptance_length": statistics.mean(o.stats["mean_acceptance_length"] for o in outs),
                      "same_tokens_as_plain": [o.token_ids for o in outs] == ref}
        print("tiny", name, runs[name], flush=True)
    return runs


def main() -> None:
    commit = provenance.commit()
    result = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "commit": commit,
              "command": " ".join(["python"] + sys.argv),
              "configuration": "exact accept; 4B: random bf16 weights, released-shape drafter, ctx 1024, batch 1, "
                               "T 0.8 top-p 0.95 (bench SAMPLED); tiny pair: 8 prompts batched, 64 tokens, T 0.8, "
                               "top-p 0.95, seeds 11..18",
              "qwen3_4b": shape_runs(), "tiny_pair": tiny_runs()}
    json.dump(result, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
