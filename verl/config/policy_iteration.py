"""The whole training config: one field per section, and the numbers derived from several keys
(world size, mini-batches, the question budget, the train/val sampling parameters), each computed once."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from verl.config.actor_rollout_ref import ActorRolloutRefConfig
from verl.config.algorithm import AlgorithmConfig
from verl.config.critic import CriticConfig
from verl.config.data import DataConfig, TaskConfig
from verl.config.reward import CustomRewardFunctionConfig, RewardModelConfig
from verl.config.rules import broken, environment_names, one_of
from verl.config.trainer import TrainerConfig
from verl.core.delethink import DelethinkParams
from verl.core.engine import SamplingParams


@dataclass
class PolicyIterationConfig:
    data: DataConfig
    actor_rollout_ref: ActorRolloutRefConfig
    algorithm: AlgorithmConfig
    reward_model: RewardModelConfig
    custom_reward_function: CustomRewardFunctionConfig
    trainer: TrainerConfig
    critic: CriticConfig = field(default_factory=CriticConfig)  # value model (algorithm.adv_estimator=gae)
    environment: str = "longcot"  # set by the environment file (config/environment/): its own name
    # problem sets by name (config group train_tasks/); used with or instead of data.train_files
    train_tasks: dict[str, TaskConfig] = field(default_factory=dict)
    # problem sets by name (config group val_tasks/)
    val_tasks: dict[str, TaskConfig] = field(default_factory=dict)
    # modules or .py files imported at start-up (driver and workers) to register classes
    external_plugins: list[str] = field(default_factory=list)

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [one_of("environment", environment_names())])

    @property
    def is_delethink(self) -> bool:
        """Whether trajectories are generated in Delethink's chunked environment."""
        return self.actor_rollout_ref.rollout.agent.default_agent_loop == "delethink"

    @functools.cached_property
    def delethink_params(self) -> DelethinkParams:
        """algorithm.delethink as the one Delethink parameter object (load_config has checked it)."""
        return DelethinkParams(**dataclasses.asdict(self.algorithm.delethink))

    @property
    def uses_critic(self) -> bool:
        """Whether the run trains a value model: only algorithm.adv_estimator=gae needs one."""
        return self.algorithm.adv_estimator == "gae"

    @property
    def critic_model_path(self) -> str:
        """critic.model.path, or the actor's model when it is null."""
        return self.critic.model.path or self.actor_rollout_ref.model.path

    @property
    def engine_dtype(self) -> str:
        """The rollout engine's dtype: rollout.dtype, else float32 (hf) or actor param_dtype (sglang)."""
        rollout, actor = self.actor_rollout_ref.rollout, self.actor_rollout_ref.actor
        if rollout.dtype is not None:
            return rollout.dtype
        return actor.fsdp_config.param_dtype if rollout.name == "sglang" else "float32"

    @property
    def trajectories_per_step(self) -> int:
        """Trajectories one training step generates: train_batch_size prompts x rollout.n samples."""
        return self.data.train_batch_size * self.actor_rollout_ref.rollout.n

    @property
    def num_mini_batches(self) -> int:
        """Optimizer steps per training batch: fixed_num_optim_steps, else train_batch_size over
        ppo_mini_batch_size (both count prompts)."""
        actor = self.actor_rollout_ref.actor
        return actor.fixed_num_optim_steps or self.data.train_batch_size // actor.ppo_mini_batch_size

    @property
    def max_question_tokens(self) -> int:
        """The longest prompt a row may have: data.max_prompt_length, less the carry-over a Delethink
        chunk's prompt also holds."""
        carry = self.delethink_params.carry if self.is_delethink else 0
        return self.data.max_prompt_length - carry

    @property
    def train_sampling(self) -> SamplingParams:
        """Sampling of training trajectories (no seed: each trajectory gets its own)."""
        r = self.actor_rollout_ref.rollout
        return SamplingParams(self.data.max_response_length, r.temperature, r.top_p, r.top_k)

    @property
    def val_sampling(self) -> SamplingParams:
        """Sampling of validation trajectories: val_kwargs, greedy unless do_sample (no seed)."""
        v = self.actor_rollout_ref.rollout.val_kwargs
        temperature = v.temperature if v.do_sample else 0.0
        return SamplingParams(self.data.max_response_length, temperature, v.top_p, v.top_k)

    @property
    def thinking_budget(self) -> int:
        """Most thinking tokens one trajectory can hold: LongCoT's B, or Delethink's C + (I-1)(C-m)."""
        if not self.is_delethink:
            return self.data.max_response_length
        return self.delethink_params.thinking_budget

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict of every value, for logging the run's config."""
        return dataclasses.asdict(self)
