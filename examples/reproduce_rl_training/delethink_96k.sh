#!/usr/bin/env bash
# The paper's recipe: Delethink-RL with 96K thinking (C = 8K, m = 4K, I = 23), one node of 8 GPUs
# (config: verl/trainer/config/r1d-1.5b_openmath_delethink_96k.yaml). Starts from the authors' 96K base
# checkpoint McGill-NLP/delethink-96k-base-1.5b and trains on their filtered OpenMath set, which (with the
# OpenMath validation slice) loads from the Hugging Face hub; offline, give local copies as the tasks'
# paths, or start-up stops with the command that saves each (config/train_tasks/openmath.yaml,
# config/val_tasks/openmath_val.yaml).
# Hydra overrides pass through, e.g. train_tasks.openmath.path=/data/openmath.jsonl trainer.nnodes=2
# DRY_RUN=1 validates the config and prints the plan (GPUs, batches, budgets) and an estimate of peak
# GPU memory per rank, no GPU or model needed; a run that cannot fit trainer.gpu_memory_gib is refused.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/python_env.sh
exec "$PYTHON" -m verl.trainer.main_policy_iteration --config-name=r1d-1.5b_openmath_delethink_96k "$@"
