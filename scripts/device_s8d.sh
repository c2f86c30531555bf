#!/usr/bin/env bash
# (ran at fc97140; reverted: attention_combine_per_head_ab_h200_2026-11-30.json)
# Device, session 8: the layout-free combine again, now one head per program and chunks of 8 splits skipped past the
# row's splits; a lone row combines in the split kernel's last program. A/B at 1k against _old (bcacf89, the shipped
# kernels), GPU tests of this tree, and GPU tests of _old (the tree kept if this one loses).
# usage (device tool): bash scripts/device_s8d.sh   (with _old/sparkdec present; about 8 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024 timeout 110 python scripts/ab_decode.py $OUT/ab_1k.json qwen3-4b base lone_off base#2 2>&1 | grep ctx
AB_CONTEXTS=1024 PYTHONPATH=$PWD/_old:$PWD/tests timeout 80 python scripts/ab_decode.py $OUT/ab_1k_old.json qwen3-4b \
  base base#2 2>&1 | grep ctx
timeout 180 python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -8
PYTHONPATH=$PWD/_old:$PWD/tests timeout 180 python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider \
  > $OUT/gpu_tests_old.txt 2>&1
grep -E "passed|failed|^E  " $OUT/gpu_tests_old.txt | head -8
