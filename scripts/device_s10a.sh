#!/usr/bin/env bash
# Device, session 10: Gluon product tiles and split-K inside the 4B decode graph (ctx 1k, plain engine only).
# usage (device tool): bash scripts/device_s10a.sh   (~6 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 540 python scripts/ab_decode.py $OUT/ab_tiles.json qwen3-4b base o_s4 o_s16 \
  o_st2 down_s2 down_s8 down_st4 gu_st3 coresident qkv_bk128 qkv_st2 base#2 2>&1 | grep -v Warning
