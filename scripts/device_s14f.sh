#!/usr/bin/env bash
# Device, session 14 last call: the persistent-MLP test after its fix and the slices test; with the split-K sums in
# the next RMSNorm, other split-K counts for o and down (fewer slices for the norm to read, or more programs); the
# 4B bench at 8k with the final code.
# usage (device tool): bash scripts/device_s14f.sh   (~4 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
timeout 100 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "persistent_mlp or split_k_slices" \
    > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -8
env AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 110 python scripts/ab_decode.py $OUT/split_counts_ab.json qwen3-4b base \
    o_s4 down_s2 down_s8 base#2 2>&1 | grep "ctx "
timeout 120 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 8192 --out $OUT/kernels_8k.json 2>&1 \
    | grep "^qwen3"
