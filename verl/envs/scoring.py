"""How the gym loop's episodes are scored (`GymAgentLoop.scorer` wraps the configured reward manager).

An episode's score is its env's reward, the sum of its step rewards (`info["env_reward"]`). A custom
reward function (`custom_reward_function`) adds its score when the row has a ground truth; the built-in
dispatch does not, since the built-in envs already judge the answer with it. A trajectory without env
results is scored by the reward manager alone.
"""

from __future__ import annotations

from typing import Any

from verl.core.trajectory import Trajectory
from verl.envs.report import is_episode
from verl.workers.reward_manager import NaiveRewardManager, RewardResult


class EpisodeScorer:
    def __init__(self, reward_manager: NaiveRewardManager) -> None:
        self.reward_manager = reward_manager

    def judged(self, trajectory: Trajectory, ground_truth: str) -> bool:
        """Whether the reward function scores this trajectory (see the module's docstring)."""
        has_truth = bool(str(ground_truth).strip())
        return not is_episode(trajectory) or (self.reward_manager.custom and has_truth)

    def __call__(self, trajectories: list[Trajectory], *columns: list[Any]) -> list[RewardResult]:
        """The reward manager's results for the same arguments (data sources, ground truths and
        optionally extra infos, one per trajectory), each with its env reward added."""
        results = self.reward_manager(trajectories, *columns, judged=self.judged)
        return [
            RewardResult(float(t.info.get("env_reward", 0.0)) + result.score, result.solution_str)
            for t, result in zip(trajectories, results, strict=True)
        ]
