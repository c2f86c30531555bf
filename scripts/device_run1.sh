#!/usr/bin/env bash
# Device: GPU tests, GEMM sweep, quick 4B bench with the swept configs and a profile of one step.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider 2>&1 | tail -25
python scripts/sweep_gemm.py $OUT/sweep.json 2>&1 | grep -v Warning
export SPARKDEC_GEMM_CONFIGS=$OUT/sweep.json
python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim --out $OUT/bench.json 2>&1 | tail -2
python scripts/profile_step.py > $OUT/profile.txt 2>&1; head -5 $OUT/profile.txt; grep -A14 "== " $OUT/profile.txt | cut -c1-60,100-200
