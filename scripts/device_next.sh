#!/usr/bin/env bash
# Device end run for the next session (~6-7 minutes; the first call on a cold machine adds ~1; the per-call limit
# is 600 s, so run step 3 as its own call if the first two take long).
# usage (device tool): SPARKDEC_COMMIT=<hash> bash scripts/device_next.sh
# 1. The whole GPU suite. Session 12's end run cut it at 220 s (19 passed) on a cold machine, so the limit here is 330 s.
# 2. The 4B kernel bench at 1k and 8k (writes $OUT/kernels.json).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 330 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -12
timeout 150 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 \
  | grep "^qwen3"
# 3. The batch verify policy (Algorithm 1) on the tiny pair with CUDA graphs: full block against batch at 8 prompts
#    (CPU: 11-19% more tokens/s, verify_policy_ab_cpu_tiny_2026-11-30.json; on a GPU the graph tiers make the cost a staircase)
timeout 120 python scripts/ab_verify_policy.py $OUT/verify_policy_ab.json cuda 2>&1 | tail -3
