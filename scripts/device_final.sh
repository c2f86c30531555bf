#!/usr/bin/env bash
# Device: GPU tests (stop if they fail), the full kernel bench, the tiny-pair exactness and speed run (also with the
# opt-in fused sampler), and the split kernel for prompt rows against the default prefill kernel (time to first
# token at 1k and 8k, an 8k profile).
# usage (device tool): SPARKDEC_COMMIT=<hash> bash scripts/device_final.sh   (about 6 minutes on an H200)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -8
[ $rc = 0 ] || exit 1
python -m sparkdec bench kernels --shapes qwen3-4b,qwen3-8b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 | grep "^qwen3"
python scripts/tiny_pair_gpu.py $OUT/tiny.json 2>&1 | tail -1 | cut -c1-300
SPARKDEC_FUSED_SAMPLER=1 python scripts/tiny_pair_gpu.py $OUT/tiny_fused_sampler.json 2>&1 | tail -1 | cut -c1-300
SPARKDEC_PREFILL_KERNEL=0 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --no-peer --no-sim \
    --out $OUT/kernels_split_prefill.json 2>&1 | grep "^qwen3"
python scripts/profile_prefill.py 8192 > $OUT/prefill8k_kernel.txt 2>&1
head -1 $OUT/prefill8k_kernel.txt; grep -E "_kernel" $OUT/prefill8k_kernel.txt | head -5 | cut -c1-62,95-200
