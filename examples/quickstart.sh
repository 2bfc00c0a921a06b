#!/usr/bin/env bash
# CPU quickstart: tiny model -> SFT warm start -> LongCoT-RL and Delethink-RL from the same checkpoint
# with the same total thinking budget -> a comparison table and plot.
#   bash examples/quickstart.sh [hydra overrides applied to both runs]
# `make demo` runs this inside the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export TOKENIZERS_PARALLELISM=false

echo "== 1/4 tiny model, synthetic data, SFT warm start (outputs/tiny/)"
PYTHON=$PYTHON bash examples/prepare_tiny.sh

for mode in longcot delethink; do
  echo "== RL: tiny_${mode} (outputs/tiny_${mode}/)"
  rm -rf "outputs/tiny_${mode}"
  "$PYTHON" -m verl.trainer.main_policy_iteration --config-name="tiny_${mode}" "$@"
done

echo "== comparison"
"$PYTHON" -m verl.tools.compare outputs/tiny_longcot outputs/tiny_delethink --out outputs/quickstart.png
