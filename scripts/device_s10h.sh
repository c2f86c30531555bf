#!/usr/bin/env bash
# Device, session 10: the GPU tests and the 4B kernel bench on the final PDL plan (RoPE at mode 2).
# usage (device tool): SPARKDEC_COMMIT=<hash> bash scripts/device_s10h.sh   (~5 minutes; GPU_SUITE_LIMIT: the GPU
# suite's limit in seconds, default 330: session 12 saw 220 cut it on a cold machine)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout ${GPU_SUITE_LIMIT:-330} python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -12
timeout 130 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 \
  | grep "^qwen3"
