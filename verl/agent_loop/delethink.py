"""Delethink: think in chunks; between chunks the context is reset to question + carry-over.

Chunk 1 may write C tokens (`params.chunk_size`). Every later chunk sees only
`question + carry-over(all thinking so far)` (the first keep_head and last keep_tail thinking tokens)
and may add `params.intermediate_budget` tokens. The loop ends at EOS or after `params.max_chunks`
chunks, so context per chunk is bounded and total compute is linear in the thinking length.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from verl.agent_loop.base import PPO_ONE_ROW, ROLLOUT, AgentLoop
from verl.core.delethink import DelethinkParams, delethink_param_problems
from verl.core.engine import RolloutEngine, SamplingParams
from verl.core.trajectory import PromptItem, Trajectory, Turn
from verl.utils.seeding import chunk_seed

if TYPE_CHECKING:
    from verl.config import PolicyIterationConfig

DELETHINK = "algorithm.delethink"


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

    @classmethod
    def from_config(cls, config: PolicyIterationConfig, engine: RolloutEngine, tokenizer: Any) -> AgentLoop:
        return cls(engine, config.delethink_params)

    @classmethod
    def config_problems(cls, config: PolicyIterationConfig) -> list[str]:
        c = config
        problems = []
        if c.trainer.name == "ppo":
            problems.append(f"{ROLLOUT}.agent.default_agent_loop='delethink': {PPO_ONE_ROW}")
        if c.reward_model.reward_manager == "naive":
            problems.append(
                "reward_model.reward_manager='naive': scores only the last chunk of a Delethink trajectory; "
                "use reward_model.reward_manager=delethink (all chunks joined, as environment=delethink sets)"
            )
        chunk = c.algorithm.delethink.chunk_size
        if c.data.max_response_length != chunk:
            problems.append(
                f"data.max_response_length={c.data.max_response_length}: must equal {DELETHINK}.chunk_size="
                f"{chunk}: with the delethink loop C is set there alone (environment=delethink links the "
                "two; leave data.max_response_length unset)"
            )
        turns = c.actor_rollout_ref.rollout.multi_turn.max_assistant_turns
        if turns != 1:
            problems.append(
                f"{ROLLOUT}.multi_turn.max_assistant_turns={turns}: is the gym loop's turn limit and the "
                f"delethink loop does not read it; set I with {DELETHINK}.max_chunks"
            )
        # only when algorithm.delethink is valid (its own problems are reported by its section)
        if not delethink_param_problems(**dataclasses.asdict(c.algorithm.delethink)):
            carry, prompt = c.delethink_params.carry, c.data.max_prompt_length
            if prompt <= carry:
                problems.append(
                    f"data.max_prompt_length={prompt}: must be > {DELETHINK}.keep_head + keep_tail = "
                    f"{carry}: a chunk's prompt is the question plus the carry-over, so the question needs "
                    "room too"
                )
        return problems

    @classmethod
    def plan_rows(cls, config: PolicyIterationConfig) -> list[tuple[str, str]]:
        p, data = config.delethink_params, config.data
        trajectories = config.trajectories_per_step
        return [
            ("environment", "Delethink (Markovian thinking)"),
            ("chunk budget", f"first C = {p.chunk_size}, later {p.intermediate_budget}, "
                             f"up to I = {p.max_chunks} chunks"),
            ("carry-over", f"m = keep_head {p.keep_head} + keep_tail {p.keep_tail} = {p.carry} "
                           f"({p.trimmer} trimmer)"),
            ("context", f"<= {data.max_prompt_length} prompt + {p.chunk_size} new per chunk"),
            ("rows per step", f"{trajectories} to {trajectories * p.max_chunks} (one per chunk)"),
        ]  # fmt: skip
