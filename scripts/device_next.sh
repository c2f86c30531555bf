#!/usr/bin/env bash
# Device runs for the next session (each < 600 s). Session 22 ran steps 13 (register cap: no gain), 14 (the split's
# anatomy), 15 (o's fill paced: shipped for one row), 16 and 1, and the combine folded into o (equal, removed;
# results *_session22*.json). Session 23 ran an L2 warm branch (steps 17-18) and held fills (19): slower, removed;
# one-step split buffers and o's ring depth (20-21): o's 3-stage ring kept for the 1280-key short graph
# (*_session23*.json); 22: its end run. Session 24 ran 23-24 (the short graphs sized per bound: shipped), 1 (the end
# run: the suite outran its 420 s after 39 of 40 tests) and a 2560-key Gluon graph (slower; *_session24*.json).
# Session 25 ran 27 (qkv split-K 2: slower), 26 (short tiers: shipped), 1, 28 (norm warps: slower; 2/4 rows at
# 2048 keys: shipped), 25 (the end run), decode_loop_gaps.py and a tile A/B (*_session25*.json). Session 26 ran 29
# (ADVANCE and RING_READBACK: shipped on), a qkv ring-depth A/B (slower), 1 and 25 (the end run) and an LM head A/B
# (Gluon: equal in the bench; *_session26*.json). Session 27 ran 31 (26's staged first norm gathering the embedding,
# and the LM head writing the argmax's chunk winners: both equal at 1k, removed; fold_ab_*_session27.json), then 1 and
# 25 (the end run), 8 (Qwen3-8B) and 32 (the Gluon products asking L2 for tiles past their ring: much slower, removed;
# code in 9c7b25a; ahead_ab_*_session27.json), and qkv at 32-row Gluon tiles (mma.sync: same bits, slower, removed;
# code in 952e554; bn32_ab_*_session27.json). Session 28 ran scripts/ab_ablate.py (the attention chain costs 4.8 us a
# layer at 1k: attention_ablation_*), a cluster split + combine probe (no gain: cluster_chain_probe_*) and the bench
# alone (kernels_*_session28.json). Session 29 ran the lean-merge A/B (equal, removed), a pipelined Gluon split at 8k
# (much slower, removed; code in 45fdb03), the end run's core GPU tests (16) and the 4B bench (kernels_*_session29.json),
# and two settings A/Bs (retune_ab_*, long_programs_ab_*). Session 30 ran the swapped Gluon split (same bits, slower,
# removed; swap_ab_*), o at split-K 16 (much slower; o16_ab_*), 1 and 25 (all 51 GPU tests passed; the end run,
# kernels_*_session30.json) and a lone row's split programs at 128 (8k -0.6%: shipped; p128_ab_*). Session 31 ran 34 (the one-warp
# Gluon split: same bits, slower; removed; warp1_ab_*), o's late programs unpaced (equal; removed; pace_first_ab_*),
# the norm before qkv at mode 3 (slower; nq3_ab_*), then 1 and 25 (all 51 GPU tests passed; 1k 80.1% of that machine's
# floor; kernels_*_session31.json). Session 32 ran 36 (o's fill at 2 or 3 tiles in flight: slower; pace23_ab_*), 1
# and 25 (all 51 GPU tests passed; 1k 78.5%; kernels_*_session32.json) and 37 (gate_up's partial fill: slower;
# gu_pre_ab_*; the 8B bench, kernels_*_session32_qwen3-8b.json). Session 33 ran scripts/tiled_weights_probe.py and the
# tiled A/Bs (tiled_*_session33.json: o, gate_up and down stored tile by tile, shipped), 1 (one failure, fixed: a
# parameter requiring grad tiled in place) and 38 (its end run: kernels_*_session33.json, 81.3%; the engine-level
# tiled test and the last test of the second half cut by the call's time). Next: 39 (those two tests, then the 8B's
# tiled A/B), 41 and 40 (tiles retuned on tiled weights; the drafter tiled), 2 (the kernel timeline: the last one is
# session 23's), then 1 and 25 after any change.
# Session 34 ran 42 (39's two tests passed; MLP tiles retuned: slower; 8B tiled: equal), 38 (78.2%), 43 (qkv in 16 KB
# tiles and o paced at 2: slower; the drafter tiled: propose -0.4%, shipped) and a 1k end run (79.8%). Next: the
# schedule of docs/research/megakernel-gluon.md steps 2-4; the full suite (1 and 25) at the shipped code.
# Session 35 ran 45's parts (the products' waits bound a cross-boundary schedule at under 3%; the products alone stream
# at the copy bandwidth when nothing waits; the copy bandwidth read 4.14 and 4.24 TB/s in two processes on one machine:
# the bench now copies 4 GiB at both ends of a run), 1 (27 passed) and the bench. Next: 25 (the second half at this
# code), then 46 (the register-fed weight loads of docs/research/megakernel-gluon.md's session-35 status, staged).
# Session 36 ran 46 (register-fed products: the same bits; alone in a chain o faster, the rest slower) and a step 47
# (o register-fed in the engine, code in 2bf1fb7: its tests passed, 1k decode +2.7%; removed), a step 48 (o's paced
# fill in 8 KB tiles: slower), 25 and the kernel timeline (*_session36.json). Session 37 ran 49 (the norms
# at PDL mode 5: slower or equal, removed; norm_pdl5_ab_*_session37.json). Session 38 ran 50-51 (small kernels at
# fewer warps: equal or much slower; the combine variants were no-ops), 52 (XRING 0: equal or slower; the 4B
# bench at 1k, 78.3%), 53 (gate_up's and qkv's fills paced at 2-3: slower), 54 and 56 (launch timing around the norms;
# shipped for one row: graphs.SHORT_PDL_ONE_ROW, -0.8%); 55 was not run (no machine). Next: 25 and 1 (the suite at this
# code), the bench (the one-row modes' figure), 57 (staged: more launch timings, the combine at fewer warps).
# Session 39 ran 25 and 1 (all 53 GPU tests passed; the bench: 78.9%; kernels_*_session39.json) and 57 (more one-row
# launch timings: slower; the combine at 2 warps: 4 rows -1.1%; one_row_more_ab_*_session39.json). Next: 58 (the
# combine at 2 warps: its A/B at 1k/8k, its bits tests, the bench), then ship it if it holds.
# Session 40 had no device (none lent): it added KV pages on demand with preemption, log-probabilities and a prefix
# cache; their GPU tests (bf16, graphs) are staged as 59 and are part of the suite's halves (1 and 25). Next: 59,
# then 58.
# Session 41 had no device either: it added logit processing (penalties, logit_bias, min_p) and guided decoding; their
# GPU tests are in 59 (carry .whl: the xgrammar wheels, downloaded with `pip download xgrammar==0.2.8
# apache-tvm-ffi==0.1.15.post2 pydantic==2.13.4 pydantic-core==2.46.4 annotated-types typing-inspection --no-deps
# --python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64`: the
# device lacks pydantic). It ran late in session 41: all its tests passed (gpu_tests_h200_2026-12-05_session41.json),
# its A/Bs and the 4B bench at 1k (80.3% of the floor) are in benchmarks/results/*_2026-12-05*.
# Session 42 ran 58 (the combine at 2 warps: equal; 32 splits a chunk: 1k -0.7%, 8k -1.4%, shipped as
# triton_attention.CHUNK = 32; comb_w2_ab_*_session42.json), 29 GPU tests touching attention at CHUNK 32 (all passed;
# gpu_tests_*_session42.json) and the 4B bench at 1k/8k (80% / 69%; kernels_*_session42.json). Next: 60 (the bench
# with its new processed-request figures), then 1 and 25 (the whole suite at this code: penalties.History and
# allowed_token_ids run in the logit-processing GPU test).
# Session 43 ran 60 at ac84fd7 with the GPU tests of session 42's changes (6 passed; gpu_tests_*_session43.json;
# processed requests before this session's change: plain 3.04 vs 2.42 ms/token, kernels_processed_*_session43.json),
# then moved processed rows onto the device (one read, chained rounds, one step ahead) and let guided requests
# decode unprocessed inside a thinking block, and drafted the text grammars force; no machine was lent for more.
# Next: 61 (their GPU tests and the A/B), 62, then 1 and 25.
# Session 44 had no device (none lent): it masked guided requests' rows before the round's one read
# (processed.GUIDED_ON_DEVICE; its GPU test is test_bf16_guided_decoding, in 61; its A/B the second half of 62) and
# added the speculation bypass (spec/bypass.py, on by default: 63). Next: 61, 62, 63, then 1 and 25.
# Session 45: no machine could be started (nine attempts); it made guided rows unmasked where their tokens can be
# checked after the read (processed.GUIDED_CHECKED; plain guided decoding one step ahead; their GPU tests are in 64:
# test_bf16_guided_decoding, test_lookahead_equals_ordinary_rounds_with_graphs). Next: 64, 65,
# then 1 and 25.
# Session 46: no H200 could be started; late in the session an H100 ran 64 (6 GPU tests passed; 4B at 1k 85.1% of
# that machine's floor: *_h100_*_session46.json) and 11 core GPU tests (passed). It checked top-k guided draws
# instead of masking them (processed.FILTERED_CHECKED; its GPU tests passed in 64). Next, on an H200: 64's bench
# (the 80% target), 65, then 1 and 25.
# Session 47: H100s only (an H200 was asked for: refused or an H100 came). 64 at f87d063 (6 passed; 1k 85.1%), 65
# (tiny-pair A/Bs: noisy), 66 (1k 85.6% / 8k 77.1%; the bypass's costs on the tiny pair), scripts/ab_bypass_full.py
# (the bypass at full size: 94-96% of plain where drafts never pay), 1 (31 passed) and 26 of 25's 30 tests (the last
# 4 cut by the budget). It then keyed the bypass's ratios by sampling and let plain guided top-k decoding go one step
# ahead: neither has run on a GPU. Next, on an H200 if one comes: 67 (the changed paths' GPU tests, the 4 tests not
# run, the 4B bench at 1k/8k, the bypass at full size), then 1 and 25 again.
# Session 48: an H200 ran 67 (7 GPU tests passed; 4B 1k 79.6% and 79.8% in two runs, 8k 69.1%; the bypass at full size:
# 97% of plain where drafts never pay) and the tiny pair's bypass A/B; then H100s ran 68 (the chained staging kernel:
# its 6 GPU tests passed; the tiny pair's rounds 1.29 -> 0.64 ms, scripts/ab_chain_stage.py) and the 4B bench at 1k
# (processed rounds 11.7 ms: most likely the kernel compiling inside them; now compiled at capture). Next: 69, 70 (the
# sampled steps' host profile), then 1 and 25 (the suite at this code), the 4B bench on an H200.
# Session 49: H100s ran 69 (7 passed; processed rounds back to 4.7 ms), 70 and 71 (the sampler graphs' first form: 11
# passed; tiny pair sampled plain 1471 -> 3857 tokens/s); an H200 ran 72 (19 passed; 8B 1k 91.1%), the 4B bench (1k
# 80.6% and 80.9% in two runs, 8k 70.0%) and the other 37 GPU tests (all passed). Next: 73 (the sampler graphs' shipped
# whole-tier form: its GPU tests and A/B have not run).
# usage (device tool): bash scripts/device_next.sh N
# 61. (session 43) the GPU tests of processed rows on the device and thinking blocks (logit processing, guided with a
#     thinking block, lookahead, sampled), then scripts/ab_processing.py (DEVICE_PROCESSING off/on, twice each)
# 62. (session 43) forced drafts' A/B on the tiny pair (scripts/ab_guided_drafts.py cuda forced), then (session 44)
#     guided rows masked before the one read (... cuda ondevice)
# 63. (session 44) the speculation bypass: its GPU test (graphs, bf16), then scripts/ab_bypass.py on the tiny pair
# 1. the GPU suite's first half (with the Gluon split's tests: 47 tests take about 540 s), then 25 for the rest
# 25. the GPU suite's second half, then the 4B kernel bench at 1k and 8k (the model's own window)
# 2. the kernel timeline of the decode, verify and propose graphs, and where sampled decoding's time goes
# 3. the Gluon attention split (ops/gluon_split.py, off): its GPU tests, then the 4B A/B at 1k and 8k
# 4. the Gluon split with the q/k norm + RoPE kernel at PDL mode 3 (session 16's A/B)
# 5. the combine's unrolled chunks with a 40k window (session 16's A/B)
# 7. where the Gluon split loses at 8k and at 8 rows: the kernel timelines of the Triton and Gluon splits at ctx 8k
# 8. the Qwen3-8B kernel bench at 1k and 8k with the model's own window (session 15's 89% / 85% used ctx + 1024)
# 10. (session 19's, run in session 20) the attention chain's anatomy from %globaltimer stamps in the short graph
#    (ops/stamps.py), with and without the split's keyless programs ending at once (SPLIT_DEAD_EXIT), then the A/B of that switch and
#    of SPLIT_KV_TOGETHER (a split step's values loaded with its keys: one memory round trip less per step) and
#    COMBINE_PRELOAD (the combine's unrolled chunks loaded at once: two round trips less) and ROPE_V_EARLY (the q/k
#    norm + RoPE kernel loading a key head's values with its key: one round trip less)
# 13. (session 21, staged) the split kernel's register cap (triton_attention.SPLIT_MAXNREG: three or four programs per
#    SM instead of two; alone at 8k the split streams at about 1.9 TB/s): its bits test, the attention-alone probe,
#    then the 4B A/B at 2k and 8k (a lone row at 1k runs the Gluon split, which the cap does not touch)
# 14. (session 21, staged) where a lone row's split spends its fixed ~4.4 us: its GPU stamps test, then the split's
#    programs stamped at each dependent step (kv lengths, page ids, keys and values, products: ops/stamps.py columns
#    4-7) in the attention-alone probe at ctx 16, 1k and 8k, against the unstamped kernel's time
# 15. (session 22) the products' ring fill before the PDL wait paced (gluon_gemv.PACED: one tile per program in
#    flight): its bits test, then the 4B A/B at 1k, 2k and 8k with o's fill paced at 1 or 2 tiles per program
#    (the first run, paced_ab_*_session22.json, also paced gate_up, qkv and all four: slower)
# 22. (session 23) the end run: the GPU tests o's lone-row ring touches, then the 4B bench at 1k and 8k
# 23. (staged in session 23, not run) the short graphs' attention sized for their bounds, not the 40k window
#    (engine/graphs.SHORT_SIZED: the 1280-key graph's Gluon split then runs one split per program, 80 KB, not the
#    16-split loop at 96 KB), with one-step split buffers (triton_attention.GLUON_ONE_STEP: 48 KB, which only engages
#    sized), o's ring at 4 or 3 stages, and a Gluon-split graph up to 2048 keys; then the 8B's o ring at 3 stages
# 24. (session 24) sizing per bound (SHORT_SIZED a tuple of bounds): the 1280-key graph sized with one-step buffers,
#    o at 3 or 4 stages; a 2048-key Gluon-split graph sized, alone or after the 1280 one
# 26. (staged in session 24) short graphs per row count: 1 row only (session 23's), 8 rows up to 1280 keys (shipped),
#    up to 2048, every bound, and 2-8 rows up to 1280: replays of 1, 2, 4 and 8 rows at 1k, 1.5k and 2k
# 27. (staged in session 24) the 4B qkv product at split-K 2 (all SMs), its slices summed by the q/k norm + RoPE
#    kernel (triton_gemm.QKV_SLICES_TO_ROPE): its GPU bits test, then the A/B at 1k and 8k, 1 and 8 rows
# 28. (session 25) both RMSNorm kernels at 8 or 16 warps (triton_fused.NORM_WARPS; other bits), 1k, 1 and 8 rows;
#    then 2 and 4 rows in the 2048-key short graph too, at 1.5k and 2k
# 29. (staged in session 25) decode rows moved on by the graph's argmax (graphs.ADVANCE), and their tokens written to
#    pinned host memory by it (RING_READBACK): the GPU tests of plain decoding with both on, the A/B of decode
#    ms/token at 1k and 8k (advance, advance_ring), and the decode loop's gaps with both on
# 36. (staged in session 31) o's ring fill before its wait with 2 or 3 tiles per program in flight (gluon_gemv.PACED)
#    in the lone row's 1280-key graph only: the 4B A/B at 1k
# 37. (session 32) gate_up's ring fill before its wait at 2 or 3 of its 4 tiles (gluon_gemv.PREFETCH): the 4B A/B at
#    1k, then step 8
# 38. (session 33) an end run in one call: the tiled-weight GPU tests, the 4B bench, the suite's second half in what is
#    left of 500 s (give the tiled tests more than 120 s: the engine-level one did not end within it)
# 41. (staged in session 33) gate_up's and down's Gluon tiles and rings retuned on tiled weights, qkv in 64 x 128 tiles
#    row-major and tiled: the 4B A/B at 1k
# 40. (session 33, run in 34: shipped on) the drafter's o, gate_up and down stored tile by tile (gluon_gemv.TILED_DRAFTER): the
#    engine-level tiled test with it on (speculative against plain), then the propose A/B at 1k
# 39. (staged in session 33) the engine-level tiled test and test_attention_load_schedules_keep_the_tokens (cut short in
#    38), then the Qwen3-8B A/B of its o, gate_up and down stored tile by tile (ab_decode tiled_8b)
# 9. the sort-free sampler (ops/triton_nucleus.py, session 17): its GPU tests and the sampled ones, then the 4B bench
#    at 1k with it off and on, twice (sampled plain ms/token, sampled spec ms/round)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests:$PWD/scripts
OUT=${OUT:-/tmp/out}
if [ "${1:-1}" = 1 ] || [ "$1" = 25 ]; then  # the GPU suite in two halves (each under the device's 600 s), the bench
  python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --collect-only 2>/dev/null | grep "::" > $OUT/ids.txt
  half=$(( ($(wc -l < $OUT/ids.txt) + 1) / 2 ))
  if [ "${1:-1}" = 1 ]; then ids=$(head -n $half $OUT/ids.txt); else ids=$(tail -n +$((half + 1)) $OUT/ids.txt); fi
  timeout 500 python -m pytest -q -m gpu -p no:cacheprovider --durations=12 $ids > $OUT/gpu_tests_$1.txt 2>&1
  grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests_$1.txt | head -12
  if [ "$1" = 25 ]; then
    timeout 150 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --out $OUT/kernels.json \
      2>&1 | grep "^qwen3"
  fi
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
elif [ "$1" = 9 ]; then
  timeout 240 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k \
    "kernel_sampler or sampled or sample_rows or top_p or lookahead or propose_queued or coupled" 2>&1 | tail -3
  for run in 0a 1a 0b 1b; do
    SPARKDEC_KERNEL_SAMPLER=${run:0:1} timeout 100 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 \
      --no-peer --no-sim --out $OUT/kernels_sampler$run.json 2>&1 | grep "^qwen3" | sed "s/^/sampler=$run /"
  done
