#!/usr/bin/env bash
# The Markovian testbed, end to end (README.md next to this file says why each number is what it is):
#   1. a tiny model, the shift-register task (verl/data/shift_register.py), and a Markovian warm start:
#      SFT on whole traces of the RL sizes plus Delethink continuation chunks of problems up to 4B, until it
#      solves its target share of held-out problems at T = 1; a warm start that never gets there stops
#      the run here (warm_start.py), before RL
#   2. LongCoT-RL (budget B) and Delethink-RL (C = B/4, m = C/2, I so that the budget is B) from that
#      checkpoint, same seed, same prompts, same samples per prompt
#   3. main_eval runs, in one process: the warm start (both inference modes) and both RL checkpoints on
#      held-out problems at B,
#      every run sampling problem p's sample j with the same seed, so gains pair by problem; budget sweeps
#      B..4B of both RL checkpoints on problems of the trained sizes and longer than B (not at the demo
#      size, README.md says why); recipes/scaling/benchmark.py:
#      the rollout and the update of one RL-step-sized batch of each RL checkpoint at B..8B, alternating in
#      one process: the cost per trajectory of both environments, and the budget from which Delethink's is
#      the lower
#   4. the report: $OUT/report.md (a verdict table first), accuracy_vs_budget.png, cost.png, crossover.png,
#      training_curves.png, and verdicts.json
# A stage whose output exists is skipped (an unfinished RL run resumes); FORCE=1 redoes everything. The
# settings that start an output directory (these variables and settings.py's) are kept in
# $OUT/run_config.json, and a later call with other ones is refused (run_config.py); the report reads B, C,
# m and I from there.
# STOP_AFTER=sft|rl|heldout stops after the warm start, the RL runs or the held-out evaluation at B (what
# lora_vs_full.sh compares; no sweeps, timing or report); STOP_AFTER=eval after the budget sweeps, before
# the timing stage: the one stage that needs quiet cores, so seeds may run side by side up to here and a
# later call without STOP_AFTER times and reports them one at a time.
# SEED seeds the model's initial weights, the warm start and both RL runs (the problems stay the same).
# SEEDS="1 2 3" runs everything once per seed into $OUT/seed_N, then writes $OUT/aggregate.md (each claim's
# mean and spread over the seeds and in how many it held; aggregate.py) and $OUT/record.yaml (the run's
# results record, docs/results/README.md); a seed that stops (a warm start below its target) does not stop
# the others.
# Sizes: the default is the full setting (B = 512; its record, docs/results/testbed.md#full_setting, says how
# long a seed took); SIZE=demo is the quickstart's (B = 256, about 10 minutes a seed: the demo's record);
# SIZE=smoke is CI's (seconds per stage, numbers meaningless).
# SFT_ARGS: Hydra overrides for the warm start.
# Usage: [PYTHON=.venv/bin/python] [SIZE=full|demo|smoke] [OUT=DIR] [SEED=N | SEEDS="N ..."] [STEPS=N] \
#        [FORCE=1] [STOP_AFTER=sft|rl|heldout|eval] [SFT_ARGS="..."] bash recipes/markovian_testbed/run.sh \
#        [hydra overrides for both RL runs]
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/python_env.sh
FORCE=${FORCE:-0}
SIZE=${SIZE:-full}
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export TOKENIZERS_PARALLELISM=false

# the size's settings and what follows from them (C, m, I, the problem sizes...), as NAME=VALUE words
SIZE_SETTINGS=$("$PYTHON" recipes/markovian_testbed/settings.py "$SIZE")
# shellcheck disable=SC2086  # one NAME=VALUE word each
declare $SIZE_SETTINGS
OUT=${OUT:-outputs/markovian_testbed_$SIZE}
case ${STOP_AFTER:-} in
  "" | sft | rl | heldout | eval) ;;
  *) echo "run.sh: STOP_AFTER must be sft, rl, heldout or eval, got '$STOP_AFTER'" >&2; exit 2 ;;
esac

STEPS=${STEPS:-$STEPS_DEFAULT}
force_flag=()
[[ "$FORCE" == 1 ]] && force_flag=(--force)
check_run_config() {  # check_run_config DIR SEED [RL overrides]: refuse DIR if it was started otherwise
  # --force before DIR: argparse takes DIR and the NAME=VALUE list in one go, so nothing may sit between them
  # shellcheck disable=SC2086  # SIZE_SETTINGS: one NAME=VALUE word each
  "$PYTHON" recipes/markovian_testbed/run_config.py check ${force_flag[@]+"${force_flag[@]}"} "$1" \
    SIZE="$SIZE" SEED="$2" STEPS="$STEPS" SFT_ARGS="${SFT_ARGS:-}" RL_ARGS="${*:3}" $SIZE_SETTINGS
}

