#!/usr/bin/env bash
# The paper's recipe: Delethink-RL with 96K thinking (C = 8K, m = 4K, I = 23).
# R1-Distill-Qwen-1.5B, one node of 8 GPUs (config: verl/trainer/config/r1d-1.5b_openmath_delethink_96k.yaml).
# Hydra overrides pass through, e.g. data.train_files=/path/to/openmath.parquet trainer.nnodes=2
# DRY_RUN=1 validates the config and prints the plan (GPUs, batches, budgets), no GPU or model needed.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-python}" -m verl.trainer.main_policy_iteration --config-name=r1d-1.5b_openmath_delethink_96k "$@"
