"""LongCoT: one prompt, one long response. The whole thinking stays in context."""

from __future__ import annotations

from typing import TYPE_CHECKING

from verl.agent_loop.base import PPO_ONE_ROW, ROLLOUT, AgentLoop
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem, Trajectory, Turn

if TYPE_CHECKING:
    from verl.config import PolicyIterationConfig


class SingleTurnAgentLoop(AgentLoop):
    async def run(self, item: PromptItem, sampling_params: SamplingParams) -> Trajectory:
        out = await self.engine.generate(item.prompt_ids, sampling_params)
        return Trajectory([Turn(list(item.prompt_ids), out.token_ids, out.log_probs, out.finish_reason)])

    @classmethod
    def config_problems(cls, config: PolicyIterationConfig) -> list[str]:
        turns = config.actor_rollout_ref.rollout.multi_turn.max_assistant_turns
        if config.trainer.name == "ppo" and turns > 1:
            return [
                f"{ROLLOUT}.multi_turn.max_assistant_turns={turns}: {PPO_ONE_ROW} (or the gym loop with "
                "gym.train_on=last: it trains the last turn only)"
            ]
        return []

    @classmethod
    def plan_rows(cls, config: PolicyIterationConfig) -> list[tuple[str, str]]:
        data = config.data
        return [
            ("environment", "LongCoT (one response)"),
            ("context", f"<= {data.max_prompt_length} prompt + {data.max_response_length} new tokens"),
            ("rows per step", str(config.trajectories_per_step)),
        ]
