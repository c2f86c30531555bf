#!/usr/bin/env bash
# Device, session 10: the split kernel's kv lens and first pages read before its PDL wait, at 1k and 8k (decode, verify, propose), twice
# each, interleaved. usage (device tool): bash scripts/device_s10d.sh   (~3 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024,8192 timeout 400 python scripts/ab_decode.py $OUT/ab_split_early.json qwen3-4b base \
  split_early base#2 split_early#2 2>&1 | grep -v Warning
