#!/usr/bin/env bash
# SFT of an HF model on prompt/response (or chat messages) rows from jsonl/parquet files
# (verl/trainer/config/sft.yaml); every Hydra key can be overridden on the command line:
#   MODEL=Qwen/... TRAIN=a.jsonl VAL=b.jsonl OUT=outputs/sft bash examples/sft_jsonl.sh train.steps=500
#   NPROC=8 bash examples/sft_jsonl.sh ...          (torchrun, FSDP2 over 8 ranks)
#   ... data.continuation.prob=0.3                  (a Markovian warm start: Delethink continuation chunks)
# Without MODEL it runs on CPU: a tiny model and a dozen math rows with <think> traces (sft/demo_rows.py).
# Writes $OUT (the final HF model) and ${OUT}_run (metrics.jsonl, global_step_N checkpoints; a second
# call resumes from the newest one).
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/python_env.sh
OUT=${OUT:-outputs/sft_jsonl}
tiny_args=()
if [ -z "${MODEL:-}" ]; then
  MODEL=outputs/sft_jsonl_data/init
  [ -f "$MODEL/config.json" ] || "$PYTHON" -m verl.models.tiny --out "$MODEL"
  TRAIN=outputs/sft_jsonl_data/train.jsonl VAL=outputs/sft_jsonl_data/val.jsonl
  "$PYTHON" -m verl.trainer.sft.demo_rows --out outputs/sft_jsonl_data
  # sized for the tiny model: C = 64, m = 8 + 24, a few steps at a high learning rate
  tiny_args=(train.steps=20 train.batch_size=4 train.lr=3e-3 train.warmup_steps=2 num_threads=1
             trainer.test_freq=5 trainer.save_freq=10 data.max_length=1024 data.continuation.chunk_size=64
             data.continuation.keep_head=8 data.continuation.keep_tail=24 data.continuation.prob=0.3)
fi
: "${TRAIN:?set TRAIN to a jsonl/parquet file (or leave MODEL unset for the tiny demo)}"
args=(--config-name=sft model.path="$MODEL" output_dir="$OUT" force=true data.train_files="[$TRAIN]"
      ${VAL:+data.val_files="[$VAL]"} ${tiny_args[@]+"${tiny_args[@]}"})
if [ "${NPROC:-1}" -gt 1 ]; then
  exec "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" -m verl.trainer.main_sft "${args[@]}" "$@"
fi
exec "$PYTHON" -m verl.trainer.main_sft "${args[@]}" "$@"
