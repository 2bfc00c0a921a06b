#!/usr/bin/env bash
# The Markovian testbed, end to end (README.md next to this file says why each number is what it is):
#   1. a tiny model, the shift-register task (verl/data/shift_register.py), and a Markovian warm start:
#      SFT on whole traces of the RL sizes plus Delethink continuation chunks of problems up to 4B
#   2. LongCoT-RL (budget B) and Delethink-RL (C = B/4, m = C/2, I so that the budget is B) from that
#      checkpoint, same seed, same prompts, same samples per prompt
#   3. main_eval: the probe of the warm start at B; budget sweeps B..4B of both RL checkpoints on held-out
#      problems of the trained sizes and on problems longer than B; time_rollouts.py: the rollout and the
#      update of one RL-step-sized batch of each RL checkpoint at B..8B, alternating in one process: the
#      cost per trajectory of both environments, and the budget from which Delethink's is the lower
#   4. the report: $OUT/report.md, accuracy_vs_budget.png, cost.png, crossover.png, training_curves.png
# A stage whose output exists is skipped (an unfinished RL run resumes); FORCE=1 redoes everything;
# RL_ONLY=1 stops after the RL runs (a sweep that evaluates the checkpoints its own way).
# Sizes: the default is the full setting (B = 512; 59 min on a quiet 2-core machine, 2026-11-25); SIZE=demo is the
# quickstart's (B = 256, under 15 minutes; its warm start has no long starts, which only claim (b) past B
# needs; it trains up to 1500 steps and stops once it solves 0.9 of its held-out problems at T = 1;
# README);
# SIZE=smoke is CI's (seconds per stage, numbers meaningless).
# SFT_ARGS: Hydra overrides for the warm start, e.g. "train.stop_at_accuracy=0.5 train.check_every=50" for
# one that leaves RL more room (the LoRA comparison's, README).
# Usage: [PYTHON=.venv/bin/python] [SIZE=full|demo|smoke] [OUT=DIR] [STEPS=N] [FORCE=1] [RL_ONLY=1] \
#        [SFT_ARGS="..."] bash recipes/markovian_testbed/run.sh [hydra overrides for both RL runs]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
FORCE=${FORCE:-0}
SIZE=${SIZE:-full}
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export TOKENIZERS_PARALLELISM=false

source recipes/markovian_testbed/sizes.sh
OUT=${OUT:-outputs/markovian_testbed_$SIZE}
STEPS=${STEPS:-$STEPS_DEFAULT}
echo "testbed $SIZE: B=$B; Delethink C=$C m=$HEAD+$TAIL I=$I; RL sizes $MIN_STEPS..$MAX_STEPS steps; out $OUT"

needed() {  # needed OUTPUT: true if OUTPUT must be (re)built
  [[ "$FORCE" == 1 || ! -e "$1" ]]
}
force_flag=()
[[ "$FORCE" == 1 ]] && force_flag=(--force)

echo "== 1/4 model, data, Markovian warm start"
if needed "$OUT/init/config.json"; then
  # positions for the timing stage's longest LongCoT rollout (8B); rotary, so no weight depends on it
  "$PYTHON" -m verl.models.tiny --out "$OUT/init" --seed 0 --dims max_position_embeddings=$((8 * B + 64)) \
    ${force_flag[@]+"${force_flag[@]}"}
fi
if needed "$OUT/data/train.jsonl"; then
  "$PYTHON" -m verl.data.shift_register --out "$OUT/data" --train-size 2000 --val-size 32 \
    --min-steps "$MIN_STEPS" --max-steps "$MAX_STEPS" --seed 0
fi
if needed "$OUT/data/eval.jsonl"; then
  "$PYTHON" recipes/markovian_testbed/make_eval_data.py --out "$OUT/data" --budget "$B" \
    --min-steps "$MIN_STEPS" --train-data "$OUT/data/train.jsonl" --per-group "$PER_GROUP" \
    --timing-problems "$TIMING"
fi
if needed "$OUT/sft/config.json"; then
  "$PYTHON" -m verl.trainer.main_sft --config-name=sft_testbed model.path="$OUT/init" output_dir="$OUT/sft" \
    force=true train.steps="$SFT_STEPS" train.micro_batches="$SFT_MICRO" task.long_start.prob="$LONG_START" train.warmup_steps=$((SFT_STEPS < 25 ? SFT_STEPS : 25)) task.max_size="$MAX_STEPS" task.continuation.max_size="$CONT_MAX_STEPS" \
    task.continuation.chunk_size=$C task.continuation.keep_head=$HEAD task.continuation.keep_tail=$TAIL \
    eval.num_problems="$SFT_EVAL" eval.min_size="$MIN_STEPS" eval.max_size="$MAX_STEPS" \
    eval.max_new_tokens=$((B + 16)) ${SFT_ARGS:-}
