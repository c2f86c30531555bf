#!/usr/bin/env bash
# Device (session 6): the persistent MLP's GPU tests, then its A/B against the two launches (4B, ctx 1k).
# usage: SPARKDEC_COMMIT=<hash> bash scripts/device_s6b.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider -k "persistent_mlp" > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  |Error" $OUT/gpu_tests.txt | head -12
[ $rc = 0 ] || exit 1
AB_CONTEXTS=1024 timeout 300 python scripts/ab_decode.py $OUT/ab_mlp.json qwen3-4b mlp_two mlp_p4_n16 mlp_p5_n16 mlp_p4_n16_16 mlp_two#2 mlp_p4_n16#2 \
  2>&1 | grep -v -i warn
