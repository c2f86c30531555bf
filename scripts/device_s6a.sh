#!/usr/bin/env bash
# Device (session 6, first call): GPU tests, the Markov chain's ping-pong A/B (propose only), the graph timeline with
# exclusive time per kernel, and the 4B 1k bench. usage: SPARKDEC_COMMIT=<hash> bash scripts/device_s6a.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
OUT=${OUT:-/tmp/out}
python -m pytest -q -m gpu tests/test_gpu.py -x -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; rc=$?
grep -E "passed|failed|^E  " $OUT/gpu_tests.txt | head -8
[ $rc = 0 ] || exit 1
AB_PROPOSE_ONLY=1 AB_CONTEXTS=1024 python scripts/ab_decode.py $OUT/ab_pingpong.json qwen3-4b chain_pingpong \
  chain_forward chain_pingpong#2 chain_forward#2 2>&1 | grep -v Warning
python scripts/graph_timeline.py $OUT/timeline.json 2>&1 | grep -v Warning
python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --out $OUT/kernels.json 2>&1 | grep "^qwen3"