elif [ "$1" = 10 ]; then
  timeout 120 python scripts/split_stamps_probe.py $OUT/split_stamps.json base chain_loads 2>&1 | grep -v Warn | tail -3
  timeout 120 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "load_schedules" 2>&1 | tail -1
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 250 python scripts/ab_decode.py $OUT/load_schedules_ab.json \
    qwen3-4b base dead_exit kv_together combine_preload rope_v_early pages_early chain_loads base#2 chain_loads#2 2>&1 \
    | grep "ctx "
elif [ "$1" = 13 ]; then
  timeout 120 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "register_cap" 2>&1 | tail -1
  timeout 100 python scripts/attention_alone_probe.py $OUT/attention_alone_cap.json 1024,8192 \
    triton_p64,triton_r168,triton_r128,triton_p128,triton_p128_r168 2>&1 | grep "us per layer"
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=2048,8192 timeout 300 python scripts/ab_decode.py \
    $OUT/split_cap_ab.json qwen3-4b base split_r168 split_r128 base#2 2>&1 | grep "ctx "  # (not 1k: Gluon there)
elif [ "$1" = 14 ]; then
  timeout 120 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "stamps_keep" 2>&1 | tail -1
  timeout 150 python scripts/attention_alone_probe.py $OUT/split_anatomy.json 16,1024,8192 \
    triton_p64,stamped_p64,triton_no_pdl 2>&1 | grep -E "us per layer|anatomy"
