#!/usr/bin/env bash
# The paper's recipe: Delethink-RL with 24K thinking (C = 8K, m = 4K, I = 5).
# R1-Distill-Qwen-1.5B, one node of 8 GPUs (config: verl/trainer/config/r1d-1.5b_deepscaler_delethink_24k.yaml).
# Hydra overrides pass through, e.g. train_tasks.deepscaler.path=/path/to/deepscaler.json trainer.nnodes=2
# DRY_RUN=1 validates the config and prints the plan (GPUs, batches, budgets) and an estimate of peak
# GPU memory per rank, no GPU or model needed; a run that cannot fit trainer.gpu_memory_gib is refused.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/python_env.sh
exec "$PYTHON" -m verl.trainer.main_policy_iteration --config-name=r1d-1.5b_deepscaler_delethink_24k "$@"
