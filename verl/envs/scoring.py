"""How the gym loop's episodes are scored (`GymAgentLoop.scorer` wraps the configured reward manager).

An episode's score is its env's reward, the sum of its step rewards (`info["env_reward"]`). A custom
reward function (`custom_reward_function`) adds its score when the row has a ground truth; the built-in
dispatch does not, since the built-in envs already judge the answer with it. A trajectory without env
results is scored by the reward manager alone.
"""

from __future__ import annotations

from verl.core.trajectory import Trajectory
from verl.envs.report import is_episode
from verl.workers.reward_manager import NaiveRewardManager, RewardResult


class EpisodeScorer:
    def __init__(self, reward_manager: NaiveRewardManager) -> None:
        self.reward_manager = reward_manager

    def __call__(
        self,
        trajectories: list[Trajectory],
        data_sources: list[str],
        ground_truths: list[str],
        extra_infos: list[dict] | None = None,
    ) -> list[RewardResult]:
        manager = self.reward_manager
        infos = manager.checked_infos(trajectories, data_sources, ground_truths, extra_infos)
        solution_strs = manager.decode(trajectories)
        judged = [
            i
            for i, t in enumerate(trajectories)
            if not is_episode(t) or (manager.custom and str(ground_truths[i]).strip())
        ]
        function_scores = manager.function_scores(judged, data_sources, solution_strs, ground_truths, infos)
        scores = [float(t.info.get("env_reward", 0.0)) for t in trajectories]
        for i, score in zip(judged, function_scores, strict=True):
            scores[i] += score
        return [RewardResult(score, text) for score, text in zip(scores, solution_strs, strict=True)]
