#!/usr/bin/env bash
# LoRA-RL against full RL on the Markovian testbed, from the same warm start, same steps and seed:
#   1. run.sh at $SIZE into $FULL: the warm start, full LongCoT-RL and Delethink-RL, evaluation, report
#      (stages whose output exists are skipped)
#   2. run.sh into $LORA_OUT on the same init/data/warm start (linked, not redone) with the actor's LoRA
#      keys: LoRA-RL in both environments, the same evaluation and report
#   3. lora_cost.py: peak resident memory and update time of one RL step, full against LoRA
#   4. lora_table.py: the table (held-out accuracy at B, update time per step, peak RSS, trainable
#      parameters) into $LORA_OUT/lora_vs_full.md
# Usage: [PYTHON=.venv/bin/python] [SIZE=demo] [FULL=DIR] [LORA_OUT=DIR] [RANK=16] [LORA_LR=1e-4] \
#        bash recipes/markovian_testbed/lora_vs_full.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
SIZE=${SIZE:-demo}
FULL=${FULL:-outputs/markovian_testbed_$SIZE}
RANK=${RANK:-16}
LORA_LR=${LORA_LR:-1e-4}
LORA_OUT=${LORA_OUT:-${FULL}_lora_r${RANK}_lr${LORA_LR}}
case $SIZE in
  full) B=512 PROMPTS=16 SAMPLES=8 ;;
  demo) B=256 PROMPTS=8 SAMPLES=8 ;;
  smoke) B=128 PROMPTS=2 SAMPLES=2 ;;
  *) echo "SIZE must be full, demo or smoke, got '$SIZE'" >&2; exit 2 ;;
esac

echo "== full RL into $FULL"
PYTHON=$PYTHON SIZE=$SIZE OUT=$FULL bash recipes/markovian_testbed/run.sh

echo "== LoRA-RL (rank $RANK, lr $LORA_LR) into $LORA_OUT"
mkdir -p "$LORA_OUT"
for stage in init data sft; do
  [[ -e "$LORA_OUT/$stage" ]] || ln -s "$(realpath "$FULL/$stage")" "$LORA_OUT/$stage"
done
PYTHON=$PYTHON SIZE=$SIZE OUT=$LORA_OUT bash recipes/markovian_testbed/run.sh \
  actor_rollout_ref.model.lora_rank="$RANK" actor_rollout_ref.model.lora_alpha=$((2 * RANK)) \
  actor_rollout_ref.actor.optim.lr="$LORA_LR"

echo "== one RL step's cost, full against LoRA"
if [[ ! -e "$LORA_OUT/lora_cost.json" ]]; then
  "$PYTHON" recipes/markovian_testbed/lora_cost.py --model "$FULL/sft" --data "$FULL/data/train.jsonl" \
    --budget "$B" --prompts "$PROMPTS" --samples "$SAMPLES" --rank "$RANK" --out "$LORA_OUT/lora_cost.json"
fi
"$PYTHON" recipes/markovian_testbed/lora_table.py --full "$FULL" --lora "$LORA_OUT" --budget "$B" \
  --rank "$RANK" --lr "$LORA_LR"
