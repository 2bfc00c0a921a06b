"""RayDelethinkTrainer: PPO on chunked trajectories.

Differences from LongCoT, all in how the training batch is built: each chunk becomes its own row
(its exact prompt = question + carry-over, and its exact sampled tokens) with the trajectory's
advantage and the trajectory's whole trace length. Padding to a multiple of mini-batches x ranks
and `rows_per_trajectory` are the base trainer's (verl/core/batch.py); `rows_per_trajectory` weighs
only the actor's trajectory-mean loss mode, and is logged only when the actor uses that mode.
"""

from __future__ import annotations

from verl.core import names
from verl.core.batch import TrainRow, trajectory_rows
from verl.core.trajectory import Trajectory
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, trajectory_metrics


class RayDelethinkTrainer(RayPPOTrainer):
    def training_rows(self, trajectories: list[Trajectory], advantages: list[float]) -> list[TrainRow]:
        return trajectory_rows(trajectories, advantages)  # every chunk its own row

    def batch_metrics(
        self, trajectories: list[Trajectory], num_rows: int, num_padded: int, rows_per_trajectory: float
    ) -> dict[str, float]:
        metrics = {
            **trajectory_metrics("delethink", trajectories),
            "delethink/flat_batch_size": float(num_rows),
            "delethink/padding_rows": float(num_padded - num_rows),
        }
        if self.config.actor_rollout_ref.actor.loss_agg_mode == names.TRAJECTORY_MEAN_MODE:
            metrics["delethink/rows_per_trajectory"] = rows_per_trajectory
        return metrics
