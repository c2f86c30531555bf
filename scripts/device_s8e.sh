#!/usr/bin/env bash
# (ran at fc97140; reverted: attention_combine_per_head_ab_h200_2026-11-30.json)
# Device, session 8: the layout-free combine (one head per program) at 8k, chunks of 8 and 16 splits, against _old
# (bcacf89, the shipped combine). usage (device tool): bash scripts/device_s8e.sh   (with _old/sparkdec; ~3 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=8192 timeout 100 python scripts/ab_decode.py $OUT/ab_8k.json qwen3-4b lone_off lone_off_chunk16 2>&1 | grep ctx
AB_CONTEXTS=8192 PYTHONPATH=$PWD/_old:$PWD/tests timeout 60 python scripts/ab_decode.py $OUT/ab_8k_old.json qwen3-4b \
  base 2>&1 | grep ctx
