"""Delethink: think in chunks; between chunks the context is reset to question + carry-over.

Chunk 1 may write C tokens (`params.chunk_size`). Every later chunk sees only
`question + carry-over(all thinking so far)` (the first keep_head and last keep_tail thinking tokens)
and may add `params.intermediate_budget` tokens. The loop ends at EOS or after `params.max_chunks`
chunks, so context per chunk is bounded and total compute is linear in the thinking length.
"""

from __future__ import annotations

from dataclasses import replace

from verl.agent_loop.base import AgentLoop, Trajectory, Turn, register_agent_loop
from verl.agent_loop.delethink_params import DelethinkParams
from verl.data.rl_dataset import PromptItem
from verl.utils.seeding import derive_seed
from verl.workers.rollout.base import RolloutEngine, SamplingParams


def chunk_seed(seed: int | None, chunk_index: int) -> int | None:
    """Chunk 0 keeps the trajectory's seed (so one chunk samples exactly like LongCoT); later chunks
    get independent seeds derived from it."""
    if seed is None or chunk_index == 0:
        return seed
    return derive_seed(seed, chunk_index)


@register_agent_loop("delethink")
class DelethinkAgentLoop(AgentLoop):
    def __init__(self, engine: RolloutEngine, params: DelethinkParams) -> None:
        super().__init__(engine)
        self.params = params

    async def run(self, item: PromptItem, sampling_params: SamplingParams) -> Trajectory:
        """Every chunk budget comes from `params` (C lives there alone); `sampling_params` gives the
        sampling settings and the trajectory's seed."""
        p = self.params
        prompt_ids = item.prompt_ids
        turns: list[Turn] = []
        thinking: list[int] = []
        chunk_prompt = list(prompt_ids)
        budget = p.chunk_size
        for chunk in range(p.max_chunks):
            params = replace(
                sampling_params, max_new_tokens=budget, seed=chunk_seed(sampling_params.seed, chunk)
            )
            out = await self.engine.generate(chunk_prompt, params)
            turns.append(Turn(chunk_prompt, out.token_ids, out.log_probs, out.finish_reason))
            thinking.extend(out.token_ids)
            if out.finish_reason == "stop":
                break
            chunk_prompt = list(prompt_ids) + p.carry_over(thinking)
            budget = p.intermediate_budget
        return Trajectory(turns)