elif [ "$1" = 15 ]; then
  timeout 150 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "paced or gluon_products" 2>&1 | tail -1
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,2048,8192 timeout 400 python scripts/ab_decode.py \
    $OUT/paced_ab.json qwen3-4b base o_paced o_paced2 short_triton_o_paced base#2 o_paced#2 2>&1 | grep "ctx "
elif [ "$1" = 16 ]; then  # (session 22) with o paced: the Gluon split up to 3072 keys at 2k; the 8B's o paced
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=2048 timeout 120 python scripts/ab_decode.py $OUT/paced_gluon_2k_ab.json \
    qwen3-4b base short_gluon base#2 short_gluon#2 2>&1 | grep "ctx "
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 330 python scripts/ab_decode.py $OUT/paced_8b_ab.json \
    qwen3-8b base o8b_paced base#2 o8b_paced#2 2>&1 | grep "ctx "
elif [ "$1" = 22 ]; then  # (session 23) the end run: the tests the lone row's o ring touches, then the 4B bench
  timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k \
    "paced_fill or bit_identical or replay_equals_eager or short_graph or gluon_products" 2>&1 | tail -1
  timeout 200 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 \
    | grep "^qwen3"
elif [ "$1" = 23 ]; then  # (staged in session 23) short graphs sized for their bounds; one-step split; 2k Gluon graph
  timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "one_step or hands_over" 2>&1 \
    | tail -1
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,1536,2048 timeout 330 python scripts/ab_decode.py \
    $OUT/sized_ab.json qwen3-4b base sized sized1 sized1_o4 sized_2k_gluon sized_2k_gluon1 base#2 sized1#2 2>&1 \
    | grep "ctx "
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 200 python scripts/ab_decode.py $OUT/lone3_8b_ab.json \
    qwen3-8b base lone3_8b base#2 lone3_8b#2 2>&1 | grep "ctx "
