#!/usr/bin/env bash
# CPU quickstart: the Markovian testbed at its demo size (recipes/markovian_testbed/, SIZE=demo).
# A tiny model is warm-started on the shift-register task until it solves half of its held-out problems,
# LongCoT-RL and Delethink-RL train from that checkpoint at the same thinking budget (B = 256; Delethink
# C = 64, m = 32, I = 7), both are evaluated against their warm start, and the report's verdict table
# checks the paper's claims against their targets. Outputs in $OUT (outputs/quickstart): report.md
# (printed at the end, without its pictures), accuracy_vs_budget.png, crossover.png, training_curves.png, cost.png.
#   [OUT=DIR] [FORCE=1] [SEEDS="1 2 3"] bash examples/quickstart.sh [hydra overrides applied to both RL runs]
# A stage whose output exists is skipped, so a second call only prints the report; FORCE=1 redoes all.
# SEEDS runs the demo once per seed (OUT/seed_N) and prints the aggregate over seeds instead.
# `make demo` runs this inside the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/quickstart}
# run.sh ends by printing the report (with SEEDS, the aggregate over seeds)
SIZE=demo OUT="$OUT" bash recipes/markovian_testbed/run.sh "$@"
