"""Did the warm start learn the task? run.sh asks after SFT, before any RL.

    python recipes/markovian_testbed/warm_start.py OUT/sft

Prints the warm start's held-out T = 1 accuracy curve (the early-stopping checks of main_sft, from
sft_metrics.json) and exits 0 if it reached its target (`train.stop_at_accuracy`); otherwise one line
naming the seed, the accuracy reached and the target, and exit 1: RL from a model that cannot do the task
has nothing to learn from, and every claim measured after it would be about that model, not the method.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verl.trainer.sft.outcome import read


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sft_dir", type=Path, help="main_sft's output_dir")
    warm = read(parser.parse_args(argv).sft_dir)
    print(warm.verdict(), file=sys.stdout if warm.reached else sys.stderr)
    sys.exit(0 if warm.reached else 1)


if __name__ == "__main__":
    main()
