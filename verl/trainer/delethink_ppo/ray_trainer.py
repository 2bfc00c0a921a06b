"""RayDelethinkTrainer: PPO on chunked trajectories.

Differences from LongCoT, all in how the training batch is built: each chunk becomes its own row
(its exact prompt = question + carry-over, and its exact sampled tokens) with the trajectory's
advantage and the trajectory's whole trace length; the row count is padded to a multiple of the
number of mini-batches; and the loss is rescaled by the flat-batch correction ratio.
"""

from __future__ import annotations

import torch

from verl.agent_loop.base import Trajectory
from verl.trainer.delethink_ppo.flatten import flat_batch_correction_ratio, pad_rows_to_multiple
from verl.trainer.ppo.batch import collate_rows, trajectory_rows
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, trajectory_metrics


class RayDelethinkTrainer(RayPPOTrainer):
    def build_training_batch(
        self, trajectories: list[Trajectory], advantages: list[float]
    ) -> tuple[dict[str, torch.Tensor], float, dict[str, float]]:
        rows = trajectory_rows(trajectories, advantages)
        world_size = self.config.trainer.nnodes * self.config.trainer.n_gpus_per_node
        padded = pad_rows_to_multiple(rows, self.num_mini_batches() * world_size)
        ratio = flat_batch_correction_ratio(len(padded), len(trajectories))
        metrics = {
            **trajectory_metrics("delethink", trajectories),
            "delethink/flat_batch_size": float(len(rows)),
            "delethink/padding_rows": float(len(padded) - len(rows)),
            "delethink/correction_ratio": ratio,
        }
        return collate_rows(padded, self.tokenizer.pad_token_id), ratio, metrics
