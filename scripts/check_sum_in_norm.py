"""Device check (session 14): the Qwen3-4B shape (random bf16 weights, released-shape drafter) decodes the same
greedy tokens with the split-K slices summed by the next RMSNorm kernel (triton_gemm.SUM_IN_NORM) as without it,
plain and speculative, CUDA graphs on. usage: python scripts/check_sum_in_norm.py OUT.json"""
from __future__ import annotations

import gc
import json
import sys

import torch

from sparkdec.bench.kernels import make_engine, prefill
from sparkdec.bench.shapes import random_models
from sparkdec.ops import triton_gemm


def tokens(models, spec: bool, on: bool, n: int = 48) -> list[int]:
    triton_gemm.SUM_IN_NORM = on
    eng = make_engine(models, 1024, spec=spec)
    seq = prefill(eng, 1024, n)
    while not seq.finished:
        eng.step()
    out = list(seq.output_ids)
    del eng, seq
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main() -> None:
    models = random_models("qwen3-4b")
    runs = {f"{'spec' if spec else 'plain'}_{'sum_in_norm' if on else 'base'}": tokens(models, spec, on)
            for spec in (False, True) for on in (False, True)}
    ref = runs["plain_base"]
    res = {"device": torch.cuda.get_device_name(), "tokens": len(ref),
           "equal_to_plain_base": {k: v == ref for k, v in runs.items()}}
    print(res, flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
