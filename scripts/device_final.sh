#!/usr/bin/env bash
# Device: GPU tests (stop if they fail), the full kernel bench, an A/B without PDL, and the tiny-pair bit-exactness run.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; rc=$?
tail -30 $OUT/gpu_tests.txt
[ $rc = 0 ] || exit 1
python -m sparkdec bench kernels --shapes qwen3-4b,qwen3-8b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 | grep "^qwen3"
python scripts/tiny_pair_gpu.py $OUT/tiny.json 2>&1 | tail -1 | cut -c1-300
SPARKDEC_PDL=0 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim --out $OUT/kernels_nopdl.json 2>&1 | grep "^qwen3"
