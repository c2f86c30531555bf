#!/usr/bin/env bash
# Device: GPU tests, GEMM sweep, quick 4B bench and a profile of one step (session 2 kernel work).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider 2>&1 | tail -25
python scripts/sweep_gemm.py $OUT/sweep.json --quick 2>&1 | grep -v Warning
python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim --out $OUT/bench.json 2>&1 | tail -5
python scripts/profile_step.py > $OUT/profile.txt 2>&1; head -5 $OUT/profile.txt; grep -A40 "== verify eager" $OUT/profile.txt | head -45
