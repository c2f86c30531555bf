#!/usr/bin/env bash
# Device (session 11): the fused q/k norm + RoPE + split kernel's test (pages not shared between sequences), then
# its A/B with and without the pre-wait key loads against the unfused path, plain decode at 1k and 8k.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "rope_attention" 2>&1 | grep -v "^ " | tail -8
AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 300 python scripts/ab_decode.py $OUT/ab_rope_attention2.json qwen3-4b \
  rope_attention_off rope_attention rope_attention_nopre 2>&1 | grep "ctx"
