#!/usr/bin/env bash
# Device (written in session 10, not yet run): the RMSNorm folded into the qkv and gate_up Gluon products
# (triton_gemm.NORM_FOLD): its bits test, then the A/B at 1k and 8k, twice each, interleaved.
# usage (device tool): bash scripts/device_norm_fold.sh   (~3 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -k "norm_fold or gluon_products" -p no:cacheprovider 2>&1 | tail -3
AB_CONTEXTS=1024,8192 timeout 300 python scripts/ab_decode.py $OUT/ab_norm_fold.json qwen3-4b base norm_fold base#2 \
  norm_fold#2 2>&1 | grep -v Warning
