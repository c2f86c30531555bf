"""Device A/B of the speculation bypass at full size: Qwen3-4B-shaped target and released-shape drafter, random bf16
weights, so the drafts are never accepted (the text a drafter cannot predict, the bypass's case). Greedy and sampled
requests of 256 tokens after a 1k prompt, one at a time and 4 at once: tokens/s decoding plainly, speculating every
round, and with the bypass (one engine: the bypass and each request's speculation switched), interleaved, the median of
the passes kept; the tokens checked equal across the three. usage: python scripts/ab_bypass_full.py OUT.json
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch
from ab_bypass import bypass_costs  # (scripts/: this script's folder)

from sparkdec.bench import provenance
from sparkdec.bench.kernels import sync
from sparkdec.bench.shapes import random_models
from sparkdec.engine.llm_engine import Engine, EngineConfig
from sparkdec.sampling import SamplingParams

CTX, TOKENS, PASSES = 1024, 256, 3
CASES = {"greedy": {}, "sampled_T0.8": dict(temperature=0.8, top_p=0.95)}


def prompts(n: int, vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(5)
    return [torch.randint(0, min(150000, vocab), (CTX,), generator=gen).tolist() for _ in range(n)]


def run(engine: Engine, batch: list[list[int]], params: list[SamplingParams]) -> tuple[list, float, int, int]:
    """All requests at once -> (their tokens, tokens/s of the decode after every prompt's first token, rounds,
    tokens the bypass decoded plainly)."""
    seqs = [engine.add_request(p, q) for p, q in zip(batch, params)]
    while any(not s.output_ids for s in seqs):
        engine.step()
    sync()
    t, n0 = time.perf_counter(), sum(len(s.output_ids) for s in seqs)
    while engine.has_unfinished():
        engine.step()
    sync()
    secs = time.perf_counter() - t
    tps = (sum(len(s.output_ids) for s in seqs) - n0) / secs
    return [list(s.output_ids) for s in seqs], tps, sum(s.spec.rounds for s in seqs), sum(
        s.spec.bypassed_tokens for s in seqs)


def main(out_path: str) -> None:
    cfg = EngineConfig(device="cuda", max_model_len=CTX + 1100, kv_cache_tokens=4 * (CTX + 1100), max_num_seqs=4,
                       max_batched_tokens=max(2048, CTX), prefix_caching=False, spec_bypass=True)
    engine = Engine(cfg, models=random_models("qwen3-4b"))
    bypass = engine.bypass
    results = {}
    for concurrency in (1, 4):
        batch = prompts(concurrency, engine.target_cfg.vocab_size)
        for case, kw in CASES.items():
            row, tokens, counts = {m: [] for m in ("plain", "spec", "bypass")}, {}, {}
            for _ in range(PASSES):
                for mode in row:
                    engine.bypass = bypass if mode == "bypass" else None
                    params = [SamplingParams(max_tokens=1 + TOKENS, ignore_eos=True, seed=3 + i,
                                             speculative=mode != "plain", **kw) for i in range(concurrency)]
                    tokens[mode], tps, rounds, plainly = run(engine, batch, params)
                    row[mode].append(tps)
                    counts[mode] = {"rounds": rounds, "bypassed_tokens": plainly}
            stats = {m: {"tokens_per_s": statistics.median(v), "passes": v, **counts[m]} for m, v in row.items()}
            same = tokens["plain"] == tokens["spec"] == tokens["bypass"]
            results[f"{case}_c{concurrency}"] = {**stats, "same_tokens": same}
            print(f"{case} c={concurrency}: plain {stats['plain']['tokens_per_s']:.1f}, spec "
                  f"{stats['spec']['tokens_per_s']:.1f}, bypass {stats['bypass']['tokens_per_s']:.1f} tokens/s "
                  f"({stats['bypass']['rounds']} rounds, {stats['bypass']['bypassed_tokens']} bypassed), "
                  f"same tokens {same}", flush=True)
    costs = bypass_costs(bypass)
    print("bypass costs:", costs)
    record = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "commit": provenance.commit(),
              "command": " ".join(["python"] + sys.argv),
              "config": {"shape": "qwen3-4b", "weights": "random bf16 (drafts never accepted)", "ctx": CTX,
                         "tokens": TOKENS, "passes": PASSES, "cases": CASES,
                         "note": "one engine and one Bypass throughout: its costs and step ratios carry across passes"},
              "bypass_costs": costs, "results": results}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
