"""A/B of the chained propose's staging in one kernel (ops/triton_chain.py) against its torch form
(spec/chain.STAGE_KERNEL off) on the shipped tiny pair, greedy code, one request at a time, speculating every round:
one engine, the two settings interleaved over PASSES passes, tokens/s and ms per round; the tokens checked equal.
Usage: python scripts/ab_chain_stage.py OUT.json [device]"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from sparkdec import LLM, SamplingParams
from sparkdec.bench import provenance
from sparkdec.spec import chain

CODE = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    ", "class Stack:\n",
        "for key, value in items:\n"]
MAX_TOKENS = 256
PASSES = 7


def run(llm) -> tuple[float, int, list]:
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    torch.cuda.synchronize()
    t, rounds, tokens = time.perf_counter(), 0, []
    for prompt in CODE:
        out = llm.generate([prompt], params)[0]
        rounds += out.stats.get("rounds", 0)
        tokens.append(out.token_ids)
    torch.cuda.synchronize()
    return time.perf_counter() - t, rounds, tokens


def main(out_path: str, device: str = "cuda") -> None:
    llm = LLM(device=device, max_num_seqs=1, spec_bypass=False)
    run(llm)  # warm-up
    passes, tokens = {True: [], False: []}, {}
    for _ in range(PASSES):
        for kernel in (True, False):
            chain.STAGE_KERNEL = kernel
            secs, rounds, tokens[kernel] = run(llm)
            n = sum(map(len, tokens[kernel]))
            passes[kernel].append({"tokens_per_s": n / secs, "ms_per_round": 1e3 * secs / rounds})
    results = {}
    for kernel, runs in passes.items():
        results["kernel" if kernel else "torch"] = {
            "passes": runs, "tokens_per_s": statistics.median(p["tokens_per_s"] for p in runs),
            "ms_per_round": statistics.median(p["ms_per_round"] for p in runs)}
    results["same_tokens"] = tokens[True] == tokens[False]
    for name in ("kernel", "torch"):
        print(f"{name}: {results[name]['tokens_per_s']:.0f} tokens/s, {results[name]['ms_per_round']:.3f} ms a round")
    print(f"same tokens: {results['same_tokens']}")
    record = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "commit": provenance.commit(),
              "command": " ".join(["python"] + sys.argv),
              "config": {"pair": "shipped tiny", "prompts": CODE, "max_tokens": MAX_TOKENS, "passes": PASSES,
                         "engine": {"spec_bypass": False, "max_num_seqs": 1}}, "results": results}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