fi

echo "== 2/4 RL: LongCoT and Delethink, $STEPS steps each"
common=(
  data.train_files=["$OUT/data/train.jsonl"] data.val_files=["$OUT/data/val.jsonl"]
  actor_rollout_ref.model.path="$OUT/sft" data.train_batch_size="$PROMPTS"
  actor_rollout_ref.actor.ppo_mini_batch_size=$((PROMPTS / 2)) actor_rollout_ref.rollout.n="$SAMPLES"
  trainer.total_training_steps="$STEPS" trainer.save_freq="$STEPS" trainer.seed=1
)
for mode in longcot delethink; do
  run_dir=$OUT/$mode
  if needed "$run_dir/global_step_${STEPS}/actor/huggingface/config.json"; then
    if [[ "$FORCE" == 1 ]]; then rm -rf "$run_dir"; fi
    if [[ $mode == longcot ]]; then
      budget=(data.max_response_length=$B)
    else
      budget=(algorithm.delethink.chunk_size=$C algorithm.delethink.keep_head=$HEAD
        algorithm.delethink.keep_tail=$TAIL algorithm.delethink.max_chunks=$I)
    fi
    "$PYTHON" -m verl.trainer.main_policy_iteration --config-name="testbed_${mode}" "${common[@]}" \
      "${budget[@]}" trainer.experiment_name="testbed_${SIZE}_${mode}" trainer.default_local_dir="$run_dir" "$@"
  fi
done

if [[ ${RL_ONLY:-0} == 1 ]]; then
  echo "RL_ONLY=1: evaluation and report skipped"
  exit 0
fi

echo "== 3/4 evaluation"
evaluate() {  # evaluate NAME MODEL MODE DATA [overrides...]: one main_eval call into $OUT/eval/NAME
  if needed "$OUT/eval/$1/summary.json"; then
    testbed_eval "$OUT/eval/$1" "$2" "$3" "$4" "$EVAL_N" "${@:5}"
  fi
}
# budgets B, 1.5B, 2B, 3B, 4B: LongCoT by length, Delethink by chunks (each adds C - m = C/2 tokens)
chunks_for() { echo $((1 + ($1 - C) / (C - M))); }
budgets=($B $((3 * B / 2)) $((2 * B)) $((3 * B)) $((4 * B)))
lc_budgets=$(IFS=,; echo "${budgets[*]}")
dt_chunks=$(for b in "${budgets[@]}"; do chunks_for "$b"; done | paste -sd,)
final=global_step_${STEPS}
evaluate probe_sft "$OUT/sft" probe "$OUT/data/eval.jsonl" delethink.max_chunks=[$I]
evaluate longcot_rl "$OUT/longcot/$final" longcot "$OUT/data/eval.jsonl" longcot.budgets=[$lc_budgets]
evaluate delethink_rl "$OUT/delethink/$final" delethink "$OUT/data/eval.jsonl" delethink.max_chunks=[$dt_chunks]
# rollout and update of one RL-step-sized batch at budgets B, 2B, 4B, 6B, 8B (up to TIMING_TO x B), both
# models alternating in one process, end-of-sequence ignored so every sample writes its whole budget: the
# time measures the length, not where a model stopped
timing_budgets=$(for k in 1 2 4 6 8; do if ((k <= TIMING_TO)); then echo $((k * B)); fi; done | paste -sd,)
if needed "$OUT/eval/timing.json"; then
  "$PYTHON" recipes/markovian_testbed/time_rollouts.py --longcot "$OUT/longcot/$final" \
    --delethink "$OUT/delethink/$final" --data "$OUT/data/timing.jsonl" --budgets "$timing_budgets" \
    --chunk $C --keep-head $HEAD --keep-tail $TAIL --prompts "$PROMPTS" --samples "$SAMPLES" \
    --repeats "$TIMING_REPEATS" --num-threads "$TIMING_THREADS" --max-question-tokens $((C + 32 - M)) --out "$OUT/eval/timing.json"
fi

echo "== 4/4 report"
"$PYTHON" -m verl.tools.compare "$OUT/longcot" "$OUT/delethink" --out "$OUT/training_curves.png"
"$PYTHON" recipes/markovian_testbed/report.py --root "$OUT" --budget "$B" --chunk "$C" --carry "$M"
