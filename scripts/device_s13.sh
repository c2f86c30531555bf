#!/usr/bin/env bash
# Device, session 13: coupled drafts for exact-sampled speculation (spec/coupling.py, the fused chain's race).
# usage (device tool): bash scripts/device_s13.sh   (~7 minutes)
# 1. the whole GPU suite (the Markov chain kernel changed: coupled rows; greedy rows must keep their drafts)
# 2. the 4B kernel bench at 1k (the propose graph now carries the coupling buffers: its greedy time must not move)
# 3. the tiny pair with CUDA graphs: argmax against coupled drafts, per sampling setting
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
timeout ${GPU_SUITE_LIMIT:-330} python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1
grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -12
timeout 150 python scripts/ab_coupling.py $OUT/coupling_ab.json cuda 2>&1 | tail -9
timeout 100 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --out $OUT/kernels.json 2>&1 | grep "^qwen3"
