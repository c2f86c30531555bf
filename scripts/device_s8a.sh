#!/usr/bin/env bash
# Device, session 8: the split kernel's first step of old keys loaded before the PDL wait (PRELOAD_KV), the rope
# kernel triggering its dependent at start (EARLY_TRIGGER), a one-pass combine. A/B at 1k (each alone off, all off,
# 32-split chunks), the GPU tests with the new defaults, then the A/B at 8k.
# usage (device tool): bash scripts/device_s8a.sh   (about 9 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024 timeout 270 python scripts/ab_decode.py $OUT/ab_1k.json qwen3-4b base attn_old no_preload no_early \
  two_pass chunk32 base#2 attn_old#2 2>&1 | grep ctx
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -8
AB_CONTEXTS=8192 timeout 100 python scripts/ab_decode.py $OUT/ab_8k.json qwen3-4b base attn_old chunk32 2>&1 | grep ctx
