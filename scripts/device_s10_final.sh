#!/usr/bin/env bash
# Device, session 10 end run: GPU tests (all, results kept even if one fails), the kernel bench (4B and 8B, 1k and
# 8k) and the tiny pair. usage (device tool): SPARKDEC_COMMIT=<hash> bash scripts/device_s10_final.sh   (~7 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 330 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -12
timeout 200 python -m sparkdec bench kernels --shapes qwen3-4b,qwen3-8b --contexts 1024,8192 --out $OUT/kernels.json \
  2>&1 | grep "^qwen3"
timeout 100 python scripts/tiny_pair_gpu.py $OUT/tiny.json 2>&1 | tail -1 | cut -c1-300
