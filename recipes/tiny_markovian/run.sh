#!/usr/bin/env bash
# Markovian thinking vs LongCoT on the tiny CPU model, end to end (see README.md next to this file):
#   1. the tiny model, data and SFT warm start (examples/prepare_tiny.sh; skipped if present)
#   2. LongCoT-RL (B = 128) and Delethink-RL (C = 32, m = 4 + 12, I = 7: total 128) from that
#      checkpoint, same seed, same prompts, same samples per prompt
#   3. evaluation of both final checkpoints with budget sweeps past B, and the Markovian-ness probe
#      on the SFT checkpoint
#   4. the report: $OUT/report.md and PNGs
# A stage whose output exists is skipped and an unfinished RL run resumes from its latest checkpoint
# (so STEPS=300 extends finished 100-step runs); FORCE=1 redoes everything.
# LONGCOT_RUN / DELETHINK_RUN point at existing run directories to evaluate instead of training anew
# (e.g. the quickstart's outputs/tiny_longcot and outputs/tiny_delethink: the same configs and seed).
# Usage: [PYTHON=.venv/bin/python] [FORCE=1] [STEPS=100] [OUT=outputs/tiny_markovian] \
#        [LONGCOT_RUN=DIR DELETHINK_RUN=DIR] bash recipes/tiny_markovian/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
FORCE=${FORCE:-0}
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export TOKENIZERS_PARALLELISM=false
OUT=${OUT:-outputs/tiny_markovian}  # evaluations, report and (by default) the two runs
STEPS=${STEPS:-100}  # RL steps per run, as in the tiny configs
LONGCOT_RUN=${LONGCOT_RUN:-$OUT/longcot}
DELETHINK_RUN=${DELETHINK_RUN:-$OUT/delethink}

needed() {  # needed OUTPUT: true if OUTPUT must be (re)built
  [[ "$FORCE" == 1 || ! -e "$1" ]]
}

echo "== 1/4 tiny model, data, SFT warm start (outputs/tiny/)"
PYTHON=$PYTHON bash examples/prepare_tiny.sh

echo "== 2/4 RL: LongCoT and Delethink, ${STEPS} steps each"
for mode in longcot delethink; do
  [[ $mode == longcot ]] && run_dir=$LONGCOT_RUN || run_dir=$DELETHINK_RUN
  if needed "$run_dir/global_step_${STEPS}/actor/huggingface/config.json"; then
    # without FORCE an unfinished run resumes from its latest checkpoint (trainer.resume_mode=auto)
    if [[ "$FORCE" == 1 ]]; then rm -rf "$run_dir"; fi
    "$PYTHON" -m verl.trainer.main_policy_iteration --config-name="tiny_${mode}" \
      trainer.experiment_name="tiny_markovian_${mode}" trainer.default_local_dir="$run_dir" \
      trainer.total_training_steps=$STEPS trainer.logger=[console,jsonl] trainer.seed=1
  else
    echo "skip: $run_dir has its final checkpoint"
  fi
done

echo "== 3/4 evaluation: budget sweeps past B, and the probe"
EVAL_DATA="$OUT/eval.jsonl"
if needed "$EVAL_DATA"; then
  "$PYTHON" recipes/tiny_markovian/make_eval_data.py --out "$EVAL_DATA"
fi
SFT_MODEL=outputs/tiny/sft
source recipes/tiny_markovian/evaluate_and_report.sh
