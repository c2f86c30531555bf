#!/usr/bin/env bash
# Device, session 10: the attention combine's chunk loops unrolled, at 1k and 8k (decode, verify, propose), twice
# each, interleaved. usage (device tool): bash scripts/device_s10d.sh   (~3 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024,8192 timeout 400 python scripts/ab_decode.py $OUT/ab_combine_unroll.json qwen3-4b base \
  combine_unroll base#2 combine_unroll#2 2>&1 | grep -v Warning
