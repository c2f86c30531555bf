#!/usr/bin/env bash
# Device, session 9: GPU tests with the shipped Gluon table, then PDL modes per kind of kernel (Gluon products,
# short kernels) at 1k. usage (device tool): bash scripts/device_s9b.sh   (~6 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -12
AB_CONTEXTS=1024 timeout 300 python scripts/ab_decode.py $OUT/ab_pdl_kinds.json qwen3-4b gluon g2_s1 g2_s2 g1_s2 \
  gluon_pdl2 gluon#2 g2_s2#2 g2_s1#2 2>&1 | grep ctx
