#!/usr/bin/env bash
# Device, session 8: the split kernel's query tile (rows x heads per pass, the same for every call: 64 shipped, 16,
# 32; 16 with 2 warps) and pipeline stages. A/B at 1k and 8k (Qwen3-4B shape), then the GPU tests (spec == plain
# bits) with QUERY_TILE 16.
# usage (device tool): bash scripts/device_s8b.sh   (about 6 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024 timeout 200 python scripts/ab_decode.py $OUT/ab_1k.json qwen3-4b base qt16 qt32 qt16_w2 stages1 \
  base#2 qt16#2 2>&1 | grep ctx
AB_CONTEXTS=8192 timeout 100 python scripts/ab_decode.py $OUT/ab_8k.json qwen3-4b base qt16 qt32 2>&1 | grep ctx
timeout 200 python -c "
import sys, pytest
import sparkdec.ops.triton_attention as ta
ta.QUERY_TILE = 16
sys.exit(pytest.main(['-q', '-m', 'gpu', 'tests/test_gpu.py', '-x', '-p', 'no:cacheprovider']))" > $OUT/gpu_tests_qt16.txt 2>&1
grep -E "passed|failed|^E  " $OUT/gpu_tests_qt16.txt | head -8
