"""`trainer.*`: the run itself: steps, ranks, device, logging, checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.config.rules import (
    DEVICES,
    LAUNCHERS,
    LOGGERS,
    RESUME_MODES,
    TRAINER_NAMES,
    broken,
    non_negative,
    not_empty,
    off_or_positive,
    one_of,
    positive,
)

# 0 would delete every checkpoint after it is written, the one a run resumes from included
KEEP_RULE = "must be null (keep all) or >= 1: 0 would delete the checkpoint a resumed run starts from"


@dataclass
class TrainerConfig:
    name: str = "ppo"  # set by the environment; ppo (one row per trajectory) | delethink (one row per chunk)
    project_name: str = "delethink"  # wandb project
    experiment_name: str = "run"  # run name; also names the output directory
    group: str = "default"  # wandb group: the LongCoT and Delethink runs of one study share it
    logger: list[str] = field(default_factory=lambda: ["console", "jsonl"])  # any of console | jsonl | wandb
    total_training_steps: int = 10  # training steps (one batch of train_batch_size prompts each)
    val_before_train: bool = True  # validate once before the first step
    test_freq: int = -1  # validate every N steps (and after the last); -1: never during training
    save_freq: int = -1  # checkpoint every N steps (and after the last); -1: only after the last
    # keep the newest N checkpoints; older ones are deleted after each save (verl's name); null: keep all
    max_actor_ckpt_to_keep: int | None = None
    # algorithm.adv_estimator=gae: the newest N kept checkpoints keep their critic/, older ones keep only
    # the actor (for evaluation; no longer a resume point); null: keep all
    max_critic_ckpt_to_keep: int | None = None
    # checkpoints of steps that are multiples of N are never deleted; null: none kept for good
    keep_ckpt_every_n_steps: int | None = None
    resume_mode: str = "auto"  # auto: latest checkpoint in default_local_dir | disable | path
    resume_from_path: str | None = None  # checkpoint directory for resume_mode=path
    overwrite: bool = False  # resume_mode=disable in a directory holding a run: move that run aside first
    default_local_dir: str = "outputs/run"  # checkpoints, metrics, rollouts, Hydra output
    log_rollouts: bool = True  # JSONL rollout dumps under default_local_dir/rollouts/
    # first N validation trajectories per validation: wandb Table + val_generations.jsonl
    log_val_generations: int = 0
    nnodes: int = 1  # machines
    n_gpus_per_node: int = 1  # devices (workers) per machine
    device: str = "cpu"  # cpu | cuda
    # ray: one Ray actor per rank | local: this process on one device, no Ray (one GPU, pdb, profiling)
    launcher: str = "ray"
    # GiB of one GPU; a cuda run whose estimated peak (DRY_RUN=1 prints it) exceeds it is refused
    gpu_memory_gib: float = 80.0
    seed: int = 1  # seed of sampling and initialisation
    critic_warmup: int = 0  # gae: the first N steps update only the critic (the actor waits for its values)

    @property
    def world_size(self) -> int:
        """Ranks (one worker each): nnodes x n_gpus_per_node."""
        return self.nnodes * self.n_gpus_per_node

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            one_of("name", TRAINER_NAMES),
            *positive("total_training_steps", "nnodes", "n_gpus_per_node"),
            *non_negative("critic_warmup"),
            ("test_freq", off_or_positive, "must be -1 (off / all at once) or > 0"),
            ("save_freq", off_or_positive, "must be -1 (off / all at once) or > 0"),
            *[(name, lambda v: v is None or v >= 1, KEEP_RULE)
              for name in ("max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep")],
            ("keep_ckpt_every_n_steps", lambda v: v is None or v >= 1, "must be null (keep none) or >= 1"),
            ("keep_ckpt_every_n_steps",
             lambda v: v is None or v < 1 or self.save_freq <= 0 or v % self.save_freq == 0,
             f"must be a multiple of trainer.save_freq={self.save_freq}: checkpoints are written at its "
             "multiples only"),
            ("log_val_generations", lambda v: v >= 0, "must be >= 0 (0: log none)"),
            ("gpu_memory_gib", lambda v: v > 0, "must be > 0 (GiB of one GPU)"),
            ("logger", lambda v: set(v) <= set(LOGGERS), f"every entry must be one of {list(LOGGERS)}"),
            one_of("resume_mode", RESUME_MODES),
            ("resume_from_path", lambda v: self.resume_mode != "path" or bool(v),
             "must be set when trainer.resume_mode='path'"),
            one_of("device", DEVICES),
            one_of("launcher", LAUNCHERS),
            ("launcher", lambda v: v != "local" or self.world_size == 1,
             f"runs one rank in this process, but trainer.nnodes x trainer.n_gpus_per_node = "
             f"{self.nnodes} x {self.n_gpus_per_node}; set both to 1 or use trainer.launcher=ray"),
            *not_empty("project_name", "experiment_name", "default_local_dir"),
        ])  # fmt: skip
