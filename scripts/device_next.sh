#!/usr/bin/env bash
# Device end run for the next session (~6-7 minutes; the first call on a cold machine adds ~1; the per-call limit
# is 600 s, so run step 2 as its own call if the first takes long).
# usage (device tool): SPARKDEC_COMMIT=<hash> bash scripts/device_next.sh
# 1. scripts/device_s10h.sh: the whole GPU suite (now with a 330 s limit) and the 4B kernel bench at 1k and 8k.
# 2. The batch verify policy (Algorithm 1) on the tiny pair with CUDA graphs: full block against batch at 8 prompts
#    (CPU: 5-34% more tokens/s, verify_policy_ab_cpu_tiny_2026-11-30.json; on a GPU the graph tiers make the cost a
#    staircase)
OUT=${OUT:-/tmp/out}
bash scripts/device_s10h.sh
PYTHONPATH=$PWD timeout 120 python scripts/ab_verify_policy.py $OUT/verify_policy_ab.json cuda 2>&1 | tail -3
