#!/usr/bin/env bash
# Device: GPU tests, GEMM sweep, quick 4B bench with the swept configs (norm fused into the GEMM or not), profile.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tail -4
python scripts/sweep_gemm.py $OUT/sweep.json 2>&1 | grep -v Warning
for mode in 1 0; do
  cfg=$OUT/sweep.json; [ $mode = 0 ] && cfg=$OUT/sweep_plain.json
  SPARKDEC_GEMM_CONFIGS=$cfg SPARKDEC_FUSED_NORM=$mode python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 \
    --no-peer --no-sim --out $OUT/bench_norm$mode.json 2>&1 | grep "^qwen3"
done
SPARKDEC_GEMM_CONFIGS=$OUT/sweep.json python scripts/profile_step.py > $OUT/profile.txt 2>&1; head -3 $OUT/profile.txt
grep -A9 "== " $OUT/profile.txt | cut -c1-60,100-200
