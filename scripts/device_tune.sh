#!/usr/bin/env bash
# Device: re-tune the GEMM tiles (writes OUT/sweep.json, the format of sparkdec/ops/gemm_configs.json), then a quick
# 4B bench with that table and a kernel profile of one step. usage (device tool): bash scripts/device_tune.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python scripts/sweep_gemm.py $OUT/sweep.json 2>&1 | grep -v Warning
export SPARKDEC_GEMM_CONFIGS=$OUT/sweep.json
python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim --out $OUT/bench.json 2>&1 | grep "^qwen3"
python scripts/profile_step.py > $OUT/profile.txt 2>&1; head -3 $OUT/profile.txt
grep -A9 "== " $OUT/profile.txt | cut -c1-60,100-200
