#!/usr/bin/env bash
# Device, session 7: attention splits of 64 keys below position FINE_END and 128 beyond. GPU tests (attention, spec ==
# plain bits), then the A/B against _old (the previous commit, 128-key splits) at ctx 1k, 4k, 8k, Qwen3-4B shape.
# usage (device tool): bash scripts/device_s7d.sh   (with _old/sparkdec present; about 5 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests AB_CONTEXTS=1024,4096,8192
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider -k "attention or bit_identical or prompt_rows" \
  > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -8
[ $rc = 0 ] || exit 1
for i in 1 2; do
  python scripts/ab_decode.py $OUT/ab_new_$i.json qwen3-4b fine2k fine0 fine4k fine2k_p128 2>&1 | grep ctx
  PYTHONPATH=$PWD/_old:$PWD/tests python scripts/ab_decode.py $OUT/ab_old_$i.json qwen3-4b base 2>&1 | grep ctx
done
