#!/usr/bin/env bash
# Device, session 9: the Gluon product (ops/gluon_gemv.py) -- bits, per-product times and a 36-layer chain against
# the Triton kernel, then the engine (graph replays, propose) with the probe's table. usage (device tool):
# bash scripts/device_s9a.sh   (~8 minutes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
timeout 400 python scripts/gluon_gemv_probe.py $OUT qwen3-4b 2>&1 | tail -40
test -f $OUT/gluon_configs.json || exit 1
export SPARKDEC_GLUON_CONFIGS=$OUT/gluon_configs.json
timeout 60 python -m pytest -q -m gpu tests/test_gpu.py -k "bit_identical or graph_replay" -x 2>&1 | tail -5
AB_CONTEXTS=1024 timeout 140 python scripts/ab_decode.py $OUT/ab_gluon.json qwen3-4b triton gluon gluon_pdl2 triton#2 \
  gluon#2 2>&1 | grep ctx
