#!/usr/bin/env bash
# Device, session 11 end run: the GPU tests and the 4B kernel bench at the session's final code.
# usage (device tool): SPARKDEC_COMMIT=<hash> bash scripts/device_s11_final.sh   (~5 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 220 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -12
timeout 130 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 \
  | grep "^qwen3"
