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
evaluate() {  # evaluate NAME MODEL MODE [overrides...]: one main_eval call into $OUT/eval/NAME
  local name=$1 model=$2 mode=$3
  shift 3
  if needed "$OUT/eval/$name/summary.json"; then
    # max_prompt_length: the 40-term question (122 tokens) plus Delethink's 16-token carry-over
    "$PYTHON" -m verl.trainer.main_eval model_path="$model" mode="$mode" data_files=["$EVAL_DATA"] \
      output_dir="$OUT/eval/$name" sampling.n=4 sampling.temperature=1.0 pass_k=[1,2,4] \
      max_prompt_length=160 "$@"
  else
    echo "skip: $OUT/eval/$name exists"
  fi
}
# Delethink: C = 32, m = 4 + 12; I = 1..22 is a budget of 32..368 (B = 128 at I = 7). The longest
# problem (40 terms) needs 209 tokens: I >= 13, or a LongCoT budget >= 209.
evaluate probe_sft outputs/tiny/sft probe delethink.max_chunks=[3,7,14,22]
evaluate longcot_rl "$LONGCOT_RUN/global_step_${STEPS}" longcot longcot.budgets=[32,64,96,128,160,192,256,384]
evaluate delethink_rl "$DELETHINK_RUN/global_step_${STEPS}" delethink \
  delethink.max_chunks=[1,3,5,7,9,11,14,18,22]
# the same probe on both RL checkpoints, at B and past it: did Delethink-RL make the policy Markovian?
evaluate probe_longcot_rl "$LONGCOT_RUN/global_step_${STEPS}" probe delethink.max_chunks=[7,14]
evaluate probe_delethink_rl "$DELETHINK_RUN/global_step_${STEPS}" probe delethink.max_chunks=[7,14]

echo "== 4/4 report"
"$PYTHON" -m verl.tools.compare "$LONGCOT_RUN" "$DELETHINK_RUN" --out "$OUT/training_curves.png"
"$PYTHON" recipes/tiny_markovian/report.py --root "$OUT" --longcot-run "$LONGCOT_RUN" --delethink-run "$DELETHINK_RUN"
