#!/usr/bin/env bash
# Device, session 14: top-p's two-launch scan (ops/triton_top_p.py): the GPU tests that draw with top-p, then the
# sampled-rounds A/B (the per-row torch.cumsum it replaces took the tiny pair from 7870 to 4930 tokens/s).
# usage (device tool): bash scripts/device_s14c.sh   (~5 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "top_p or sampled or sample_rows \
    or fused_sampler or coupled or lookahead or queued" > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -12
timeout 150 python scripts/ab_sampled_rounds.py $OUT/sampled_rounds_ab.json 2>&1 | tail -8
