#!/usr/bin/env bash
# Device (session 11): the q/k norm + RoPE + K/V store fused into the attention split kernel
# (ops/triton_rope_attention.py): its kernel test and the end-to-end exactness tests, then the A/B on/off at 1k and 8k.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "rope_attention or bit_identical or sampled_equals_plain or graph_replay or lookahead" 2>&1 | tail -15
AB_CONTEXTS=1024,8192 timeout 300 python scripts/ab_decode.py $OUT/ab_rope_attention.json qwen3-4b rope_attention \
  rope_attention_off rope_attention#2 rope_attention_off#2 2>&1 | grep -v Warning
