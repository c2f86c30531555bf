#!/usr/bin/env bash
# Device, session 14 end: SUM_IN_NORM with the norm kernel's own warps (4): bits (the product + norm test, greedy
# tokens plain and speculative), decode A/B, then the whole GPU suite and the 4B kernel bench with it on.
# usage (device tool): bash scripts/device_s14e.sh   (~8 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
timeout 100 python scripts/check_sum_in_norm.py $OUT/check_sum_in_norm.json 2>&1 | tail -2
env AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 100 python scripts/ab_decode.py $OUT/sum_in_norm_ab.json qwen3-4b base \
    sum_in_norm base#2 sum_in_norm#2 2>&1 | grep "ctx "
SPARKDEC_SUM_IN_NORM=1 timeout 250 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider \
    > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -12
SPARKDEC_SUM_IN_NORM=1 timeout 120 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 \
    --out $OUT/kernels.json 2>&1 | grep "^qwen3"
