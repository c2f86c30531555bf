#!/usr/bin/env bash
# Device, session 7: GPU tests, then in one call the A/B of this tree against _old (the session's starting commit,
# unpacked there: the propose's small kernels, float32 logits from the product) and of the GEMM's weight tiles
# loaded before the PDL wait (AHEAD) and the chain's W2 eviction hint. Qwen3-4B shape, ctx 1k, random weights.
# usage (device tool): bash scripts/device_s7b.sh   (with _old/sparkdec present; about 7 minutes)
# (ran at 44d5265; the ahead*, chain_keep_w2 variants and their switches were dropped after it: results in
# benchmarks/results/propose_glue_ahead_ab_h200_2026-11-30.json)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests AB_CONTEXTS=1024
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -8
[ $rc = 0 ] || exit 1
for i in 1 2; do
  python scripts/ab_decode.py $OUT/ab_new_$i.json qwen3-4b ahead1 ahead3 chain_keep_w2 2>&1 | grep ctx
  PYTHONPATH=$PWD/_old:$PWD/tests python scripts/ab_decode.py $OUT/ab_old_$i.json qwen3-4b pdl_late 2>&1 | grep ctx
done
python scripts/ab_decode.py $OUT/ab_new_3.json qwen3-4b ahead2 ahead3_pdl_early 2>&1 | grep ctx
