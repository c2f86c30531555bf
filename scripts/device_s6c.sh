#!/usr/bin/env bash
# Device (session 6): the attention's L2 prefetch of the next weights: GPU tests touching it, then its A/B (4B).
# usage: SPARKDEC_COMMIT=<hash> bash scripts/device_s6c.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider -k "speculative_greedy or graph_replay" > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  |Error" $OUT/gpu_tests.txt | head -12
[ $rc = 0 ] || exit 1
AB_CONTEXTS=1024,8192 timeout 360 python scripts/ab_decode.py $OUT/ab_pf.json qwen3-4b pf_off pf_o pf_40 pf_off#2 pf_o#2 \
  pf_40#2 2>&1 | grep -v -i warn
