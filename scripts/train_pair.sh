#!/usr/bin/env bash
# Train the shipped sparkdec-tiny pair on one GPU (see docs/training.md). STAGES (default "target compare long"):
#   target   train the Qwen3 target (stops at TARGET_STEPS or T_TARGET seconds)
#   compare  [drafter on corpus text || target continuations -> drafter on continuations
#                                                           || the same drafter with markov_rank 0]
#   long     the shipped drafter: corpus text, T_DRAFT_LONG seconds, next to its markov_rank 0 ablation
# Every stage runs on a wall-clock budget. The shipped pair was made in two device calls (each call is limited to
# 10 minutes): STAGES="target compare" (about 350 s on an H200) and STAGES=long (about 280 s).
# Usage: scripts/train_pair.sh WORK_DIR [PACK_DIR]   (PACK_DIR: also write tarballs of the results there)
# Inputs: $DATA/tokens (sparkdec tokenize) and $DATA/tokenizer (sparkdec train-tokenizer); STAGES=long alone
# needs WORK_DIR/target from an earlier call.
set -uo pipefail
WORK=${1:-runs/pair}
PACK=${2:-}
DATA=${DATA:-data}
T_TARGET=${T_TARGET:-225}
TARGET_STEPS=${TARGET_STEPS:-1400}
T_GEN=${T_GEN:-45}
GEN_ROWS=${GEN_ROWS:-12288}
T_DRAFT_CORPUS=${T_DRAFT_CORPUS:-190}
T_DRAFT_GEN=${T_DRAFT_GEN:-150}
T_DRAFT_LONG=${T_DRAFT_LONG:-260}
STAGES=${STAGES:-target compare long}
TARGET_ARGS=${TARGET_ARGS:-}
DRAFT_ARGS=${DRAFT_ARGS:-}
GEN_ARGS=${GEN_ARGS:---batch-size 4096}
SP="python3 -m sparkdec.train.cli"  # = `sparkdec CMD`, without the server dependencies
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
mkdir -p "$WORK"
start=$(date +%s)
trap 'kill $(jobs -p) 2>/dev/null' EXIT  # background trainings never outlive the script
stamp() { echo "[train_pair] $(( $(date +%s) - start ))s: $*"; }

pack() {  # pack NAME: tar WORK/NAME into PACK (split into 15 MiB parts when larger)
  [ -n "$PACK" ] || return 0
  tar -C "$WORK" -cf "$PACK/$1.tar" "$1" && split -b 15M -d "$PACK/$1.tar" "$PACK/$1.tar.part" && rm "$PACK/$1.tar"
}

has() { [[ " $STAGES " == *" $1 "* ]]; }

finish() {  # finish NAME PID: wait for a background drafter, keep its log, pack it
  wait "$2" || { echo "[train_pair] $1 failed"; status=1; }
  stamp "$1 done"
  cp "$WORK/$1.log" "$WORK/$1/" 2>/dev/null
  pack "$1"
  grep -v "Loading weights" "$WORK/$1.log" | tail -n 12
}
status=0

if has target; then
  stamp "train-target"
  $SP train-target --tokens "$DATA/tokens" --tokenizer "$DATA/tokenizer" --out "$WORK/target" \
    --seconds "$T_TARGET" --max-steps "$TARGET_STEPS" $TARGET_ARGS || exit 1
  pack target
fi

if has compare; then
  stamp "train-draft on corpus text (background)"
  $SP train-draft --target "$WORK/target" --tokens "$DATA/tokens" --out "$WORK/draft_corpus" \
    --seconds "$T_DRAFT_CORPUS" --no-shared $DRAFT_ARGS > "$WORK/draft_corpus.log" 2>&1 &
  p_corpus=$!
  stamp "gen-continuations"
  $SP gen-continuations --target "$WORK/target" --tokens "$DATA/tokens" --out "$WORK/continuations.npz" \
    --rows "$GEN_ROWS" --max-seconds "$T_GEN" $GEN_ARGS || exit 1
  stamp "train-draft on continuations, markov_rank 64 and 0 (background)"
  $SP train-draft --target "$WORK/target" --tokens "$DATA/tokens" --continuations "$WORK/continuations.npz" \
    --out "$WORK/draft_gen" --seconds "$T_DRAFT_GEN" --no-shared $DRAFT_ARGS > "$WORK/draft_gen.log" 2>&1 &
  p_gen=$!
  $SP train-draft --target "$WORK/target" --tokens "$DATA/tokens" --continuations "$WORK/continuations.npz" \
    --out "$WORK/draft_gen_r0" --seconds "$T_DRAFT_GEN" --markov-rank 0 --no-shared $DRAFT_ARGS \
    > "$WORK/draft_gen_r0.log" 2>&1 &
  p_r0=$!
  finish draft_corpus $p_corpus
  finish draft_gen $p_gen
  finish draft_gen_r0 $p_r0
fi

if has long; then
  stamp "train-draft on corpus text, markov_rank 64 and 0, $T_DRAFT_LONG s (background)"
  $SP train-draft --target "$WORK/target" --tokens "$DATA/tokens" --out "$WORK/draft_corpus_long" \
    --seconds "$T_DRAFT_LONG" --no-shared $DRAFT_ARGS > "$WORK/draft_corpus_long.log" 2>&1 &
  p_long=$!
  $SP train-draft --target "$WORK/target" --tokens "$DATA/tokens" --out "$WORK/draft_corpus_long_r0" \
    --seconds "$T_DRAFT_LONG" --markov-rank 0 --no-shared $DRAFT_ARGS > "$WORK/draft_corpus_long_r0.log" 2>&1 &
  p_long_r0=$!
  finish draft_corpus_long $p_long
  finish draft_corpus_long_r0 $p_long_r0
fi
stamp "all done"
exit $status
