#!/usr/bin/env bash
# Device, session 10: split-K and Gluon tiles for the drafter's context write inside the verify graph (fc over the
# taps, each draft layer's k/v rows), 4B shape, 1k and 8k, speculative engine only. usage: bash scripts/device_s10c.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_PROPOSE_ONLY=1 AB_CONTEXTS=1024,8192 timeout 400 python scripts/ab_decode.py $OUT/ab_ctx_write.json qwen3-4b base \
  ctx_s4 ctx_s5 ctx_s10 ctx_s5_triton base#2 2>&1 | grep -v Warning
