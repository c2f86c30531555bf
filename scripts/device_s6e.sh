#!/usr/bin/env bash
# Device (session 6): GPU tests of the sampled and chained paths after the pinned staging, then the 4B 1k bench.
# usage: SPARKDEC_COMMIT=<hash> bash scripts/device_s6e.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider -k "sample or lookahead or queued or speculative or staged" > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  |Error" $OUT/gpu_tests.txt | head -12
[ $rc = 0 ] || exit 1
timeout 200 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --out $OUT/kernels.json 2>&1 | grep "^qwen3"
