# Sourced by run.sh and run_markovian_sft.sh: the evaluations (budget sweeps past B, Markovian-ness
# probes) and the report. Expects PYTHON, OUT, EVAL_DATA, SFT_MODEL, LONGCOT_RUN, DELETHINK_RUN, STEPS
# and the `needed` function of the calling script.
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
evaluate probe_sft "$SFT_MODEL" probe delethink.max_chunks=[3,7,14,22]
evaluate longcot_rl "$LONGCOT_RUN/global_step_${STEPS}" longcot longcot.budgets=[32,64,96,128,160,192,256,384]
evaluate delethink_rl "$DELETHINK_RUN/global_step_${STEPS}" delethink \
  delethink.max_chunks=[1,3,5,7,9,11,14,18,22]
# the same probe on both RL checkpoints, at B and past it: did Delethink-RL make the policy Markovian?
evaluate probe_longcot_rl "$LONGCOT_RUN/global_step_${STEPS}" probe delethink.max_chunks=[7,14]
evaluate probe_delethink_rl "$DELETHINK_RUN/global_step_${STEPS}" probe delethink.max_chunks=[7,14]

echo "== report"
"$PYTHON" -m verl.tools.compare "$LONGCOT_RUN" "$DELETHINK_RUN" --out "$OUT/training_curves.png"
"$PYTHON" recipes/tiny_markovian/report.py --root "$OUT" --longcot-run "$LONGCOT_RUN" \
  --delethink-run "$DELETHINK_RUN"
