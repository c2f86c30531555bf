#!/usr/bin/env bash
# Device, session 7: the chain and propose-kernel GPU tests, then the A/B of the attention split size (SPLIT 128, the
# default, against 64 and 32 keys) and of the chain's interleaved tile order, Qwen3-4B shape, ctx 1k and 8k.
# usage (device tool): bash scripts/device_s7c.sh   (about 6 minutes)
# (ran at 2e54351; split64, split32 and chain_interleave were dropped after it: results in
# benchmarks/results/attention_split_chain_order_ab_h200_2026-11-30.json)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests AB_CONTEXTS=1024,8192
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider -k "markov or propose_kernels or attention" \
  > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -8
[ $rc = 0 ] || exit 1
python scripts/ab_decode.py $OUT/ab_split_chain.json qwen3-4b base split64 split32 chain_interleave base#2 split64#2 \
  chain_interleave#2 2>&1 | grep ctx