elif [ "$1" = 24 ]; then  # (session 24) sizing per bound: the 1280-key graph sized, one-step; a 2048-key Gluon graph
  timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "hands_over" 2>&1 | tail -1
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,1536,1792 timeout 400 python scripts/ab_decode.py \
    $OUT/sized_bound_ab.json qwen3-4b base s1280 s1280_o4 g2k1 g2k1_o4 s1280_g2k1 s1280_o4_g2k1 base#2 s1280#2 \
    s1280_o4#2 g2k1#2 s1280_g2k1#2 2>&1 | grep "ctx "
elif [ "$1" = 26 ]; then  # (staged in session 24) which row counts and bounds get short graphs
  env AB_ROWS=1,2,4,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,1536,2048 timeout 500 python scripts/ab_decode.py \
    $OUT/short_tiers_ab.json qwen3-4b short_t1 base t8_2048 t8_all t1248 base#2 t1248#2 2>&1 | grep "ctx "
elif [ "$1" = 27 ]; then  # (staged in session 24) qkv at split-K 2, its slices summed by the RoPE kernel
  timeout 120 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "qkv_slices" 2>&1 | tail -1
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 400 python scripts/ab_decode.py \
    $OUT/qkv_s2_ab.json qwen3-4b qkv_s2 qkv_s2_rope qkv_s2_rope_bk128 base qkv_s2#2 qkv_s2_rope#2 base#2 2>&1 \
    | grep "ctx "
elif [ "$1" = 28 ]; then  # (session 25) the RMSNorm kernels' warps; 2 and 4 rows in the 2048-key short graph
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 250 python scripts/ab_decode.py \
    $OUT/norm_warps_ab.json qwen3-4b norm_w8 norm_w16 base norm_w8#2 norm_w16#2 base#2 2>&1 | grep "ctx "
  env AB_ROWS=2,4 AB_PLAIN_ONLY=1 AB_CONTEXTS=1536,2048 timeout 200 python scripts/ab_decode.py \
    $OUT/t24_ab.json qwen3-4b base t24_2048 base#2 t24_2048#2 2>&1 | grep "ctx "
