#!/usr/bin/env bash
# Device, session 10: the o product's weight prefetch before its PDL wait (0, 1, 2 of 4 tiles) and the attention
# split kernel at PDL mode 2, at 1k and 8k (decode, verify and propose replays). usage: bash scripts/device_s10b.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024,8192 timeout 560 python scripts/ab_decode.py $OUT/ab_prefetch.json qwen3-4b base o_pre0 o_pre1 \
  o_pre2 split2 split2_o_pre1 base#2 2>&1 | grep -v Warning
