"""From a validated config to a finished run: data, reward, Ray, the worker, the trainer."""

from __future__ import annotations

import os

import ray
from transformers import AutoTokenizer

from verl.data.rl_dataset import load_prompts
from verl.trainer.config_schema import PolicyIterationConfig
from verl.trainer.delethink_ppo.ray_trainer import RayDelethinkTrainer
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.reward_score import load_reward_function
from verl.utils.seeding import seed_everything
from verl.workers.fsdp_workers import ActorRolloutRefWorker
from verl.workers.reward_manager import get_reward_manager

TRAINERS = {"ppo": RayPPOTrainer, "delethink": RayDelethinkTrainer}


def max_question_tokens(config: PolicyIterationConfig) -> int:
    """A Delethink chunk prompt is question + carry-over, and it must fit in data.max_prompt_length."""
    carry = config.algorithm.delethink.keep_head + config.algorithm.delethink.keep_tail
    return config.data.max_prompt_length - (carry if config.is_delethink else 0)


def unsupported_reason(config: PolicyIterationConfig) -> str | None:
    """What this build cannot run yet. The GPU path (SGLang, CUDA) and data-parallel worker groups
    are still to come; such configs validate and dry-run, but must not silently fall back to one CPU."""
    tr, engine = config.trainer, config.actor_rollout_ref.rollout.name
    if tr.device != "cpu" or engine != "hf":
        return f"trainer.device={tr.device} / rollout.name={engine}: only cpu / hf run"
    if tr.nnodes * tr.n_gpus_per_node > 1:
        return f"trainer.nnodes x n_gpus_per_node = {tr.nnodes * tr.n_gpus_per_node}: only one worker runs"
    return None


def run(config: PolicyIterationConfig) -> dict[str, float]:
    reason = unsupported_reason(config)
    if reason:
        raise SystemExit(f"not supported in this build yet: {reason}. DRY_RUN=1 prints the run's plan.")
    seed_everything(config.trainer.seed)
    data = config.data
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    limit = max_question_tokens(config)
    train_items = load_prompts(
        data.train_files, tokenizer, data.prompt_key, limit, data.filter_overlong_prompts
    )
    val_items = load_prompts(data.val_files, tokenizer, data.prompt_key, limit, data.filter_overlong_prompts)
    compute_score = load_reward_function(
        config.custom_reward_function.path, config.custom_reward_function.name
    )
    reward_manager = get_reward_manager(config.reward_model.reward_manager)(tokenizer, compute_score)

    threads = os.cpu_count() or 1
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init()  # join the running cluster; it owns the resources
        else:
            ray.init(num_cpus=threads, include_dashboard=False)
    # the driver waits while the worker computes, so the worker may use every core
    worker = (
        ray.remote(num_cpus=1)(ActorRolloutRefWorker)
        .options(runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}})
        .remote(config)
    )
    try:
        trainer = TRAINERS[config.trainer.name](
            config, tokenizer, train_items, val_items, reward_manager, worker
        )
        return trainer.fit()
    finally:
        ray.kill(worker)
