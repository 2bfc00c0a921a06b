"""Runs many agent loops concurrently against one engine, so the engine can batch their requests."""

from __future__ import annotations

import asyncio

from verl.agent_loop.base import AGENT_LOOPS, AgentLoop, Trajectory
from verl.data.rl_dataset import PromptItem
from verl.trainer.config_schema import PolicyIterationConfig
from verl.workers.rollout.base import RolloutEngine, SamplingParams


def build_agent_loop(config: PolicyIterationConfig, engine: RolloutEngine, tokenizer) -> AgentLoop:
    import verl.agent_loop  # noqa: F401  (registers the built-in loops)

    rollout = config.actor_rollout_ref.rollout
    name = rollout.agent.default_agent_loop
    if name == "gym":
        gym = rollout.gym
        return AGENT_LOOPS[name](
            engine,
            tokenizer=tokenizer,
            max_turns=rollout.multi_turn.max_assistant_turns,
            env_config=gym.env_config,
            ctx_config=gym.ctx_config,
            train_on=gym.train_on,
            step_timeout_s=gym.step_timeout_s,
            max_prompt_tokens=gym.max_prompt_tokens,
        )
    if name == "delethink":
        return AGENT_LOOPS[name](engine, config.delethink_params)
    return AGENT_LOOPS[name](engine)


async def run_agent_loops(
    loop: AgentLoop, items: list[PromptItem], sampling_params: list[SamplingParams]
) -> list[Trajectory]:
    """One trajectory per dataset item, in order. All loops start together so their first requests
    share a batch; later requests (Delethink's next chunks, gym turns) batch with whatever else is waiting."""
    if len(items) != len(sampling_params):
        raise ValueError(f"{len(items)} items but {len(sampling_params)} sampling params")
    return list(
        await asyncio.gather(*(loop.run(it, sp) for it, sp in zip(items, sampling_params, strict=True)))
    )
