#!/usr/bin/env bash
# Device (written in session 11, not yet run): the first probes for the next session (~9 minutes; the A/B alone can take 8: run it as its own call if needed).
# 1. scripts/product_chain_probe.py: the same bytes as 36 Qwen3-4B layers streamed as 4, 2 or 1 products per layer
#    (what the product boundaries cost; the decode ablation puts the product chain at ~62 us per layer against 48).
# 2. The staged persistent MLP (ops/gluon_mlp.py, triton_gemm.FUSED_MLP): its bits test, then its A/B (if the test
#    fails or hangs, the A/B is skipped).
# 3. The split kernel's query tile (QUERY_TILE 32 or 16 instead of 64; session 8 measured them slower
#    on the code of then) on today's code, decode and verify at 1k and 8k.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
timeout 200 python scripts/product_chain_probe.py $OUT/product_chain.json 1 2>&1 | grep -v Warning
timeout 120 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k persistent_mlp 2>&1 | tail -4 \
  | tee $OUT/mlp_test.txt
VARIANTS="base qt32 qt16 base#2"
grep -q " passed" $OUT/mlp_test.txt && VARIANTS="base fused_mlp fused_mlp_s8 qt32 qt16 base#2 fused_mlp#2"
AB_CONTEXTS=1024,8192 timeout 480 python scripts/ab_decode.py $OUT/ab_next.json qwen3-4b $VARIANTS 2>&1 | grep "ctx"
