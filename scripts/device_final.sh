#!/usr/bin/env bash
# Device: GPU tests (stop if they fail), the full kernel bench and the tiny-pair exactness and speed run.
# (The prefill-kernel and fused-sampler A/Bs it also ran in session 4 are in benchmarks/results: prefill_kernel_ab_*,
# tiny_pair_gpu_*_session5.json, defer_chain_sampler_ab_*.)
# usage (device tool): SPARKDEC_COMMIT=<hash> bash scripts/device_final.sh   (about 5 minutes on an H200)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -8
[ $rc = 0 ] || exit 1
python -m sparkdec bench kernels --shapes qwen3-4b,qwen3-8b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 | grep "^qwen3"
python scripts/tiny_pair_gpu.py $OUT/tiny.json 2>&1 | tail -1 | cut -c1-300
