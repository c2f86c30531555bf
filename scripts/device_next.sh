#!/usr/bin/env bash
# Device runs for the next session. Session 15 ran out of device time before the whole GPU suite ran with its last
# two changes: the slices' RMSNorm reading its residual before its PDL wait (triton_fused.RES_EARLY, on; the spec ==
# plain, replay == eager and slices tests passed with it) and the top-p mask without cummax (sampling.after_first_past;
# the 8 sampled/top-p GPU tests passed with it).
# usage (device tool): bash scripts/device_next.sh 1   then   bash scripts/device_next.sh 2   (each < 600 s)
# 1. the whole GPU suite, then the 4B kernel bench at 1k and 8k (scripts/device_s10h.sh)
# 2. the kernel timeline of the decode, verify and propose graphs, and where sampled decoding's time goes
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
if [ "${1:-1}" = 1 ]; then
  bash scripts/device_s10h.sh
else
  timeout 200 python scripts/graph_timeline.py $OUT/graph_timeline.json 2>&1 | tail -5
  timeout 250 python scripts/sampled_profile.py $OUT/sampled_profile.json 2>&1 | grep -E "^plain|^spec"
fi
