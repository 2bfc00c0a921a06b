"""Runs many agent loops concurrently against one engine, so the engine can batch their requests."""

from __future__ import annotations

import asyncio

from verl.agent_loop import agent_loop_class
from verl.agent_loop.base import AgentLoop
from verl.config import PolicyIterationConfig
from verl.core.engine import RolloutEngine, SamplingParams
from verl.core.trajectory import PromptItem, Trajectory


def build_agent_loop(config: PolicyIterationConfig, engine: RolloutEngine, tokenizer) -> AgentLoop:
    """The run's agent loop (`rollout.agent.default_agent_loop`), set up by its own `from_config`."""
    return agent_loop_class(config).from_config(config, engine, tokenizer)


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
