#!/usr/bin/env bash
# Device runs for the next session. Session 15 ran out of device time before the whole GPU suite ran with its last
# two changes: the slices' RMSNorm reading its residual before its PDL wait (triton_fused.RES_EARLY, on; the spec ==
# plain, replay == eager and slices tests passed with it) and the top-p mask without cummax (sampling.after_first_past;
# the 8 sampled/top-p GPU tests passed with it).
# usage (device tool): bash scripts/device_next.sh 1   then   bash scripts/device_next.sh 2   (each < 600 s)
# 1. the GPU suite (all but the staged Gluon split's tests), then the 4B kernel bench at 1k and 8k
# 2. the kernel timeline of the decode, verify and propose graphs, and where sampled decoding's time goes
# 3. the staged Gluon attention split (ops/gluon_split.py, off): its two GPU tests (the Triton split's bits; greedy
#    decoding through graphs and eager equal to the Triton split's), then the 4B A/B at 1k and 8k
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
if [ "${1:-1}" = 1 ]; then  # the suite without the staged Gluon split's tests (step 3), then the bench
  timeout 330 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "not gluon_split" \
    > $OUT/gpu_tests.txt 2>&1
  grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests.txt | head -12
  timeout 130 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 \
    | grep "^qwen3"
elif [ "$1" = 3 ]; then
  timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k gluon_split 2>&1 | tail -3
  env AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 300 python scripts/ab_decode.py $OUT/gluon_split_ab.json \
    qwen3-4b base gluon_split base#2 gluon_split#2 2>&1 | grep "ctx "
elif [ "$1" = 4 ]; then  # session 16: the Gluon split with RoPE at PDL mode 3 (tests with mode 3, then the A/B)
  timeout 240 python -c "import sys, pytest; import sparkdec.ops.triton_gemm as g; g.PDL_KINDS['rope'] = 3
sys.exit(pytest.main(['-q', '-m', 'gpu', 'tests/test_gpu.py', '-p', 'no:cacheprovider', '-k',
 'gluon_split or bit_identical or replay_equals_eager or rows_in_blocks']))" 2>&1 | tail -3
  env AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 300 python scripts/ab_decode.py $OUT/rope3_ab.json qwen3-4b \
    base rope3_gluon_p64 rope3_gluon_last rope3_gluon_last_s2 base#2 rope3_gluon_last#2 2>&1 | grep "ctx "
elif [ "$1" = 5 ]; then  # session 16: the combine's chunks past the unrolled ones in a loop; 40k-context graphs
  timeout 150 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k \
    "bit_identical or replay_equals_eager or rows_in_blocks or row_ranges" 2>&1 | tail -2
  env AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 200 python scripts/ab_decode.py $OUT/combine_static_ab.json \
    qwen3-4b static64 static8 mml40k_static64 mml40k_static8 mml40k_static4 2>&1 | grep "ctx "
else
  timeout 200 python scripts/graph_timeline.py $OUT/graph_timeline.json 2>&1 | tail -5
  timeout 250 python scripts/sampled_profile.py $OUT/sampled_profile.json 2>&1 | grep -E "^plain|^spec"
fi
