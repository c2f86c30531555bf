#!/usr/bin/env bash
# Device, session 9: GPU tests with the Gluon table and the per-kind PDL plan, then the plan against its neighbours
# at 1k. usage (device tool): bash scripts/device_s9c.sh   (~6 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 330 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -12
AB_CONTEXTS=1024 timeout 200 python scripts/ab_decode.py $OUT/ab_pdl_plan.json qwen3-4b base g2_s2 g2_s1 triton base#2 \
  2>&1 | grep ctx
