#!/usr/bin/env bash
# Device (session 6): sampled rows after the row-by-row top-p sort: their GPU tests, then the 4B 1k bench (no peer,
# no simulated rounds). usage: bash scripts/device_s6f.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 60 python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider -k "sample_rows" 2>&1 | tail -1
timeout 120 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim --out $OUT/kernels.json 2>&1 | grep "^qwen3"
