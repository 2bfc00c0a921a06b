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
    carry = 0
    if config.actor_rollout_ref.rollout.agent.default_agent_loop == "delethink":
        carry = config.algorithm.delethink.keep_head + config.algorithm.delethink.keep_tail
    return config.data.max_prompt_length - carry


def run(config: PolicyIterationConfig) -> dict[str, float]:
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
        ray.init(num_cpus=threads, include_dashboard=False, log_to_driver=True)
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