elif [ "$1" = 29 ]; then  # (staged in session 25) decode rows moved on by the graph (graphs.ADVANCE): tests, A/B, gaps
  SPARKDEC_GRAPH_ADVANCE=1 SPARKDEC_GRAPH_RING=1 timeout 240 python -m pytest -q -m gpu tests/test_gpu.py \
    -p no:cacheprovider -k "lookahead or bit_identical or replay_equals_eager or eight_sequences" 2>&1 | tail -2
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 200 python scripts/ab_decode.py \
    $OUT/advance_ab.json qwen3-4b base advance advance_ring base#2 advance#2 advance_ring#2 2>&1 | grep "ctx "
  SPARKDEC_GRAPH_ADVANCE=1 SPARKDEC_GRAPH_RING=1 timeout 120 python scripts/decode_loop_gaps.py \
    $OUT/decode_loop_gaps_advance.json 2>&1 | grep -v Warn | tail -16
elif [ "$1" = 36 ]; then  # (staged in session 31) o's fill at 2 or 3 tiles per program in flight, 1280-key graph only
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 300 python scripts/ab_decode.py $OUT/pace23_ab.json \
    qwen3-4b base pace2_1280 pace3_1280 base#2 pace2_1280#2 pace3_1280#2 2>&1 | grep "ctx "
elif [ "$1" = 37 ]; then  # (session 32) gate_up's pre-wait fill at 2 or 3 of its 4 tiles, then the Qwen3-8B bench
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 230 python scripts/ab_decode.py $OUT/gu_pre_ab.json \
    qwen3-4b base gu_pre2 gu_pre3 base#2 gu_pre2#2 gu_pre3#2 2>&1 | grep "ctx "
  bash "$0" 8
elif [ "$1" = 38 ]; then  # (session 33) the end run in one call: the tiled-weight tests, the 4B bench, then the
  # second half of the GPU suite in what is left of 500 s
  timeout 240 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "tiled" > $OUT/gpu_tests_tiled.txt 2>&1
  grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests_tiled.txt | head -8
  timeout 160 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 \
    | grep "^qwen3"
  python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --collect-only 2>/dev/null | grep "::" > $OUT/ids.txt
  half=$(( ($(wc -l < $OUT/ids.txt) + 1) / 2 ))
  timeout $(( 500 - SECONDS )) python -m pytest -q -m gpu -p no:cacheprovider --durations=5 \
    $(tail -n +$((half + 1)) $OUT/ids.txt) > $OUT/gpu_tests_25.txt 2>&1
  grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests_25.txt | head -12
elif [ "$1" = 39 ]; then  # (staged in session 33) what session 33's end run cut short, then the 8B's tiled A/B
  timeout 300 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --durations=3 -k \
    "engines_with_tiled or attention_load_schedules" 2>&1 | grep -E "passed|failed|^E  |^FAILED|s call" | head -12
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 280 python scripts/ab_decode.py $OUT/tiled_8b_ab.json \
    qwen3-8b base tiled_8b base#2 tiled_8b#2 2>&1 | grep "ctx "
elif [ "$1" = 42 ]; then  # (session 34) 39's tests, then 41's MLP tiles at one row, then the 8B tiled, in 480 s
  timeout 300 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --durations=3 -k \
    "engines_with_tiled or attention_load_schedules" 2>&1 | grep -E "passed|failed|^E  |^FAILED|s call" | head -12
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout $(( 480 - SECONDS )) python scripts/ab_decode.py \
    $OUT/tiled_retune_ab.json qwen3-4b base tiled_gu256 tiled_dn_st8 tiled_gu_st6 tiled_dn_st4 base#2 2>&1 | grep "ctx "
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout $(( 480 - SECONDS )) python scripts/ab_decode.py \
    $OUT/tiled_8b_ab.json qwen3-8b base tiled_8b base#2 tiled_8b#2 2>&1 | grep "ctx "
elif [ "$1" = 43 ]; then  # (session 34) qkv in 16 KB tiles (row-major, tiled), o paced at 2 on tiled weights; then 40
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 280 python scripts/ab_decode.py $OUT/tiled_qkv128_ab.json \
    qwen3-4b base qkv128 tiled_qkv128 pace2_1280 base#2 qkv128#2 tiled_qkv128#2 2>&1 | grep "ctx "
  bash "$0" 40
elif [ "$1" = 44 ]; then  # (session 34) a short end run: the tiled tests (drafter tiled on), then the 4B bench
  timeout 150 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "tiled" 2>&1 \
    | grep -E "passed|failed|^E  |^FAILED" | head -8
  timeout 170 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --out $OUT/kernels.json 2>&1 \
    | grep "^qwen3"
elif [ "$1" = 45 ]; then  # (session 35) the waits ablated (timing only), the copy bandwidth's steadiness, the 4B bench
  env AB_ROWS=1 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 330 python scripts/ab_ablate.py $OUT/wait_ablation.json qwen3-4b \
    clamped nowait_o nowait_gate_up_down nowait_all no_short_slices nowait_no_short nowait_no_attention clamped#2 2>&1 \
    | grep -E "ctx |Error"
  timeout 60 python scripts/copy_bandwidth_probe.py $OUT/copy_bw.json
  timeout 170 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --out $OUT/kernels.json 2>&1 \
    | grep -E "^qwen3|^copy"
elif [ "$1" = 46 ]; then  # (staged in session 35) weights fed to wgmma from registers: bits against the shipped product (output or split-K slices), time
  timeout 60 python scripts/register_fed_probe.py --compile-only
  timeout 300 python scripts/register_fed_probe.py $OUT/register_fed_probe.json 2>&1 | grep -E "^(qkv|o|gate_up|down) |Error|Traceback"
