"""Delethink's training batch: one row per chunk, made divisible, and the loss correction for it.

A Delethink trajectory of k chunks becomes k rows that share the trajectory's advantage and trace
length. The number of rows therefore varies from step to step; it is padded with untrainable rows to
a multiple of the number of mini-batches, and the per-row loss mean is rescaled by
`rows / trajectories` so that every trajectory weighs the same as in LongCoT, whatever its chunk count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from verl.trainer.ppo.batch import TrainRow


def pad_rows_to_multiple(rows: Sequence[TrainRow], multiple: int) -> list[TrainRow]:
    """Append copies of the last row, marked untrainable, until len(rows) is a multiple of `multiple`."""
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    if not rows:
        raise ValueError("cannot pad an empty batch")
    missing = -len(rows) % multiple
    return list(rows) + [replace(rows[-1], trainable=False) for _ in range(missing)]


def flat_batch_correction_ratio(num_rows: int, num_trajectories: int) -> float:
    """Factor turning a mean over rows into a mean over trajectories.

    The actor averages its per-row loss over the rows of a mini-batch; with trace-length
    normalisation each trajectory's rows sum to that trajectory's loss, so multiplying by
    rows / trajectories makes the batch loss the mean over trajectories.
    """
    if num_trajectories < 1 or num_rows < num_trajectories:
        raise ValueError(
            f"need rows >= trajectories >= 1, got {num_rows} rows for {num_trajectories} trajectories"
        )
    return num_rows / num_trajectories
