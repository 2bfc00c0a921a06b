#!/usr/bin/env bash
# Experiment 2 of this recipe (README.md): the same comparison from a *Markovian* warm start.
#   1. RL data whose labels repeat (alphabet a..f over 4..12 terms), so a long problem is the same kind
#      of problem as a trained one
#   2. SFT from the same initial model with the same budget, half of the examples being the reference
#      trace resumed from a Delethink chunk cut (task.continuation, verl/trainer/sft/task.py)
#   3. LongCoT-RL and Delethink-RL from it (tiny_longcot / tiny_delethink, same seed), STEPS each
#   4. the evaluations of run.sh (budget sweeps past B, probes) on an a..f set up to 40 terms, and the report
# A stage whose output exists is skipped; FORCE=1 redoes everything.
# Usage: [PYTHON=.venv/bin/python] [FORCE=1] [STEPS=100] [OUT=outputs/tiny_markovian_msft] \
#        bash recipes/tiny_markovian/run_markovian_sft.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
FORCE=${FORCE:-0}
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export TOKENIZERS_PARALLELISM=false
OUT=${OUT:-outputs/tiny_markovian_msft}
STEPS=${STEPS:-100}
LABELS=abcdef         # labels repeat from the 7th term on
CONTINUATION_PROB=0.5 # share of SFT examples that resume from a chunk cut (C = 32, m = 4 + 12)

needed() {  # needed OUTPUT: true if OUTPUT must be (re)built
  [[ "$FORCE" == 1 || ! -e "$1" ]]
}
mkdir -p "$OUT"
force_override=()
if [[ "$FORCE" == 1 ]]; then force_override=(force=true); fi

echo "== 1/5 the tiny model (outputs/tiny/init) and RL data with labels $LABELS"
if needed outputs/tiny/init/config.json; then
  "$PYTHON" -m verl.models.tiny --out outputs/tiny/init --seed 0
fi
if needed "$OUT/data/val.jsonl"; then
  "$PYTHON" -m verl.data.synthetic --out "$OUT/data" --train-size 2000 --val-size 64 \
    --min-terms 4 --max-terms 12 --seed 0 --labels "$LABELS"
fi

echo "== 2/5 SFT with continuation examples"
if needed "$OUT/sft/config.json"; then
  "$PYTHON" -m verl.trainer.main_sft model.path=outputs/tiny/init output_dir="$OUT/sft" \
    task.labels="$LABELS" task.continuation.prob=$CONTINUATION_PROB \
    ${force_override[@]+"${force_override[@]}"} 2>&1 | tee "$OUT/sft.log"
fi

echo "== 3/5 RL: LongCoT and Delethink, ${STEPS} steps each"
for mode in longcot delethink; do
  run_dir=$OUT/$mode
  if needed "$run_dir/global_step_${STEPS}/actor/huggingface/config.json"; then
    if [[ "$FORCE" == 1 ]]; then rm -rf "$run_dir"; fi
    "$PYTHON" -m verl.trainer.main_policy_iteration --config-name="tiny_${mode}" \
      trainer.experiment_name="tiny_markovian_msft_${mode}" trainer.default_local_dir="$run_dir" \
      trainer.total_training_steps=$STEPS trainer.logger=[console,jsonl] trainer.seed=1 \
      data.train_files="$OUT/data/train.jsonl" data.val_files="$OUT/data/val.jsonl" \
      actor_rollout_ref.model.path="$OUT/sft"
  else
    echo "skip: $run_dir has its final checkpoint"
  fi
done

echo "== 4/5 evaluation"
EVAL_DATA="$OUT/eval.jsonl"
if needed "$EVAL_DATA"; then
  "$PYTHON" recipes/tiny_markovian/make_eval_data.py --out "$EVAL_DATA" --labels "$LABELS" \
    --train-file "$OUT/data/train.jsonl"
fi
SFT_MODEL="$OUT/sft" LONGCOT_RUN="$OUT/longcot" DELETHINK_RUN="$OUT/delethink"
source recipes/tiny_markovian/evaluate_and_report.sh
