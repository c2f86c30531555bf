#!/usr/bin/env bash
# Device, session 10: the attention split kernel's warps and key step (register spills), 4B at 1k and 8k.
# usage (device tool): bash scripts/device_s10f.sh   (~3 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024,8192 timeout 400 python scripts/ab_decode.py $OUT/ab_split_regs.json qwen3-4b base split_w8_b32 \
  split_b32 split_w8_b64 base#2 2>&1 | grep -v Warning