elif [ "$1" = 40 ]; then  # (staged in session 33) the drafter's layers stored tile by tile: its tokens, then the propose
  GPU_TILED_DRAFTER=1 timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k \
    "engines_with_tiled" 2>&1 | grep -E "passed|failed|^E  |^FAILED" | head -8
  env AB_PROPOSE_ONLY=1 AB_CONTEXTS=1024 timeout 250 python scripts/ab_decode.py $OUT/tiled_draft_ab.json qwen3-4b \
    base tiled_draft base#2 tiled_draft#2 2>&1 | grep "ctx "
elif [ "$1" = 41 ]; then  # (staged in session 33) the MLP's Gluon tiles retuned for the tiled layout
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 540 python scripts/ab_decode.py $OUT/tiled_retune_ab.json \
    qwen3-4b base tiled_gu256 tiled_gu_st6 tiled_dn_st4 tiled_dn_st8 qkv128 tiled_qkv128 base#2 2>&1 | grep "ctx "
elif [ "$1" = 50 ]; then  # (staged in session 38) the chain's small kernels at 1 or 2 warps (other bits: the tokens
  # column compares each with base; a count that ships needs the GPU suite with it)
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 560 python scripts/ab_decode.py $OUT/small_warps_ab.json \
    qwen3-4b base norm_w2 rope_w1 rope_w2 comb_w1 comb_w2 small_w2 base#2 small_w1 2>&1 | grep -E "ctx |Error"
elif [ "$1" = 51 ]; then  # (session 38) 50's two gains together, with repeats
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 560 python scripts/ab_decode.py $OUT/rope_comb_w2_ab.json \
    qwen3-4b base rope_comb_w2 rope_w2 comb_w2 base#2 rope_comb_w2#2 rope_w2#2 comb_w2#2 base#3 rope_comb_w2#3 2>&1 \
    | grep -E "ctx |Error"
elif [ "$1" = 52 ]; then  # (staged in session 38) x loaded once after the wait for o, qkv, down; then the 4B bench at 1k
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 330 python scripts/ab_decode.py $OUT/xring0_ab.json \
    qwen3-4b base xr0_o xr0_qkv xr0_down base#2 xr0_o#2 xr0_qkv#2 2>&1 | grep -E "ctx |Error"
  timeout 200 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --out $OUT/kernels.json 2>&1 \
    | grep -E "^qwen3|^copy"
elif [ "$1" = 53 ]; then  # (staged in session 38) gate_up's and qkv's fills paced at 2-3 tiles per program in flight
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 500 python scripts/ab_decode.py $OUT/fill_pace_ab.json \
    qwen3-4b base gu_pace2 gu_pace3 qkv_pace2 gu_qkv_pace2 base#2 gu_pace2#2 gu_pace3#2 qkv_pace2#2 base#3 2>&1 \
    | grep -E "ctx |Error"
elif [ "$1" = 54 ]; then  # (staged in session 38) the next product launched during the tail of the one before the norm
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 540 python scripts/ab_decode.py $OUT/tail_launch_ab.json \
    qwen3-4b base d6_n3 d1_n3 o1_nm3 d6_n3_o1_nm3 d6 base#2 d6_n3#2 d1_n3#2 o1_nm3#2 base#3 2>&1 | grep -E "ctx |Error"
elif [ "$1" = 55 ]; then  # (session 38) 54's gains in the one-row short graphs only, with repeats
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 420 python scripts/ab_decode.py $OUT/one_row_pdl_ab.json \
    qwen3-4b base one_d6_o1_nm3 one_d6 one_o1_nm3 base#2 one_d6_o1_nm3#2 one_d6#2 one_o1_nm3#2 base#3 \
    one_d6_o1_nm3#3 2>&1 | grep -E "ctx |Error"
  timeout 150 python -c "import sys, pytest; from sparkdec.engine import graphs as g
g.SHORT_PDL_ONE_ROW = {'gluon_down': 6, 'gluon_o': 1, 'norm_mlp': 3}
sys.exit(pytest.main(['-q', '-m', 'gpu', 'tests/test_gpu.py', '-p', 'no:cacheprovider', '-k', 'engines_with_tiled']))" \
    2>&1 | grep -E "passed|failed|^E  |^FAILED" | head -8
elif [ "$1" = 56 ]; then  # (session 38) 55 cut to fit the device time left: the combined one-row modes, then the test
  env AB_ROWS=1,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 150 python scripts/ab_decode.py $OUT/one_row_pdl_ab.json \
    qwen3-4b base one_d6_o1_nm3 base#2 one_d6_o1_nm3#2 base#3 one_d6_o1_nm3#3 2>&1 | grep -E "ctx |Error"
  timeout 120 python -c "import sys, pytest; from sparkdec.engine import graphs as g
g.SHORT_PDL_ONE_ROW = {'gluon_down': 6, 'gluon_o': 1, 'norm_mlp': 3}
sys.exit(pytest.main(['-q', '-m', 'gpu', 'tests/test_gpu.py', '-p', 'no:cacheprovider', '-k', 'engines_with_tiled']))" \
    2>&1 | grep -E "passed|failed|^E  |^FAILED" | head -8
elif [ "$1" = 57 ]; then  # (staged in session 38) more launch timings for one row, the one-row modes for 2-4 rows, the
  # combine at fewer warps (other bits: the tokens column compares with base)
  env AB_ROWS=1,2,4 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024 timeout 560 python scripts/ab_decode.py $OUT/one_row_more_ab.json \
    qwen3-4b base one_gu6 one_gu1 one_qkv6 one_124 comb_w2 comb_w1 base#2 one_gu6#2 one_124#2 comb_w2#2 base#3 2>&1 \
    | grep -E "ctx |Error"
elif [ "$1" = 58 ]; then  # (session 39) the combine at 2 warps (57: 4 rows -1.1%), 32 splits a chunk, the one-row modes for 2 rows:
  # the A/B at 1k and 8k, then the bits tests and the 4B bench at 1k with the combine at 2 warps
  env AB_ROWS=1,2,4,8 AB_PLAIN_ONLY=1 AB_CONTEXTS=1024,8192 timeout 330 python scripts/ab_decode.py $OUT/comb_w2_ab.json \
    qwen3-4b base comb_w2 one_12 comb_w2_one_12 comb_c32 comb_w2_c32 base#2 comb_w2#2 comb_w2_one_12#2 comb_c32#2 \
    base#3 comb_w2#3 2>&1 \
    | grep -E "ctx |Error"
  timeout 150 python -c "import sys, pytest; from sparkdec.ops import triton_attention as a; a.COMBINE_WARPS = 2
