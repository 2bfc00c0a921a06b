"""Scoring trajectories: decode the response tokens, then apply the reward function to the text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl.core.trajectory import Trajectory
from verl.utils.reward_score import default_compute_score, default_compute_scores
from verl.utils.reward_score.boxed import THINK_END


@dataclass
class RewardResult:
    score: float
    solution_str: str  # the decoded text that was scored


class NaiveRewardManager:
    """Scores the last turn's response: the whole answer of a single-turn (LongCoT) loop."""

    def __init__(
        self,
        tokenizer: Any,
        compute_score: Callable[..., float] = default_compute_score,
        thinking_tags: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.compute_score = compute_score
        # A model without thinking tags (reward_model.thinking_tags=false) ends its thinking where it
        # ends its response: an ended trace is scored as if `</think>` preceded it, so the reward's
        # gate (no answer before the thinking is closed, verl/utils/reward_score/boxed.py) still scores a
        # trace cut at its budget 0, and reads a finished one whole.
        self.thinking_tags = thinking_tags

    def scored_ids(self, trajectory: Trajectory) -> list[int]:
        return trajectory.turns[-1].response_ids

    def __call__(
        self,
        trajectories: list[Trajectory],
        data_sources: list[str],
        ground_truths: list[str],
        extra_infos: list[dict] | None = None,
        judged: Callable[[Trajectory, str], bool] | None = None,
    ) -> list[RewardResult]:
        """Each trajectory's decoded text and the reward function's score of it. `judged(trajectory,
        ground_truth)` picks the items the function scores; the others score 0 (the scorer that wraps
        this one for env episodes adds their env rewards, verl/envs/scoring.py). All by default."""
        infos = self.checked_infos(trajectories, data_sources, ground_truths, extra_infos)
        solution_strs = self.decode(trajectories)
        scored_strs = solution_strs if self.thinking_tags else [
            THINK_END + text if t.turns[-1].finish_reason == "stop" else text
            for t, text in zip(trajectories, solution_strs, strict=True)
        ]  # fmt: skip
        pairs = enumerate(zip(trajectories, ground_truths, strict=True))
        indices = [i for i, (t, truth) in pairs if judged is None or judged(t, truth)]
        scores = [0.0] * len(trajectories)
        function_scores = self.function_scores(indices, data_sources, scored_strs, ground_truths, infos)
        for i, score in zip(indices, function_scores, strict=True):
            scores[i] = score
        return [RewardResult(score, text) for score, text in zip(scores, solution_strs, strict=True)]

    def checked_infos(
        self,
        trajectories: list[Trajectory],
        data_sources: list[str],
        ground_truths: list[str],
        extra_infos: list[dict] | None,
    ) -> list[dict | None]:
        """The extra infos (None each if not given), once every list has one entry per trajectory."""
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
        return list(extra_infos) if extra_infos is not None else [None] * n

    def decode(self, trajectories: list[Trajectory]) -> list[str]:
        """The text each trajectory is scored on."""
        return self.tokenizer.batch_decode(
            [self.scored_ids(t) for t in trajectories], skip_special_tokens=True
        )

    @property
    def custom(self) -> bool:
        """Whether the reward function is the user's (custom_reward_function), not the built-in dispatch."""
        return self.compute_score is not default_compute_score

    def function_scores(
        self,
        indices: list[int],
        data_sources: list[str],
        solution_strs: list[str],
        ground_truths: list[str],
        infos: list[dict | None],
    ) -> list[float]:
        """The reward function's score of each item in `indices` (positions in the other lists)."""
        if not self.custom:
            return default_compute_scores(
                [data_sources[i] for i in indices], [solution_strs[i] for i in indices],
                [ground_truths[i] for i in indices], [infos[i] for i in indices],
            )  # fmt: skip
        return [
            self._checked_score(i, data_sources[i], solution_strs[i], ground_truths[i], infos[i])
            for i in indices
        ]

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
