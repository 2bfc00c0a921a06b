"""Did the warm start learn the task? run.sh asks after SFT, before any RL.

    python recipes/markovian_testbed/warm_start.py OUT/sft

Prints the warm start's held-out T = 1 accuracy curve (the early-stopping checks of main_sft, from
sft_metrics.json) and exits 0 if it reached its target (`train.stop_at_accuracy`); otherwise one line
naming the seed, the accuracy reached, the target and where its trace goes wrong (the first step and kind
of token it gets wrong under teacher forcing on problems of the RL sizes, step_errors.py), and exit 1: RL
from a model that cannot do the task has nothing to learn from, and every claim measured after it would
be about that model, not the method.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omegaconf import OmegaConf

from verl.trainer.sft.outcome import read

DIAGNOSED_PROBLEMS = 200  # held-out problems of the RL sizes fed to a warm start that missed its target


def diagnosis(sft_dir: Path) -> str:
    """Where a shift-register warm start's trace first goes wrong, on problems of its check sizes."""
    config = OmegaConf.load(sft_dir / "sft_config.yaml")
    if OmegaConf.select(config, "task.name") != "shift_register":
        return ""
    # here, not at the top: a warm start that reached its target (every recipe run) needs no model
    from step_errors import count_errors, where_it_goes_wrong
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the verdict is one line
    errors = count_errors(sft_dir, DIAGNOSED_PROBLEMS, config.eval.min_size, config.eval.max_size, seed=4321)
    return f"{where_it_goes_wrong(errors)} (step_errors.py {sft_dir})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sft_dir", type=Path, help="main_sft's output_dir")
    sft_dir = parser.parse_args(argv).sft_dir
    warm = read(sft_dir)
    if warm.reached:
        print(warm.verdict())
        sys.exit(0)
    print(warm.verdict(diagnosis(sft_dir)), file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