sys.exit(pytest.main(['-q', '-m', 'gpu', 'tests/test_gpu.py', '-p', 'no:cacheprovider', '-k',
 'bit_identical or replay_equals_eager or engines_with_tiled or rows_in_blocks or gluon_split_gives']))" 2>&1 | grep -E "passed|failed|^E  |^FAILED" | head -8
  timeout 100 python -c "from sparkdec.ops import triton_attention as a; a.COMBINE_WARPS = 2
from sparkdec.cli import main; main(['bench', 'kernels', '--shapes', 'qwen3-4b', '--contexts', '1024', '--out',
 '$OUT/kernels_comb_w2.json'])" 2>&1 | grep "^qwen3"
elif [ "$1" = 59 ]; then  # (sessions 40-41) the serving features' GPU tests with graphs in bf16 (run with carry [".whl"]:
  # xgrammar's wheels for the device's Python 3.12, for the guided test)
  python -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
  timeout 400 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider \
    -k "preempted or logprobs or prefix_cache or logit_processing or guided" 2>&1 \
    | grep -E "passed|failed|^E  |^FAILED" | head -12
  timeout 150 python scripts/ab_prefix_cache.py $OUT/prefix_cache_ab_h200_tiny.json cuda 2>&1 | tail -3
  timeout 120 python scripts/ab_guided_drafts.py $OUT/guided_drafts_ab_h200_tiny.json cuda 2>&1 | tail -4
  timeout 120 python scripts/ab_guided_drafts.py $OUT/processed_drafts_ab_h200_tiny.json cuda processed 2>&1 | tail -5
elif [ "$1" = 64 ]; then  # (session 45) sessions 43-44's GPU tests in one call, then the 4B bench at 1k
  python -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
  timeout 280 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --durations=8 \
    -k "logit_processing or guided_decoding or lookahead or sampled or bypass or top_k_check" \
    > $OUT/gpu_tests_64.txt 2>&1
  grep -E "passed|failed|^E  |^FAILED" $OUT/gpu_tests_64.txt | head -12
  timeout 220 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim \
    --out $OUT/kernels.json 2>&1 | grep -E "^qwen3|copy"
elif [ "$1" = 65 ]; then  # (session 45) the bypass's and the one-read guided path's A/Bs on the tiny pair
  python -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
  timeout 330 python scripts/ab_bypass.py $OUT/bypass_ab_h200_tiny.json cuda 2>&1 | tail -6
  timeout 150 python scripts/ab_guided_drafts.py $OUT/guided_on_device_ab_h200_tiny.json cuda ondevice 2>&1 | tail -4
  timeout 100 python scripts/grammar_walk_cost.py $OUT/grammar_walk_cost_h200host.json 151936 2>&1 | tail -3
elif [ "$1" = 67 ]; then  # (staged in session 47) its changes' GPU tests, the 4 of 25's tests not run, the 4B bench,
  # the bypass at full size (ratios by sampling: the sampled request at c=1 is the one to watch)
  python -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
  timeout 300 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "guided_decoding or lookahead or \
    bypass or gluon_split_decoding or short_graph_gluon or load_schedules" 2>&1 | grep -E "passed|failed|^E  |^FAILED"
  timeout 150 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --no-peer --no-sim \
    --out $OUT/kernels.json 2>&1 | grep -E "^qwen3|copy"
  timeout 140 python scripts/ab_bypass_full.py $OUT/bypass_full_ab.json 2>&1 | tail -6
elif [ "$1" = 73 ]; then  # (staged in session 49) the sampler graphs' whole-tier forms (one per graph tier and
  # filter, live rows at any offset; session 49's A/B and tests ran the per-row-count form): their GPU tests, the
  # sampled end-to-end tests, the tiny pair's A/B again
  timeout 250 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "sampler_graphs or sampled or \
    each_row_what or queued_ahead or logit_processing or lookahead or coupled" 2>&1 | grep -E "passed|failed|^E  |^FAILED"
  PYTHONPATH=$PWD timeout 200 python scripts/ab_sampler_graphs.py $OUT/sampler_graphs_ab.json 2>&1 | tail -4
elif [ "$1" = 72 ]; then  # (session 49) the end-to-end GPU tests the sampler graphs reach (sampled, processed,
  # guided, logprobs, lookahead, coupled drafts, bypass...), then the 8B bench at 1k (last run: session 32, row-major)
  python -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
  timeout 330 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --durations=5 -k "replay_equals_eager or \
    bit_identical or sampled_equals or joins or batch_verify or lookahead or logprobs or logit_processing or \
    top_k_check or guided or prefix_cache or preempted or coupled or kernel_sampler_cut or top_p_kept or bypass or \
    fused_sampler" > $OUT/gpu_tests_72.txt 2>&1; grep -E "passed|failed|^E  |^FAILED|s call" $OUT/gpu_tests_72.txt | head -20
  timeout 180 python -m sparkdec bench kernels --shapes qwen3-8b --contexts 1024 --no-peer --no-sim \
    --out $OUT/kernels_8b.json 2>&1 | grep -E "^qwen3|copy"
elif [ "$1" = 71 ]; then  # (session 49) the sampler's race captured as graphs (engine/sampler_graphs.py): its GPU
  # tests, the tiny pair's sampled A/B (plain sampled steps took 1.14 ms against 0.15 greedy, host-bound: 12 launches),
  # the sampled host profile with it, the 4B bench at 1k (plain sampled 3.32 ms/token against 3.22 greedy on an H100)
  timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "sampler_graphs or sampled or \
    each_row_what or staged_copies or queued_ahead" 2>&1 | grep -E "passed|failed|^E  |^FAILED"
  PYTHONPATH=$PWD timeout 200 python scripts/ab_sampler_graphs.py $OUT/sampler_graphs_ab.json 2>&1 | tail -4
  PYTHONPATH=$PWD timeout 100 python scripts/round_host_profile.py $OUT/round_host_profile_sampled.json cuda sampled \
    > $OUT/round_host_profile_sampled.txt 2>&1; grep -E "^plain:|^spec:|graph launches|Error" $OUT/round_host_profile_sampled.txt
  timeout 100 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim \
    --out $OUT/kernels.json 2>&1 | grep -E "^qwen3|copy"
