#!/usr/bin/env bash
# Device, session 9: PDL mode 2 for the RMSNorm kernels (and the attention combine) only, at 1k and 8k, against the
# shipped plan (Gluon products at 2, the rest at 1). usage (device tool): bash scripts/device_s9d.sh   (~4 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
AB_CONTEXTS=1024,8192 timeout 270 python scripts/ab_decode.py $OUT/ab_pdl_norm.json qwen3-4b base g2_n2c2 g2_n2 \
  2>&1 | grep ctx
