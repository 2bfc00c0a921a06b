"""The driver's side of the environment manager: build the actors, run a round, return its trajectories.

    rollout = EnvManagerRollout(config, engine_handles, train_items, val_items, EnvManagerConfig(...))
    items, trajectories, trajectory_ids = rollout.collect(step)   # training: num_groups x rollout.n
    items, trajectories, trajectory_ids = rollout.validate()      # the validation set, val_kwargs.n each
    rollout.shutdown()

It is a rollout source of the trainer (verl/trainer/ppo/rollout_source.py): `from_run`, `train_batch`,
`validation` and `config_problems` are that seam.

Training round `step` (1-based) has `num_groups` groups of `rollout.n` env managers; each group runs
`data.train_batch_size / num_groups` episodes, so the round yields train_batch_size x rollout.n
trajectories ordered by group, episode, member: every GRPO group (one episode) is `rollout.n` adjacent
trajectories sharing a data item and a trajectory id. Rows come from a sample-mode GlobalDataset, so
the round is a pure function of (trainer.seed, data.seed, step).

A validation round resets the traversal datasets and walks the validation set once
(`data.val_batch_size=-1`) or its first `val_batch_size` rows; each row gets `val_kwargs.n` samples
from one group. The result is ordered by row, then member.
"""

from __future__ import annotations

import ray

from verl.config import EnvManagerConfig, PolicyIterationConfig
from verl.core.trajectory import PromptItem, Trajectory
from verl.env_manager.global_dataset import (
    SAMPLE,
    TRAVERSAL,
    drop_global_dataset,
    get_dataset_manager,
    get_global_dataset,
)
from verl.env_manager.rollout_worker import TRAIN, VAL, RolloutWorker
from verl.env_manager.scheduler import EpisodeRecord, EpisodeScheduler


def spread(slots: list[tuple[int, int]], num_workers: int) -> list[list[tuple[int, int]]]:
    """Deal slots to workers round-robin, so each worker hosts members of many groups."""
    return [slots[w::num_workers] for w in range(num_workers)]


