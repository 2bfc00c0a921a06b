"""From a validated config to a finished run: data, reward, Ray, the worker group, the trainer."""

from __future__ import annotations

import importlib.util
import os
import sys

import ray
from transformers import AutoTokenizer

from verl.data.tasks import load_split
from verl.trainer.config_schema import PolicyIterationConfig
from verl.trainer.delethink_ppo.ray_trainer import RayDelethinkTrainer
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.resume import prepare_resume
from verl.utils.checkpoint import ResumeError
from verl.utils.reward_score import load_reward_function, math_verify
from verl.utils.seeding import seed_everything
from verl.workers.reward_manager import get_reward_manager
from verl.workers.worker_group import ActorRolloutWorkerGroup

TRAINERS = {"ppo": RayPPOTrainer, "delethink": RayDelethinkTrainer}


def max_question_tokens(config: PolicyIterationConfig) -> int:
    """A Delethink chunk prompt is question + carry-over, and it must fit in data.max_prompt_length."""
    carry = config.delethink_params.carry if config.is_delethink else 0
    return config.data.max_prompt_length - carry


def unsupported_reason(config: PolicyIterationConfig) -> str | None:
    """What this machine cannot run; such configs still validate and dry-run, but must not silently
    fall back to something else."""
    import torch

    tr, engine = config.trainer, config.actor_rollout_ref.rollout.name
    if engine == "sglang" and importlib.util.find_spec("sglang") is None:
        return "rollout.name=sglang, but sglang is not installed (pip install -e .[gpu])"
    if tr.device == "cuda" and not torch.cuda.is_available():
        return "trainer.device=cuda, but no CUDA device is visible"
    return None


def run(config: PolicyIterationConfig) -> dict[str, float]:
    reason = unsupported_reason(config)
    if reason:
        raise SystemExit(f"cannot run here: {reason}. DRY_RUN=1 prints the run's plan.")
    try:
        resume_from, notes = prepare_resume(config)
    except ResumeError as e:
        raise SystemExit(f"resume error: {e}") from None
    for note in notes:
        print(f"resume: {note}", file=sys.stderr)
    seed_everything(config.trainer.seed)
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    limit = max_question_tokens(config)
    train_items = load_split(config, "train", tokenizer, limit)
    val_items = load_split(config, "val", tokenizer, limit)
    compute_score = load_reward_function(
        config.custom_reward_function.path, config.custom_reward_function.name
    )
    reward_manager = get_reward_manager(config.reward_model.reward_manager)(tokenizer, compute_score)
    math_verify.set_pool_size(config.reward_model.scoring_processes)  # the reward manager scores here

    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init()  # join the running cluster; it owns the resources
        else:
            # one CPU slot per rank even on a small machine: ranks share the cores (their threads are split)
            world_size = config.trainer.nnodes * config.trainer.n_gpus_per_node
            ray.init(num_cpus=max(os.cpu_count() or 1, world_size), include_dashboard=False)
    workers = ActorRolloutWorkerGroup(config)
    try:
        trainer = TRAINERS[config.trainer.name](
            config, tokenizer, train_items, val_items, reward_manager, workers
        )
        return trainer.fit(resume_from)
    finally:
        workers.shutdown()
