"""N actor/rollout workers (one per device) that the driver calls like a single worker, without Ray.

The group splits work across ranks and joins the results:

- generation: requests are split into contiguous shards, one per rank, and joined back in order;
- log-probs: rows are split into contiguous shards, or into token-balanced shards with
  `actor.use_dynamic_bsz` (the actor keeps every rank's forward count equal, as FSDP2 needs);
- updates: each mini-batch is split across ranks, so every rank's batch holds its share of every
  mini-batch in the same order, and the ranks' gradients add up to the mini-batch gradient. With
  `use_dynamic_bsz` the split balances tokens, and each row carries its mini-batch number. The critic
  (algorithm.adv_estimator=gae) lives in the same workers: its values are split like log-probs, its
  update like the actor's.

How a call reaches a rank is a subclass's one job (`_call_ranks`): Ray actors
(`verl/single_controller/worker_group.py`, trainer.launcher=ray) or the one in-process worker
(`verl/single_controller/local_worker_group.py`, trainer.launcher=local). This module imports no Ray, so the
trainer can name the group's type without starting it.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.core.batch import select_rows
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem, Trajectory
from verl.workers.data_parallel import row_token_counts
from verl.workers.micro_batching import balance_rows_across_ranks, balanced_update_shards


def contiguous_shards(n: int, num_shards: int) -> list[slice]:
    """Split range(n) into `num_shards` contiguous slices whose sizes differ by at most one."""
    base, extra = divmod(n, num_shards)
    bounds = [0]
    for shard in range(num_shards):
        bounds.append(bounds[-1] + base + (1 if shard < extra else 0))
    return [slice(bounds[i], bounds[i + 1]) for i in range(num_shards)]


def update_shard_indices(num_rows: int, num_mini_batches: int, world_size: int) -> list[torch.Tensor]:
    """Row indices each rank trains on: its contiguous block of every mini-batch, mini-batch order kept.

    With 8 rows, 2 mini-batches and 2 ranks: rank 0 gets rows [0, 1, 4, 5], rank 1 gets [2, 3, 6, 7].
    """
    if num_rows % (num_mini_batches * world_size):
        raise ValueError(
            f"{num_rows} rows do not split into {num_mini_batches} mini-batches x {world_size} ranks"
        )
    per_rank = num_rows // num_mini_batches // world_size
    return [
        torch.tensor(
            [m * per_rank * world_size + rank * per_rank + i
             for m in range(num_mini_batches) for i in range(per_rank)],
            dtype=torch.long,
        )
        for rank in range(world_size)
    ]  # fmt: skip


class ShardedWorkerGroup:
    world_size: int
    dynamic_bsz: bool

    def _call_ranks(self, method: str, calls: dict[int, tuple[Any, ...]], **kwargs: Any) -> list[Any]:
        """`method(*calls[rank], **kwargs)` on every rank in `calls`, all at once (collectives need every
        rank in the call); the results in rank order."""
        raise NotImplementedError

    def lost_node_report(self) -> str | None:
        """After an error: one line naming the ranks' nodes that are gone, or None when none is (ranks
        in this process have no node to lose)."""
        return None

    # rollout ---------------------------------------------------------------------------------
    def generate(self, items: list[PromptItem], sampling_params: list[SamplingParams]) -> list[Trajectory]:
        shards = contiguous_shards(len(items), self.world_size)
        calls = {r: (items[s], sampling_params[s]) for r, s in enumerate(shards) if s.stop > s.start}
        return [traj for part in self._call_ranks("generate", calls) for traj in part]

    # training --------------------------------------------------------------------------------
    def _row_parallel(self, method: str, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        n = batch["responses"].shape[0]
        if self.dynamic_bsz:
            balanced = balance_rows_across_ranks(row_token_counts(batch), self.world_size)
            shards = [torch.tensor(rows, dtype=torch.long) for rows in balanced]
        else:
            shards = [torch.arange(n)[s] for s in contiguous_shards(n, self.world_size)]
        parts = self._call_ranks(method, {r: (select_rows(batch, rows),) for r, rows in enumerate(shards)})
        out = torch.zeros_like(batch["response_mask"])
        for rows, part in zip(shards, parts, strict=True):
            out[rows, : part.shape[1]] = part
        return out

    def compute_log_prob(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._row_parallel("compute_log_prob", batch)

    def compute_ref_log_prob(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._row_parallel("compute_ref_log_prob", batch)

    def compute_values(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._row_parallel("compute_values", batch)

    def _update_shards(
        self, batch: dict[str, torch.Tensor], num_mini_batches: int
    ) -> list[dict[str, torch.Tensor]]:
        """Each rank's rows of an update: its share of every mini-batch, in mini-batch order."""
        if self.dynamic_bsz:
            shards = []
            for rows, mini in balanced_update_shards(
                row_token_counts(batch), num_mini_batches, self.world_size
            ):
                shard = select_rows(batch, torch.tensor(rows, dtype=torch.long))
                shard["mini_batch_index"] = torch.tensor(mini, dtype=torch.long)
                shards.append(shard)
        else:
            n = batch["responses"].shape[0]
            shards = [
                select_rows(batch, rows)
                for rows in update_shard_indices(n, num_mini_batches, self.world_size)
            ]
        return shards

    def update(
        self,
        batch: dict[str, torch.Tensor],
        num_mini_batches: int,
        rows_per_trajectory: float = 1.0,
        *,
        actor: bool = True,
        critic: bool = False,
    ) -> dict[str, float]:
        """The critic's update (gae) and then the actor's, as `ActorRolloutRefWorker.update`."""
        shards = self._update_shards(batch, num_mini_batches)
        calls = {r: (shard, num_mini_batches, rows_per_trajectory) for r, shard in enumerate(shards)}
        # metrics are reduced over ranks; every rank reports the same
        return self._call_ranks("update", calls, actor=actor, critic=critic)[0]

    def update_actor(
        self, batch: dict[str, torch.Tensor], num_mini_batches: int, rows_per_trajectory: float = 1.0
    ) -> dict[str, float]:
        return self.update(batch, num_mini_batches, rows_per_trajectory)

    # checkpoints and inspection: every rank takes part in the collectives, rank 0 answers ------
    def _all(self, method: str, *args: Any) -> Any:
        return self._call_ranks(method, dict.fromkeys(range(self.world_size), args))[0]

    def save_checkpoint(self, directory: str) -> None:
        self._all("save_checkpoint", directory)

    def load_checkpoint(self, directory: str) -> None:
        self._all("load_checkpoint", directory)

    def save_critic_checkpoint(self, directory: str) -> None:
        self._all("save_critic_checkpoint", directory)

    def load_critic_checkpoint(self, directory: str) -> None:
        self._all("load_critic_checkpoint", directory)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return self._all("full_state_dict")

    def engine_state_dicts(self) -> list[dict[str, torch.Tensor]]:
        return self._call_ranks("engine_state_dict", dict.fromkeys(range(self.world_size), ()))

    def shutdown(self) -> None:
        raise NotImplementedError
