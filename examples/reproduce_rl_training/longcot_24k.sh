#!/usr/bin/env bash
# The paper's recipe: LongCoT-RL with a 24K thinking budget.
# R1-Distill-Qwen-1.5B, one node of 8 GPUs (config: verl/trainer/config/r1d-1.5b_deepscaler_longcot_24k.yaml).
# Hydra overrides pass through, e.g. train_tasks.deepscaler.path=/path/to/deepscaler.json trainer.nnodes=2
# DRY_RUN=1 validates the config and prints the plan (GPUs, batches, budgets) and an estimate of peak
# GPU memory per rank, no GPU or model needed; a run that cannot fit trainer.gpu_memory_gib is refused.
# It fits an 80 GB GPU: estimated peak 64.1 GiB per rank, in the old-log-prob pass beside the rollout
# engine's share; a 24576-token response runs alone, its logits 7.2 GiB there and 14.2 GiB in the
# update (docs/PAPER_CONFIGS.md). On 141 GB H200s add trainer.gpu_memory_gib=139.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/python_env.sh
exec "$PYTHON" -m verl.trainer.main_policy_iteration --config-name=r1d-1.5b_deepscaler_longcot_24k "$@"