class EnvManagerRollout:
    def __init__(
        self,
        config,
        engine_handles: list,
        train_items: list[PromptItem],
        val_items: list[PromptItem],
        env_manager: EnvManagerConfig,
        run_name: str | None = None,
    ) -> None:
        """`config`: the run's PolicyIterationConfig. `engine_handles`: actors with `generate_one`
        (rollout worker i uses handle i mod len). `run_name` names the dataset actors (default
        trainer.experiment_name); two live instances need two names."""
        data, rollout = config.data, config.actor_rollout_ref.rollout
        if not engine_handles:
            raise ValueError("EnvManagerRollout needs at least one engine handle")
        if env_manager.num_workers < 1:
            raise ValueError(f"env_manager.num_workers={env_manager.num_workers}; it must be >= 1")
        self.num_groups = data.train_batch_size if env_manager.num_groups == -1 else env_manager.num_groups
        if self.num_groups < 1 or data.train_batch_size % self.num_groups:
            raise ValueError(
                f"env_manager.num_groups={env_manager.num_groups} must be >= 1 and divide "
                f"data.train_batch_size={data.train_batch_size} (each group runs an equal share)"
            )
        self.num_val_groups = (
            self.num_groups if env_manager.num_val_groups == -1 else env_manager.num_val_groups
        )
        if self.num_val_groups < 1:
            raise ValueError(
                f"env_manager.num_val_groups={env_manager.num_val_groups}; it must be >= 1 or -1"
            )
        val = rollout.val_kwargs
        odd_n = [i for i, it in enumerate(val_items) if it.val_n not in (None, val.n)]
        if odd_n:
            raise ValueError(
                f"validation row {odd_n[0]} asks for {val_items[odd_n[0]].val_n} samples; the environment "
                f"manager gives every row rollout.val_kwargs.n={val.n} (one group per row)"
            )
        self.group_size = {TRAIN: rollout.n, VAL: val.n}
        self.episodes_per_group = data.train_batch_size // self.num_groups
        self.train_items, self.val_items = train_items, val_items
        self.run_name = run_name or config.trainer.experiment_name

        self.datasets = datasets = {
            TRAIN: get_global_dataset(
                f"{self.run_name}/train",
                SAMPLE,
                train_items,
                shuffle_seed=data.seed if data.shuffle else None,
            ),
            VAL: get_global_dataset(f"{self.run_name}/val", TRAVERSAL, val_items, limit=data.val_batch_size),
        }
        sampling = {TRAIN: config.train_sampling, VAL: config.val_sampling}
        self.scheduler = ray.remote(EpisodeScheduler).options(num_cpus=0).remote()
        slots = {
            TRAIN: [(g, m) for g in range(self.num_groups) for m in range(rollout.n)],
            VAL: [(g, m) for g in range(self.num_val_groups) for m in range(val.n)],
        }
        per_worker = {mode: spread(mode_slots, env_manager.num_workers) for mode, mode_slots in slots.items()}
        worker_cls = ray.remote(RolloutWorker).options(num_cpus=0)
        self.workers = []
        for w in range(env_manager.num_workers):
            engine = engine_handles[w % len(engine_handles)]
            worker_slots = {mode: per_worker[mode][w] for mode in slots}
            self.workers.append(
                worker_cls.remote(
                    config, engine, self.scheduler, datasets, sampling, worker_slots, config.trainer.seed
                )
            )

    @classmethod
    def from_run(cls, config: PolicyIterationConfig, workers, train_items, val_items) -> EnvManagerRollout:
        """On top of the run's worker group: rollout worker i calls rank i mod world size's engine."""
        env_manager = config.actor_rollout_ref.rollout.env_manager
        return cls(config, workers.engine_handles(), train_items, val_items, env_manager)

    @staticmethod
    def config_problems(config: PolicyIterationConfig) -> list[str]:
        """The rest of the run's config must give every group an equal share, every validation row one
        group's worth of samples, and no dynamic-sampling refill (it would draw prompts elsewhere)."""
        em, rollout = "actor_rollout_ref.rollout.env_manager", "actor_rollout_ref.rollout"
        problems = []
        num_groups, batch = (
            config.actor_rollout_ref.rollout.env_manager.num_groups,
            config.data.train_batch_size,
        )
        if num_groups >= 1 and batch % num_groups:
            problems.append(
                f"{em}.num_groups={num_groups}: must be -1 or divide data.train_batch_size={batch} "
                "(each group runs an equal share of episodes)"
            )
        val_n = config.actor_rollout_ref.rollout.val_kwargs.n
        for name, task in config.val_tasks.items():
            if task.n is not None and task.n != val_n:
                problems.append(
                    f"val_tasks.{name}.n={task.n}: must be null or equal {rollout}.val_kwargs.n={val_n} with "
                    f"{em}.enable=true (a validation group of env managers has one size)"
                )
        if config.algorithm.filter_groups.enable:
            problems.append(
                f"algorithm.filter_groups.enable=True: is not supported with {em}.enable=true (episodes come "
                "from the env managers' own dataset, which the refill cannot draw from)"
            )
        if config.trainer.launcher == "local":
            problems.append(
                f"{em}.enable=True: its rollout workers and scheduler are Ray actors, which "
                "trainer.launcher='local' does not start; use trainer.launcher=ray"
            )
        return problems

    def _run_round(
        self, mode: str, num_groups: int, episodes_per_group: int | None, round_index: int
    ) -> list[EpisodeRecord]:
        size = self.group_size[mode]
        ray.get(self.scheduler.begin_round.remote(num_groups, size, episodes_per_group, round_index))
        ray.get([w.run_rollout_loops.remote(mode) for w in self.workers])
        return ray.get(self.scheduler.end_round.remote())

    def collect(self, step: int) -> tuple[list[PromptItem], list[Trajectory], list[str]]:
        """Training step `step` (1-based): items, trajectories and trajectory ids, group by group."""
        if step < 1:
            raise ValueError(f"collect(step={step}): steps count from 1")
        records = self._run_round(TRAIN, self.num_groups, self.episodes_per_group, step - 1)
        return (
            [self.train_items[r.item_index] for r in records],
            [r.trajectory for r in records],
            [r.trajectory_id for r in records],
        )

    def validate(self) -> tuple[list[PromptItem], list[Trajectory], list[str]]:
        """One walk over the validation set from its start: items, trajectories, ids, row by row."""
        ray.get(get_dataset_manager().reset_all.remote())
        records = self._run_round(VAL, self.num_val_groups, None, 0)
        records.sort(key=lambda r: (r.item_index, r.member))
        return (
            [self.val_items[r.item_index] for r in records],
            [r.trajectory for r in records],
            [r.trajectory_id for r in records],
        )

    def train_batch(self, step: int, attempt: int) -> tuple[list[PromptItem], list[Trajectory]]:
        if attempt:
            raise ValueError(
                "the environment manager has no dynamic-sampling refill (config_problems says so)"
            )
        items, trajectories, _ = self.collect(step)
        return items, trajectories

    def validation(self) -> tuple[list[PromptItem], list[Trajectory]]:
        items, trajectories, _ = self.validate()
        return items, trajectories

    def shutdown(self) -> None:
        """Close envs left open in the workers, then end the actors this instance created."""
        ray.get([w.shutdown.remote() for w in self.workers])
        for actor in [*self.workers, self.scheduler]:
            ray.kill(actor)
        drop_global_dataset(f"{self.run_name}/train", SAMPLE)
        drop_global_dataset(f"{self.run_name}/val", TRAVERSAL)
