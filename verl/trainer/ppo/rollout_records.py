"""The JSON rows a run writes about its trajectories: training rollout dumps and validation generations.

One row per trajectory and one per chunk (turn). Chunk rows keep the sampled token ids next to the
decoded text: the rollout viewer (verl.tools.viewer) cuts the trace at token boundaries to show where
each chunk ended and which tokens Delethink carried into the next one, which decoded text alone cannot
locate. keep_head / keep_tail are the carry-over sizes (None outside Delethink).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.config import PolicyIterationConfig
from verl.core.trajectory import PromptItem, Trajectory
from verl.utils.reward_score.boxed import extract_final_answer

Decode = Callable[[list[int]], str]


def carry_sizes(config: PolicyIterationConfig) -> dict[str, int | None]:
    if not config.is_delethink:
        return {"keep_head": None, "keep_tail": None}
    p = config.delethink_params
    return {"keep_head": p.keep_head, "keep_tail": p.keep_tail}


def trajectory_record(
    step: int,
    index: int,
    item: PromptItem,
    traj: Trajectory,
    solution_str: str,
    score: float,
    decode: Decode,
    carry: dict[str, int | None],
) -> dict[str, Any]:
    """`carry`: carry_sizes(config)."""
    return {
        "step": step, "index": index, "data_source": item.data_source, "prompt": decode(item.prompt_ids),
        "response": solution_str, "answer": extract_final_answer(solution_str),
        "ground_truth": item.ground_truth, "score": score, "num_turns": traj.num_turns,
        "thinking_tokens": traj.thinking_tokens, "has_eos": traj.has_eos, **carry,
    }  # fmt: skip


def chunk_records(step: int, index: int, traj: Trajectory, decode: Decode) -> list[dict[str, Any]]:
    return [
        {
            "step": step,
            "index": index,
            "chunk": c,
            "prompt": decode(turn.prompt_ids),
            "response": decode(turn.response_ids),
            "response_ids": list(turn.response_ids),
            "prompt_tokens": len(turn.prompt_ids),
            "response_tokens": len(turn.response_ids),
            "finish_reason": turn.finish_reason,
        }
        for c, turn in enumerate(traj.turns)
    ]
