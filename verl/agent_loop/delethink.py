"""Delethink: think in chunks; between chunks the context is reset to question + carry-over.

Chunk 1 may use the full budget C (`sampling_params.max_new_tokens`). Every later chunk sees only
`question + trimmer(all thinking so far)` (the first keep_head and last keep_tail thinking tokens) and
may add `intermediate_max_new_tokens`. The loop ends at EOS or after `max_chunks` chunks, so context
per chunk is bounded and total compute is linear in the thinking length.
"""

from __future__ import annotations

from dataclasses import replace

from verl.agent_loop.base import AgentLoop, Trajectory, Turn, register_agent_loop
from verl.agent_loop.trimmers import get_trimmer
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
    def __init__(
        self,
        engine: RolloutEngine,
        *,
        keep_head: int,
        keep_tail: int,
        intermediate_max_new_tokens: int,
        max_chunks: int,
        trimmer_name: str = "progressive",
    ) -> None:
        super().__init__(engine)
        self.keep_head = keep_head
        self.keep_tail = keep_tail
        self.intermediate_max_new_tokens = intermediate_max_new_tokens
        self.max_chunks = max_chunks
        self.trim = get_trimmer(trimmer_name)

    async def run(self, item: PromptItem, sampling_params: SamplingParams) -> Trajectory:
        prompt_ids = item.prompt_ids
        turns: list[Turn] = []
        thinking: list[int] = []
        chunk_prompt = list(prompt_ids)
        budget = sampling_params.max_new_tokens
        for chunk in range(self.max_chunks):
            params = replace(
                sampling_params, max_new_tokens=budget, seed=chunk_seed(sampling_params.seed, chunk)
            )
            out = await self.engine.generate(chunk_prompt, params)
            turns.append(Turn(chunk_prompt, out.token_ids, out.log_probs, out.finish_reason))
            thinking.extend(out.token_ids)
            if out.finish_reason == "stop":
                break
            chunk_prompt = list(prompt_ids) + self.trim(thinking, self.keep_head, self.keep_tail)
            budget = self.intermediate_max_new_tokens
        return Trajectory(turns)
