#!/usr/bin/env bash
# The paper's recipe: LongCoT-RL with a 24K thinking budget.
# R1-Distill-Qwen-1.5B, one node of 8 GPUs (config: verl/trainer/config/r1d-1.5b_deepscaler_longcot_24k.yaml).
# Hydra overrides pass through, e.g. train_tasks.deepscaler.path=/path/to/deepscaler.json trainer.nnodes=2
# DRY_RUN=1 validates the config and prints the plan (GPUs, batches, budgets) and an estimate of peak
# GPU memory per rank, no GPU or model needed; a run that cannot fit trainer.gpu_memory_gib is refused.
# On 80 GB GPUs it is refused: one 24K response's float32 logits alone need ~83 GiB in our actor
# (docs/PAPER_CONFIGS.md); on 141 GB H200s add trainer.gpu_memory_gib=139.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-python}" -m verl.trainer.main_policy_iteration --config-name=r1d-1.5b_deepscaler_longcot_24k "$@"
