#!/usr/bin/env bash
# Device, session 14: split-K slices summed by the next RMSNorm kernel (triton_gemm.SUM_IN_NORM, ops/partials.py)
# and the residual loaded after the PDL wait (gluon_gemv.RESIDUAL_EARLY): bits tests, then the decode A/B.
# usage (device tool): bash scripts/device_s14d.sh   (~7 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
timeout 150 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "split_k_slices" \
    > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -8
timeout 150 python scripts/check_sum_in_norm.py $OUT/check_sum_in_norm.json 2>&1 | tail -3
env AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 200 python scripts/ab_decode.py $OUT/sum_in_norm_ab.json qwen3-4b base \
    sum_in_norm sum_in_norm_w16 sum_in_norm_w4 base#2 sum_in_norm#2 2>&1 | grep "ctx "
