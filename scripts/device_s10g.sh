#!/usr/bin/env bash
# Device, session 10: the q/k norm + RoPE kernel at PDL mode 2 on top of the shipped plan, 4B at 1k and 8k, twice
# each, interleaved. usage (device tool): bash scripts/device_s10g.sh   (~2 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024,8192 timeout 300 python scripts/ab_decode.py $OUT/ab_rope_pdl.json qwen3-4b base g2_n2c2r2 base#2 \
  g2_n2c2r2#2 2>&1 | grep -v Warning
