"""`reward_model.*` and `custom_reward_function.*`: how a trajectory is scored."""

from __future__ import annotations

from dataclasses import dataclass

from verl.config.rules import broken, not_empty


@dataclass
class RewardModelConfig:
    # set by the environment; naive scores the last turn | delethink all chunks joined
    reward_manager: str = "naive"
    # math-verify processes scoring at once, per driver / rollout worker; null: CPUs + 4 (max 32)
    scoring_processes: int | None = None
    # the model closes its thinking with </think> and answers after it; false: a model without thinking
    # tags, whose whole response is its answer once it ends with EOS
    thinking_tags: bool = True

    def problems(self, key: str) -> list[str]:
        # the reward manager's name is the registry's (verl/trainer/config_loader.py)
        return broken(self, key, [
            ("scoring_processes", lambda v: v is None or v >= 1,
             "must be null (one per CPU plus 4, at most 32) or >= 1"),
        ])  # fmt: skip


@dataclass
class CustomRewardFunctionConfig:
    path: str | None = None  # a .py file defining `name`; null: built-in dispatch by data_source
    # function in that file: (data_source, solution_str, ground_truth, extra_info)
    name: str = "compute_score"

    def problems(self, key: str) -> list[str]:
        return broken(self, key, not_empty("name"))
