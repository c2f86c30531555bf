#!/usr/bin/env bash
# Device, session 5: the Markov chain GPU test, then A/B in one process each (the deferred split-K A/B it first ran
# is in benchmarks/results/defer_chain_sampler_ab_h200_2026-11-30.json):
# the Markov chain (off / 132 / 264 / 396 programs) and the fused vs per-row sampler on the tiny pair.   usage (device tool): bash scripts/device_ab5.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "markov" > $OUT/gpu_new_tests.txt 2>&1
grep -E "passed|failed|^E  " $OUT/gpu_new_tests.txt | head -8
AB_CONTEXTS=1024 python scripts/ab_decode.py $OUT/ab5.json qwen3-4b chain_off chain_264 chain_396 \
    chain_132 chain_off#2 2>&1 | grep -E "ctx|Error|error" | head -20
python scripts/ab_sampler.py $OUT/ab_sampler.json 2>&1 | tail -1 | cut -c1-700