if [[ -n ${SEEDS+set} ]]; then
  seeds=$("$PYTHON" recipes/markovian_testbed/run_config.py seeds "$SEEDS")
  for seed in $seeds; do  # every seed's settings are checked before any stage runs
    check_run_config "$OUT/seed_$seed" "$seed" "$@"
  done
  stopped=()
  for seed in $seeds; do
    echo "==== seed $seed of: $seeds"
    env -u SEEDS SEED="$seed" OUT="$OUT/seed_$seed" bash "$0" "$@" || stopped+=("$seed")
  done
  # this call, for the results record aggregate.py writes ($OUT/record.yaml)
  call="SIZE=$SIZE SEEDS=\"$SEEDS\" OUT=$OUT STEPS=$STEPS${SFT_ARGS:+ SFT_ARGS=\"$SFT_ARGS\"}"
  call+="${STOP_AFTER:+ STOP_AFTER=$STOP_AFTER} bash recipes/markovian_testbed/run.sh${*:+ $*}"
  # shellcheck disable=SC2086  # one argument per seed
  "$PYTHON" recipes/markovian_testbed/aggregate.py --root "$OUT" --seeds $seeds --command "$call"
  if ((${#stopped[@]})); then
    echo "seeds that stopped before their report: ${stopped[*]} (their lines above say why)" >&2
    exit 1
  fi
  exit 0
fi

SEED=${SEED:-1}
check_run_config "$OUT" "$SEED" "$@"
echo "testbed $SIZE, seed $SEED: B=$B; Delethink C=$C m=$HEAD+$TAIL I=$I; RL sizes $MIN_STEPS..$MAX_STEPS steps; out $OUT"

needed() {  # needed OUTPUT: true if OUTPUT must be (re)built
  [[ "$FORCE" == 1 || ! -e "$1" ]]
}

echo "== 1/4 model, data, Markovian warm start"
if needed "$OUT/init/config.json"; then
  # positions for the timing stage's longest LongCoT rollout (8B); rotary, so no weight depends on it.
  # An output layer of its own: tied to the input embedding, whose rows a trained model wants at a third of
  # the output rows' norm, one full-setting warm start (seed 6) learned its first sum only at the step
  # limit and one demo warm start (seed 6) never (README.md, docs/results/testbed.md#full_warm_start)
  "$PYTHON" -m verl.models.tiny --out "$OUT/init" --seed "$SEED" --dims max_position_embeddings=$((8 * B + 64)) \
    --untied ${force_flag[@]+"${force_flag[@]}"}
fi
if needed "$OUT/data/train.jsonl"; then
  "$PYTHON" -m verl.data.shift_register --out "$OUT/data" --train-size 2000 --val-size "$VAL_SIZE" \
    --min-steps "$MIN_STEPS" --max-steps "$MAX_STEPS" --seed 0
fi
if needed "$OUT/data/eval.jsonl"; then
  "$PYTHON" recipes/markovian_testbed/make_eval_data.py --out "$OUT/data" --budget "$B" \
    --min-steps "$MIN_STEPS" --train-data "$OUT/data/train.jsonl" --per-group "$PER_GROUP" \
    --timing-problems "$TIMING"
fi
if needed "$OUT/heldout/eval.jsonl"; then
  "$PYTHON" recipes/markovian_testbed/make_eval_data.py --out "$OUT/heldout" --budget "$B" \
    --min-steps "$MIN_STEPS" --train-data "$OUT/data/train.jsonl" --per-group "$HELDOUT" \
    --past-per-group 0 --timing-problems 0 --seed 4321
fi
if needed "$OUT/sft/config.json"; then
  "$PYTHON" -m verl.trainer.main_sft --config-name=sft_testbed model.path="$OUT/init" output_dir="$OUT/sft" \
    force=true train.seed="$SEED" train.steps="$SFT_STEPS" train.micro_batches="$SFT_MICRO" \
    train.stop_at_accuracy="$SFT_TARGET" train.check_every="$SFT_CHECK_EVERY" \
    train.warmup_steps=$((SFT_STEPS < 25 ? SFT_STEPS : 25)) task.continuation.prob="$CONT_PROB" \
    task.continuation.answer_prob="$ANSWER_CUTS" task.long_start.prob="$LONG_START" task.zero_prob="$ZERO_PROB" \
    task.max_size="$MAX_STEPS" task.continuation.max_size="$CONT_MAX_STEPS" \
    task.continuation.chunk_size=$C task.continuation.keep_head=$HEAD task.continuation.keep_tail=$TAIL \
    eval.num_problems="$SFT_EVAL" eval.min_size="$MIN_STEPS" eval.max_size="$MAX_STEPS" \
    eval.max_new_tokens=$((B + 16)) eval.delethink_chunks=$((CHECK_BOTH ? I : 0)) ${SFT_ARGS:-}
fi
"$PYTHON" recipes/markovian_testbed/warm_start.py "$OUT/sft"
stop_after() {  # stop_after STAGE: exit here if STOP_AFTER names STAGE
  if [[ ${STOP_AFTER:-} == "$1" ]]; then
    echo "STOP_AFTER=$1: the later stages skipped"
    exit 0
  fi
}
stop_after sft

echo "== 2/4 RL: LongCoT and Delethink, $STEPS steps each"
common=(
  data.train_files=["$OUT/data/train.jsonl"] data.val_files=["$OUT/data/val.jsonl"]
  actor_rollout_ref.model.path="$OUT/sft" data.train_batch_size="$PROMPTS"
  actor_rollout_ref.actor.ppo_mini_batch_size=$((PROMPTS / 2)) actor_rollout_ref.rollout.n="$SAMPLES"
  actor_rollout_ref.actor.optim.lr="$RL_LR"
  trainer.total_training_steps="$STEPS" trainer.save_freq="$STEPS" trainer.seed="$SEED"
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
      "${budget[@]}" trainer.experiment_name="testbed_${SIZE}_${mode}_seed${SEED}" \
      trainer.default_local_dir="$run_dir" "$@"
  fi
done

stop_after rl

echo "== 3/4 evaluation"
queued=()
evaluate() {  # evaluate NAME MODEL MODE DATA SAMPLES [overrides...]: queue a main_eval run at T = 1 into
  # $OUT/eval/NAME, with this size's Delethink shape
  if needed "$OUT/eval/$1/summary.json"; then
    queued+=(-- model_path="$2" mode="$3" data_files=["$4"] output_dir="$OUT/eval/$1" sampling.n="$5"
      sampling.temperature=1.0 pass_k=[1] max_prompt_length=$((C + 32))
      delethink.chunk_size=$C delethink.keep_head=$HEAD delethink.keep_tail=$TAIL "${@:6}")
  fi
}
run_queued() {  # the queued runs, in one process (eval_runs.py: torch and transformers load once)
  if ((${#queued[@]})); then "$PYTHON" recipes/markovian_testbed/eval_runs.py "${queued[@]}"; fi
  queued=()
}
final=global_step_${STEPS}
# at B on the held-out problems: the warm start in both inference modes (the Markovian-ness probe), then
# each RL checkpoint in its own mode; the gains over the warm start pair by problem
heldout=$OUT/heldout/eval.jsonl
evaluate heldout_sft "$OUT/sft" probe "$heldout" "$HELDOUT_N" delethink.max_chunks=[$I]
evaluate heldout_longcot_rl "$OUT/longcot/$final" longcot "$heldout" "$HELDOUT_N" longcot.budgets=[$B]
evaluate heldout_delethink_rl "$OUT/delethink/$final" delethink "$heldout" "$HELDOUT_N" delethink.max_chunks=[$I]
# the held-out runs go with the sweeps below, one process for all, unless the recipe stops here
if [[ ${STOP_AFTER:-} == heldout ]]; then run_queued; fi
stop_after heldout
# budgets B, 1.5B, 2B, 3B, 4B (up to SWEEP_TO x B): LongCoT by length, Delethink by chunks (each adds
# C - m = C/2 tokens)
if ((SWEEPS)); then
  evaluate longcot_rl "$OUT/longcot/$final" longcot "$OUT/data/eval.jsonl" "$EVAL_N" \
    longcot.budgets=[$SWEEP_BUDGETS]
  evaluate delethink_rl "$OUT/delethink/$final" delethink "$OUT/data/eval.jsonl" "$EVAL_N" \
    delethink.max_chunks=[$SWEEP_CHUNKS]
fi
run_queued
stop_after eval
# rollout and update of one RL-step-sized batch at budgets B, 2B, 4B, 8B (up to TIMING_TO x B; doublings,
# the cost curve's axis: a 6B point took 2 of the demo's 14 minutes on 2 quiet cores), both
# models alternating in one process, end-of-sequence ignored so every sample writes its whole budget: the
# time measures the length, not where a model stopped
timing_budgets=$TIMING_BUDGETS
if needed "$OUT/eval/timing.json"; then
  "$PYTHON" -m recipes.scaling.benchmark --longcot "$OUT/longcot/$final" --delethink "$OUT/delethink/$final" \
    --data "$OUT/data/timing.jsonl" --budgets "$timing_budgets" --chunk-size "$C" --keep-head "$HEAD" \
    --keep-tail "$TAIL" --prompts "$PROMPTS" --samples "$SAMPLES" --repeats "$TIMING_REPEATS" \
    --threads "$TIMING_THREADS" --max-question-tokens $((C + 32 - M)) --json "$OUT/eval/timing.json"
fi

echo "== 4/4 report"
"$PYTHON" -m verl.tools.compare "$OUT/longcot" "$OUT/delethink" --out "$OUT/training_curves.png"
"$PYTHON" recipes/markovian_testbed/report.py --root "$OUT"
