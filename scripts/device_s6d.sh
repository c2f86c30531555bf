#!/usr/bin/env bash
# Device (session 6): the sampled-path GPU tests (rows drawn on the device, sampled lookahead, sampled rounds
# chained), the tiny pair's speed and exactness, the sampler profile. usage: bash scripts/device_s6d.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 300 python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider -k "sample or lookahead or queued or speculative" > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  |Error" $OUT/gpu_tests.txt | head -12
[ $rc = 0 ] || exit 1
python scripts/tiny_pair_gpu.py $OUT/tiny.json 2>&1 | tail -1 | cut -c1-400
python scripts/sampler_profile.py $OUT/sampler.json 2>&1 | tail -1