elif [ "$1" = 70 ]; then  # (staged in session 48) where a plain sampled step's host time goes on the tiny pair (3-5
  # greedy steps a token), with session 48's one-race batch
  PYTHONPATH=$PWD timeout 200 python scripts/round_host_profile.py $OUT/round_host_profile_sampled.json cuda sampled \
    > $OUT/round_host_profile_sampled.txt 2>&1; grep -E "^plain:|^spec:|graph launches|Error" $OUT/round_host_profile_sampled.txt
elif [ "$1" = 69 ]; then  # (staged in session 48) the staging kernel compiled at capture, never specialized: its GPU
  # tests (the queued-ahead test now asserts no compile during rounds), the 4B bench at 1k/8k (processed rounds read
  # 11.7 ms a round when the kernel compiled inside them; 5.5 before), the interleaved A/B on the tiny pair
  timeout 250 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "chain_staging or queued_ahead or each_row_what or sampled" 2>&1 \
    | grep -E "passed|failed|^E  |^FAILED"
  timeout 150 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --no-peer --no-sim \
    --out $OUT/kernels.json 2>&1 | grep -E "^qwen3|copy"
  PYTHONPATH=$PWD timeout 100 python scripts/ab_chain_stage.py $OUT/chain_stage_ab.json 2>&1 | tail -2
elif [ "$1" = 68 ]; then  # (session 48) the chained propose's staging in one kernel: its GPU tests, then the host
  # profile of the tiny pair's rounds with it, without it (SPARKDEC_STAGE_KERNEL=0) and with PDL off (graph launches)
  [ "$2" = notests ] || timeout 280 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "chain_staging \
    or queued_ahead or speculative_greedy_is_bit or joins_keeps or lookahead_equals" 2>&1 | grep -E "passed|failed|^E  |^FAILED"
  for v in base SPARKDEC_STAGE_KERNEL=0 SPARKDEC_PDL=0; do
    name=${v/=/_}; [ $v = base ] && v=
    env $v PYTHONPATH=$PWD timeout 150 python scripts/round_host_profile.py $OUT/round_host_profile_$name.json \
      > $OUT/round_host_profile_$name.txt 2>&1; echo "== $name"; grep -E "^plain:|^spec:|graph launches|Error" \
      $OUT/round_host_profile_$name.txt | head -8
  done
elif [ "$1" = 66 ]; then  # (session 47) the 4B bench at 1k and 8k, then the bypass's A/B with what its choices rested on
  timeout 220 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024,8192 --no-peer --no-sim \
    --out $OUT/kernels.json 2>&1 | grep -E "^qwen3|copy"
  timeout 300 python scripts/ab_bypass.py $OUT/bypass_ab_diag.json cuda 2>&1 | tail -9
elif [ "$1" = 61 ]; then  # (staged in session 43) processed rows on the device: tests, then the 4B A/B
  python -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
  timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider \
    -k "logit_processing or guided_decoding or lookahead or sampled" 2>&1 | grep -E "passed|failed|^E  |^FAILED" | head
  timeout 330 python scripts/ab_processing.py $OUT/processing_ab.json 2
elif [ "$1" = 62 ]; then  # (staged in session 43) forced drafts on the tiny pair, CUDA (guided drafts off there)
  python -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
  timeout 150 python scripts/ab_guided_drafts.py $OUT/forced_drafts_ab_h200_tiny.json cuda forced 2>&1 | tail -4
  # (session 44) a grammar's masks before the round's one read, rounds chained (processed.GUIDED_ON_DEVICE)
  timeout 150 python scripts/ab_guided_drafts.py $OUT/guided_on_device_ab_h200_tiny.json cuda ondevice 2>&1 | tail -4
elif [ "$1" = 63 ]; then  # (staged in session 44) the speculation bypass: its GPU test, then its A/B on the tiny pair
  timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "bypass" 2>&1 \
    | grep -E "passed|failed|^E  |^FAILED" | head
  timeout 350 python scripts/ab_bypass.py $OUT/bypass_ab_h200_tiny.json cuda 2>&1 | tail -6
  # the grammar walk of 1-16 guided requests at a 151936-token vocabulary, one at a time and together on the host's
  # threads (grammar_matcher.WALK_TOGETHER, off: slower on this machine's one thread)
  python -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
  timeout 200 python scripts/grammar_walk_cost.py $OUT/grammar_walk_cost_h200host.json 151936 2>&1 | tail -3
elif [ "$1" = 60 ]; then  # (staged in session 42) the 4B bench at 1k with processed requests' cost (plain ms/token
  # and spec ms/round with repetition + presence penalties, bench/kernels.PROCESSED)
  timeout 200 python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim \
    --out $OUT/kernels_processed.json 2>&1 | grep -E "^qwen3|copy"
elif [ "$1" = 8 ]; then
  timeout 300 python -m sparkdec bench kernels --shapes qwen3-8b --contexts 1024,8192 --no-peer \
    --out $OUT/kernels_8b.json 2>&1 | grep "^qwen3"
elif [ "$1" = 7 ]; then
  TIMELINE_CTX=8192 TIMELINE_VARIANTS=base,rope3_gluon_last_s2 timeout 300 python scripts/graph_timeline.py \
    $OUT/graph_timeline_gluon_8k.json 2>&1 | grep -E "^==|^[a-z_0-9]+: |split|combine"
else
  timeout 200 python scripts/graph_timeline.py $OUT/graph_timeline.json 2>&1 | tail -5
  timeout 250 python scripts/sampled_profile.py $OUT/sampled_profile.json 2>&1 | grep -E "^plain|^spec"
fi
