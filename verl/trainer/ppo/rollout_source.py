"""Where the trainer's trajectories come from: the seam between the training loop and the rollouts.

`WorkerRollout` (the default) hands a batch of prompts to the worker group, whose ranks run the run's
agent loop next to their engines. `EnvManagerRollout` (verl/env_manager, `rollout.env_manager.enable`)
runs the same agent loop in rollout-worker actors fed by a scheduler and a GlobalDataset. The trainer
only calls `train_batch`, `validation` and `shutdown`; the config checks call `config_problems`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from verl.config import PolicyIterationConfig
from verl.core.trajectory import PromptItem, Trajectory
from verl.data.rl_dataset import DataOrder
from verl.utils.seeding import derive_seed

if TYPE_CHECKING:  # not at run time: the config checks import this module, which stays free of torch
    from verl.single_controller.sharded_group import ShardedWorkerGroup

VALIDATION_SEED_STREAM = 7919  # validation samples draw from their own seed stream, fixed across steps


class RolloutSource(Protocol):
    @classmethod
    def from_run(
        cls,
        config: PolicyIterationConfig,
        workers: ShardedWorkerGroup,
        train_items: list[PromptItem],
        val_items: list[PromptItem],
    ) -> RolloutSource:
        """The source for this run, on top of its worker group (which owns the engines)."""
        ...

    @staticmethod
    def config_problems(config: PolicyIterationConfig) -> list[str]:
        """What the run's config must agree to for this source, one `key=value: rule` line each."""
        ...

    def train_batch(self, step: int, attempt: int) -> tuple[list[PromptItem], list[Trajectory]]:
        """train_batch_size prompts x rollout.n trajectories for step `step` (1-based), each GRPO group
        adjacent; `attempt` >= 1 is a dynamic-sampling refill of the same step."""
        ...

    def validation(self) -> tuple[list[PromptItem], list[Trajectory]]:
        """Every validation prompt with its samples adjacent; the same seeds at every validation."""
        ...

    def shutdown(self) -> None: ...


class WorkerRollout:
    def __init__(
        self,
        config: PolicyIterationConfig,
        workers: ShardedWorkerGroup,
        train_items: list[PromptItem],
        val_items: list[PromptItem],
    ) -> None:
        self.config = config
        self.workers = workers
        self.train_items = train_items
        self.val_items = val_items
        data = config.data
        self.data_order = DataOrder(len(train_items), data.train_batch_size, data.seed, data.shuffle)

    @classmethod
    def from_run(
        cls,
        config: PolicyIterationConfig,
        workers: ShardedWorkerGroup,
        train_items: list[PromptItem],
        val_items: list[PromptItem],
    ) -> WorkerRollout:
        return cls(config, workers, train_items, val_items)

    @staticmethod
    def config_problems(config: PolicyIterationConfig) -> list[str]:
        return []

    def train_batch(self, step: int, attempt: int) -> tuple[list[PromptItem], list[Trajectory]]:
        """Attempt 0 takes the step's prompts from the data order. A refill (attempt >= 1) draws prompts
        from a shuffled order of its own and samples from a seed stream of its own, so both stay pure
        functions of (seed, step, attempt) and a resumed run generates what it would have."""
        cfg = self.config
        order, stream = self.data_order, (cfg.trainer.seed, step)
        if attempt:
            order = DataOrder(len(self.train_items), cfg.data.train_batch_size,
                              derive_seed(cfg.data.seed, attempt), shuffle=True)  # fmt: skip
            stream = (cfg.trainer.seed, step, attempt)
        items = [self.train_items[i] for i in order.batch_indices(step - 1)]
        items = [item for item in items for _ in range(cfg.actor_rollout_ref.rollout.n)]
        sampling = [replace(cfg.train_sampling, seed=derive_seed(*stream, j)) for j in range(len(items))]
        return items, self.workers.generate(items, sampling)

    def validation(self) -> tuple[list[PromptItem], list[Trajectory]]:
        """Each prompt's samples (its val_n or val_kwargs.n) adjacent, data.val_batch_size prompts per
        batch (-1: all at once)."""
        cfg = self.config
        n = cfg.actor_rollout_ref.rollout.val_kwargs.n
        batch_size = cfg.data.val_batch_size if cfg.data.val_batch_size > 0 else len(self.val_items)
        items_all, trajectories = [], []
        for start in range(0, len(self.val_items), batch_size):
            items = [it for it in self.val_items[start : start + batch_size] for _ in range(it.val_n or n)]
            seeds = [
                derive_seed(cfg.trainer.seed, VALIDATION_SEED_STREAM, len(items_all) + j)
                for j in range(len(items))
            ]
            sampling = [replace(cfg.val_sampling, seed=seed) for seed in seeds]
            trajectories += self.workers.generate(items, sampling)
            items_all += items
        return items_all, trajectories

    def shutdown(self) -> None:
        """Nothing of its own: the worker group is shut down by whoever made it."""


def rollout_source_class(config: PolicyIterationConfig) -> type[RolloutSource]:
    """`rollout.env_manager.enable` picks the environment manager, else the worker group runs the loops."""
    if config.actor_rollout_ref.rollout.env_manager.enable:
        from verl.env_manager.rollout import EnvManagerRollout  # starts Ray actors: imported only when used

        return EnvManagerRollout
    return WorkerRollout


def make_rollout_source(
    config: PolicyIterationConfig,
    workers: ShardedWorkerGroup,
    train_items: list[PromptItem],
    val_items: list[PromptItem],
) -> RolloutSource:
    return rollout_source_class(config).from_run(config, workers, train_items, val_items)
