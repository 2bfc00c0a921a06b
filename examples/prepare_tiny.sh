#!/usr/bin/env bash
# Build everything the tiny CPU runs need, under outputs/tiny/:
#   init/  a from-scratch tiny Qwen2 model + byte-level tokenizer
#   data/  the running-sum task: train.jsonl (2000 problems) and val.jsonl (64), 4..12 terms
#   sft/   the SFT warm start (partly trained, so RL has room to improve), the model RL starts from
# A step whose output already exists is skipped; FORCE=1 redoes every step.
# Usage: [PYTHON=.venv/bin/python] [FORCE=1] bash examples/prepare_tiny.sh
set -euo pipefail

cd "$(dirname "$0")/.."  # paths are relative to the repository root, as in the tiny_* configs
source examples/python_env.sh
FORCE="${FORCE:-0}"
ROOT=outputs/tiny

needed() {  # needed OUTPUT: true if OUTPUT must be (re)built
  [[ "$FORCE" == 1 || ! -e "$1" ]]
}

force_flag=()
force_override=()
if [[ "$FORCE" == 1 ]]; then
  force_flag=(--force)
  force_override=(force=true)
fi

if needed "$ROOT/init/config.json"; then
  "$PYTHON" -m verl.models.tiny --out "$ROOT/init" --seed 0 ${force_flag[@]+"${force_flag[@]}"}
else
  echo "skip: $ROOT/init exists"
fi

if needed "$ROOT/data/val.jsonl"; then
  "$PYTHON" -m verl.data.synthetic --out "$ROOT/data" --train-size 2000 --val-size 64 \
    --min-terms 4 --max-terms 12 --seed 0
else
  echo "skip: $ROOT/data exists"
fi

if needed "$ROOT/sft/config.json"; then
  "$PYTHON" -m verl.trainer.main_sft model.path="$ROOT/init" output_dir="$ROOT/sft" ${force_override[@]+"${force_override[@]}"}
else
  echo "skip: $ROOT/sft exists"
fi
