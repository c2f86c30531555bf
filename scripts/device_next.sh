#!/usr/bin/env bash
# Device (written in session 11, not yet run): the first probes for the next session (~4 minutes).
# 1. scripts/product_chain_probe.py: the same bytes as 36 Qwen3-4B layers streamed as 4, 2 or 1 products per layer
#    (what the product boundaries cost; the decode ablation puts the product chain at ~62 us per layer against 48).
# 2. The split kernel's query tile (QUERY_TILE 32 or 16 instead of 64: less spilling; session 8 measured them slower
#    on the code of then) on today's code, decode and verify at 1k and 8k.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
timeout 200 python scripts/product_chain_probe.py $OUT/product_chain.json 1 2>&1 | grep -v Warning
AB_CONTEXTS=1024,8192 timeout 300 python scripts/ab_decode.py $OUT/ab_query_tile.json qwen3-4b base qt32 qt16 base#2 \
  2>&1 | grep "ctx"
