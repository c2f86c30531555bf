#!/usr/bin/env bash
# Device (session 12): the split kernel combining a lone decode row's splits (triton_attention.COMBINE_IN_SPLIT):
# its A/B at 1k and 8k (plain decode), then the GPU tests with it forced on (decode rows take it, verify rows the
# combine kernel: spec == plain and rows-in-blocks == rows-alone check that both give the same bits).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 240 python scripts/ab_decode.py $OUT/ab_combine.json qwen3-4b base \
  combine_in_split combine_in_split_pdl2 base#2 combine_in_split#2 combine_in_split_pdl2#2 2>&1 | grep "ctx"
timeout 330 python - <<'PY' 2>&1 | tail -6 | tee $OUT/gpu_tests_combine.txt
import sys, pytest
import sparkdec.ops.triton_attention as ta
ta.COMBINE_IN_SPLIT = True
sys.exit(pytest.main(["-q", "-m", "gpu", "tests/test_gpu.py", "-p", "no:cacheprovider", "-x"]))
PY
