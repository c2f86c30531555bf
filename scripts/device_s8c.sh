#!/usr/bin/env bash
# (ran at ca2a451; the change was reverted: attention_lone_row_combine_ab_h200_2026-11-30.json)
# Device, session 8: the combine folds split after split elementwise (one program per row and kv head) and a lone
# row (plain decode at batch 1) combines in the split kernel's last program (no combine launch). A/B against _old
# (the previous commit's kernels) at 1k, the GPU tests (spec == plain bits: lone decode rows vs verify rows), then 8k.
# usage (device tool): bash scripts/device_s8c.sh   (with _old/sparkdec present; about 7 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024 timeout 150 python scripts/ab_decode.py $OUT/ab_1k.json qwen3-4b base lone_off chunk8 base#2 2>&1 | grep ctx
AB_CONTEXTS=1024 PYTHONPATH=$PWD/_old:$PWD/tests timeout 80 python scripts/ab_decode.py $OUT/ab_1k_old.json qwen3-4b \
  base base#2 2>&1 | grep ctx
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -8
AB_CONTEXTS=8192 timeout 70 python scripts/ab_decode.py $OUT/ab_8k.json qwen3-4b base lone_off 2>&1 | grep ctx
AB_CONTEXTS=8192 PYTHONPATH=$PWD/_old:$PWD/tests timeout 50 python scripts/ab_decode.py $OUT/ab_8k_old.json qwen3-4b \
  base 2>&1 | grep ctx
