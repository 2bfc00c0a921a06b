"""What every agent loop implements. What a loop produces, a `Trajectory` of `Turn`s, is defined one floor
down, in verl/core/trajectory.py, because reward managers and the batch builder read it too.

A loop plugs into a run through its class methods alone (`from_config`, `config_problems`, `scorer`,
`plan_rows`, `fits_any_environment`): the workers, the config checks, the trainer and the dry-run plan
call them for whichever loop `actor_rollout_ref.rollout.agent.default_agent_loop` names, so none of
them carries a branch per loop, and a plugin loop gets the same treatment as a built-in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from verl.core.engine import RolloutEngine, SamplingParams
from verl.core.trajectory import PromptItem, Trajectory

if TYPE_CHECKING:
    from verl.config import PolicyIterationConfig
    from verl.workers.reward_manager import RewardResult

    # (trajectories, data_sources, ground_truths, extra_infos) -> one result per trajectory
    RewardManager = Callable[..., list[RewardResult]]


ROLLOUT = "actor_rollout_ref.rollout"
# why trainer.name=ppo refuses a loop that trains more than one turn per trajectory
PPO_ONE_ROW = "trainer.name=ppo trains one row per trajectory; use trainer.name=delethink"


class AgentLoop(ABC):
    """Runs one trajectory against a rollout engine."""

    # whether the loop runs on top of either thinking environment (config/environment/), so that
    # choosing it is not a mix the start-up warnings name
    fits_any_environment: ClassVar[bool] = False

    def __init__(self, engine: RolloutEngine, **kwargs: Any) -> None:
        self.engine = engine

    @classmethod
    def from_config(cls, config: PolicyIterationConfig, engine: RolloutEngine, tokenizer: Any) -> AgentLoop:
        """The loop as the run's config sets it up (in every worker that runs it)."""
        return cls(engine)

    @classmethod
    def config_problems(cls, config: PolicyIterationConfig) -> list[str]:
        """What the rest of the run's config must agree to for this loop, one `key=value: rule` line each
        (each section's own rules are checked before, by the section)."""
        return []

    @classmethod
    def scorer(cls, reward_manager: RewardManager) -> RewardManager:
        """What scores this loop's trajectories: the configured reward manager, unless the loop's
        trajectories earn rewards of their own."""
        return reward_manager

    @classmethod
    def plan_rows(cls, config: PolicyIterationConfig) -> list[tuple[str, str]]:
        """(label, text) lines for the dry-run plan (verl/trainer/plan.py) about this loop."""
        return [("environment", f"agent loop {cls.__name__}")]

    @abstractmethod
    async def run(self, item: PromptItem, sampling_params: SamplingParams) -> Trajectory:
        """One trajectory for the dataset item (its `prompt_ids`, and for envs its row columns).
        `sampling_params.max_new_tokens` is the first turn's budget (data.max_response_length); the
        Delethink loop takes its chunk budgets from its DelethinkParams instead."""
