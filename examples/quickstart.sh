#!/usr/bin/env bash
# CPU quickstart: the Markovian testbed at its demo size (recipes/markovian_testbed/, SIZE=demo).
# A tiny model is warm-started on the shift-register task, LongCoT-RL and Delethink-RL train from that
# checkpoint at the same thinking budget (B = 256; Delethink C = 64, m = 32, I = 7), both are evaluated,
# and the report checks the paper's claims against their targets. Outputs in $OUT (outputs/quickstart):
# report.md (printed at the end), accuracy_vs_budget.png, cost.png, training_curves.png.
#   [OUT=DIR] [FORCE=1] bash examples/quickstart.sh [hydra overrides applied to both RL runs]
# A stage whose output exists is skipped, so a second call only prints the report; FORCE=1 redoes all.
# `make demo` runs this inside the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/quickstart}
SIZE=demo OUT="$OUT" bash recipes/markovian_testbed/run.sh "$@"
echo
grep -v '^!\[' "$OUT/report.md"
