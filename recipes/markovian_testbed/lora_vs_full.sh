#!/usr/bin/env bash
# LoRA-RL against full RL on the Markovian testbed, from the same warm start, same steps and seed:
#   1. run.sh at $SIZE into $FULL: the warm start, full LongCoT-RL and Delethink-RL, evaluation, report
#      (stages whose output exists are skipped: put a warm start in $FULL/sft to start RL from it)
#   2. run.sh into $LORA_OUT on the same init/data/warm start (linked, not redone) with the actor's LoRA
#      keys: LoRA-RL in both environments, the same evaluation and report
#   3. the held-out evaluation at B alone: $HELDOUT problems of the trained sizes (another seed than the
#      recipe's 24 or 48, which at a few samples each cannot tell a gain of a few points from noise),
#      $HELDOUT_N samples each at T = 1, of the warm start (the probe: LongCoT and Delethink inference)
#      and of the four RL checkpoints; every run samples problem p's sample j with the same seed
#   4. lora_cost.py: peak resident memory and update time of one RL step, full against LoRA (once per rank)
#   5. lora_table.py: the table (held-out accuracy at B with standard errors, update time per step, peak
#      RSS, trainable parameters) into $LORA_OUT/lora_vs_full.md
# A learning-rate sweep is this script once per LORA_LR: each LoRA run has its own $LORA_OUT. RL_ONLY=1
# (read by run.sh) leaves out run.sh's evaluation and report in steps 1 and 2 (the budget sweeps to 4B and
# the timing stage, most of the time on a busy machine), keeping the held-out evaluation the table reads.
# Extra arguments are Hydra overrides for all four RL runs (another training seed: trainer.seed=2, with its
# own FULL; the held-out samples do not depend on it, so the seeds' gains pair by problem as well).
# Usage: [PYTHON=.venv/bin/python] [SIZE=demo] [FULL=DIR] [LORA_OUT=DIR] [RANK=16] [LORA_LR=1e-4] \
#        [RL_ONLY=1] [HELDOUT=192] [HELDOUT_N=4] [STEPS=N] bash recipes/markovian_testbed/lora_vs_full.sh \
#        [hydra overrides]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
SIZE=${SIZE:-demo}
source recipes/markovian_testbed/sizes.sh
FULL=${FULL:-outputs/markovian_testbed_$SIZE}
RANK=${RANK:-16}
LORA_LR=${LORA_LR:-1e-4}
LORA_OUT=${LORA_OUT:-${FULL}_lora_r${RANK}_lr${LORA_LR}}
HELDOUT=${HELDOUT:-192}
HELDOUT_N=${HELDOUT_N:-4}
final=global_step_${STEPS:-$STEPS_DEFAULT}

echo "== full RL into $FULL"
PYTHON=$PYTHON SIZE=$SIZE OUT=$FULL bash recipes/markovian_testbed/run.sh "$@"

echo "== LoRA-RL (rank $RANK, lr $LORA_LR) into $LORA_OUT"
mkdir -p "$LORA_OUT"
for stage in init data sft; do
  [[ -e "$LORA_OUT/$stage" ]] || ln -s "$(realpath "$FULL/$stage")" "$LORA_OUT/$stage"
done
PYTHON=$PYTHON SIZE=$SIZE OUT=$LORA_OUT bash recipes/markovian_testbed/run.sh \
  actor_rollout_ref.model.lora_rank="$RANK" actor_rollout_ref.model.lora_alpha=$((2 * RANK)) \
  actor_rollout_ref.actor.optim.lr="$LORA_LR" "$@"

echo "== held-out evaluation at B = $B: $HELDOUT problems x $HELDOUT_N samples"
heldout=$FULL/heldout/eval.jsonl
if [[ ! -e "$heldout" ]]; then
  "$PYTHON" recipes/markovian_testbed/make_eval_data.py --out "$FULL/heldout" --budget "$B" \
    --min-steps "$MIN_STEPS" --train-data "$FULL/data/train.jsonl" --per-group "$HELDOUT" \
    --past-per-group 0 --timing-problems 0 --seed 4321
fi
heldout_eval() {  # heldout_eval OUT_DIR MODEL MODE: skipped if OUT_DIR holds a summary
  if [[ ! -e "$1/summary.json" ]]; then
    testbed_eval "$1" "$2" "$3" "$heldout" "$HELDOUT_N" longcot.budgets=["$B"] delethink.max_chunks=["$I"]
  fi
}
heldout_eval "$FULL/eval/heldout_sft" "$FULL/sft" probe
for mode in longcot delethink; do
  heldout_eval "$FULL/eval/heldout_${mode}_rl" "$FULL/$mode/$final" "$mode"
  heldout_eval "$LORA_OUT/eval/heldout_${mode}_rl" "$LORA_OUT/$mode/$final" "$mode"
done

echo "== one RL step's cost, full against LoRA"
cost=$FULL/lora_cost_r$RANK.json
if [[ ! -e "$cost" ]]; then
  "$PYTHON" recipes/markovian_testbed/lora_cost.py --model "$FULL/sft" --data "$FULL/data/train.jsonl" \
    --budget "$B" --prompts "$PROMPTS" --samples "$SAMPLES" --rank "$RANK" --out "$cost"
fi
"$PYTHON" recipes/markovian_testbed/lora_table.py --full "$FULL" --lora "$LORA_OUT" --budget "$B" \
  --cost "$cost" --out "$LORA_OUT/lora_vs_full.md"
