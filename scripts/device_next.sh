#!/usr/bin/env bash
# Device runs for the next session. Session 14 ended with no device time for its last commits: the top-p kept set
# closed to a suffix (sampling.suffix_drop), RESIDUAL_EARLY and gemm's norm= removed, the provenance helper; CPU
# tests and sm_90 compiles only.
# usage (device tool): bash scripts/device_next.sh 1   then   bash scripts/device_next.sh 2   (each < 600 s)
# 1. the whole GPU suite, then the 4B kernel bench at 1k and 8k (scripts/device_s10h.sh)
# 2. where a decode layer's time goes now that the split-K sums run in the next RMSNorm: the kernel timeline of the
#    decode, verify and propose graphs, and the ablation (attention chain removed, timing only)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
if [ "${1:-1}" = 1 ]; then
  bash scripts/device_s10h.sh
else
  timeout 200 python scripts/graph_timeline.py $OUT/graph_timeline.json 2>&1 | tail -5
  env AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 250 python scripts/ab_ablate.py $OUT/ablation.json qwen3-4b base \
    no_combine no_attention no_rope_attention sum_off base#2 2>&1 | grep "ctx "
fi
