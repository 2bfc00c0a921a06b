#!/usr/bin/env bash
# LoRA-RL against full RL on the Markovian testbed, from the same warm start, same steps and seed:
#   1. run.sh at $SIZE into $FULL: the warm start, full LongCoT-RL and Delethink-RL, and the held-out
#      evaluation at B (problems of the trained sizes, HELDOUT x HELDOUT_N samples at T = 1, of the warm
#      start in both inference modes and of each RL checkpoint; every run samples problem p's sample j
#      with the same seed, so gains pair by problem)
#   2. run.sh into $LORA_OUT on the same init/data/warm start (linked, not redone) with the actor's LoRA
#      keys: LoRA-RL in both environments and the same held-out evaluation
#   3. lora_cost.py: peak resident memory and update time of one RL step, full against LoRA (once per rank)
#   4. lora_table.py: the table (held-out accuracy at B with standard errors, the paired gain, update time
#      per step, peak RSS, trainable parameters) into $LORA_OUT/lora_vs_full.md
# Both run.sh calls stop after the held-out evaluation (STOP_AFTER=heldout): no budget sweeps, timing or
# report. A learning-rate sweep is this script once per LORA_LR: each LoRA run has its own $LORA_OUT.
# Extra arguments are Hydra overrides for all four RL runs (another training seed: SEED=2, with its own
# FULL).
# Usage: [PYTHON=.venv/bin/python] [SIZE=demo] [FULL=DIR] [LORA_OUT=DIR] [RANK=16] [LORA_LR=1e-4] \
#        [SEED=N] [STEPS=N] [SFT_ARGS=...] bash recipes/markovian_testbed/lora_vs_full.sh [hydra overrides]
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/python_env.sh
SIZE=${SIZE:-demo}
SIZE_SETTINGS=$("$PYTHON" recipes/markovian_testbed/settings.py "$SIZE")  # run.sh's B, PROMPTS, SAMPLES...
# shellcheck disable=SC2086  # one NAME=VALUE word each
declare $SIZE_SETTINGS
FULL=${FULL:-outputs/markovian_testbed_$SIZE}
RANK=${RANK:-16}
LORA_LR=${LORA_LR:-1e-4}
LORA_OUT=${LORA_OUT:-${FULL}_lora_r${RANK}_lr${LORA_LR}}

echo "== full RL into $FULL"
PYTHON=$PYTHON SIZE=$SIZE OUT=$FULL STOP_AFTER=heldout bash recipes/markovian_testbed/run.sh "$@"

echo "== LoRA-RL (rank $RANK, lr $LORA_LR) into $LORA_OUT"
mkdir -p "$LORA_OUT"
for stage in init data heldout sft; do
  [[ -e "$LORA_OUT/$stage" ]] || ln -s "$(realpath "$FULL/$stage")" "$LORA_OUT/$stage"
done
PYTHON=$PYTHON SIZE=$SIZE OUT=$LORA_OUT STOP_AFTER=heldout bash recipes/markovian_testbed/run.sh \
  actor_rollout_ref.model.lora_rank="$RANK" actor_rollout_ref.model.lora_alpha=$((2 * RANK)) \
  actor_rollout_ref.actor.optim.lr="$LORA_LR" "$@"

echo "== one RL step's cost, full against LoRA"
cost=$FULL/lora_cost_r$RANK.json
if [[ ! -e "$cost" ]]; then
  "$PYTHON" recipes/markovian_testbed/lora_cost.py --model "$FULL/sft" --data "$FULL/data/train.jsonl" \
    --budget "$B" --prompts "$PROMPTS" --samples "$SAMPLES" --rank "$RANK" --out "$cost"
fi
"$PYTHON" recipes/markovian_testbed/lora_table.py --full "$FULL" --lora "$LORA_OUT" --budget "$B" \
  --cost "$cost" --out "$LORA_OUT/lora_vs_full.md"
