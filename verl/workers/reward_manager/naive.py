"""Scoring trajectories: decode the response tokens, then apply the reward function to the text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl.agent_loop.base import Trajectory
from verl.utils.reward_score import default_compute_score, default_compute_scores


@dataclass
class RewardResult:
    score: float
    solution_str: str  # the decoded text that was scored


class NaiveRewardManager:
    """Scores the last turn's response: the whole answer of a single-turn (LongCoT) loop."""

    def __init__(self, tokenizer: Any, compute_score: Callable[..., float] = default_compute_score) -> None:
        self.tokenizer = tokenizer
        self.compute_score = compute_score

    def scored_ids(self, trajectory: Trajectory) -> list[int]:
        return trajectory.turns[-1].response_ids

    def __call__(
        self,
        trajectories: list[Trajectory],
        data_sources: list[str],
        ground_truths: list[str],
        extra_infos: list[dict] | None = None,
    ) -> list[RewardResult]:
        n = len(trajectories)
        if (
            len(data_sources) != n
            or len(ground_truths) != n
            or (extra_infos is not None and len(extra_infos) != n)
        ):
            raise ValueError(
                f"{n} trajectories but {len(data_sources)} data sources, {len(ground_truths)} ground truths"
                + ("" if extra_infos is None else f" and {len(extra_infos)} extra infos")
            )
        solution_strs = self.tokenizer.batch_decode(
            [self.scored_ids(t) for t in trajectories], skip_special_tokens=True
        )
        infos = extra_infos if extra_infos is not None else [None] * n
        # A gym episode (info["env_reward"]) is scored by its env: the sum of its step rewards. A custom
        # reward function adds its score when the row has a ground truth; the default dispatch does not
        # (the built-in envs already judge the answer with it).
        custom = self.compute_score is not default_compute_score
        judged = [
            i
            for i, t in enumerate(trajectories)
            if "env_reward" not in t.info or (custom and str(ground_truths[i]).strip())
        ]
        if self.compute_score is default_compute_score:
            function_scores = default_compute_scores(
                [data_sources[i] for i in judged], [solution_strs[i] for i in judged],
                [ground_truths[i] for i in judged], [infos[i] for i in judged],
            )  # fmt: skip
        else:
            function_scores = [
                self._checked_score(i, data_sources[i], solution_strs[i], ground_truths[i], infos[i])
                for i in judged
            ]
        scores = [float(t.info.get("env_reward", 0.0)) for t in trajectories]
        for i, score in zip(judged, function_scores, strict=True):
            scores[i] += score
        return [RewardResult(score, text) for score, text in zip(scores, solution_strs, strict=True)]

    def _checked_score(
        self, i: int, data_source: str, solution_str: str, ground_truth: str, info: Any
    ) -> float:
        score = self.compute_score(
            data_source=data_source, solution_str=solution_str, ground_truth=ground_truth, extra_info=info
        )
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise ValueError(
                f"custom_reward_function returned {score!r} ({type(score).__name__}) for item {i} "
                f"(data_source={data_source!r}); it must return a float"
            )
        return float(score)
