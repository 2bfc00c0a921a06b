#!/usr/bin/env bash
# Delethink-RL from a config; every Hydra key can be overridden on the command line:
#   bash examples/delethink_template.sh trainer.total_training_steps=3 actor_rollout_ref.rollout.n=4
#   CONFIG=r1d-1.5b_deepscaler_delethink_24k bash examples/delethink_template.sh ...   (GPU)
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/python_env.sh
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
exec "$PYTHON" -m verl.trainer.main_policy_iteration --config-name="${CONFIG:-tiny_delethink}" "$@"
