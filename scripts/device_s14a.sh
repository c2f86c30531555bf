#!/usr/bin/env bash
# Device, session 14 start: the GPU suite (persistent Gluon products' bits, the per-row top-p cumsum), the persistent
# product chain probe, the sampled-rounds A/B after the per-row cumsum.
# usage (device tool): bash scripts/device_s14a.sh   (~8 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
git show HEAD:sparkdec/ops/gluon_gemv.py > /tmp/old_gluon_gemv.py 2>/dev/null || cp scripts/old_gluon_gemv.py /tmp/old_gluon_gemv.py
timeout 200 python scripts/persistent_chain_probe.py $OUT/persistent_chain.json /tmp/old_gluon_gemv.py 2>&1 | tail -12
timeout ${GPU_SUITE_LIMIT:-300} python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -12
[ -n "$SAMPLED" ] && timeout 100 python scripts/ab_sampled_rounds.py $OUT/sampled_rounds_ab.json 2>&1 | tail -8
