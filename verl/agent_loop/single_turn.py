"""LongCoT: one prompt, one long response. The whole thinking stays in context."""

from __future__ import annotations

from verl.agent_loop.base import AgentLoop, Trajectory, Turn, register_agent_loop
from verl.data.rl_dataset import PromptItem
from verl.workers.rollout.base import SamplingParams


@register_agent_loop("single_turn")
class SingleTurnAgentLoop(AgentLoop):
    async def run(self, item: PromptItem, sampling_params: SamplingParams) -> Trajectory:
        out = await self.engine.generate(item.prompt_ids, sampling_params)
        return Trajectory([Turn(list(item.prompt_ids), out.token_ids, out.log_probs, out.finish_reason)])
