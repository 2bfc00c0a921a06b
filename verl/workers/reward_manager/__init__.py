"""Reward managers by name (config key `reward_model.reward_manager`)."""

from __future__ import annotations

from verl.workers.reward_manager.delethink import DelethinkRewardManager
from verl.workers.reward_manager.naive import NaiveRewardManager, RewardResult

REWARD_MANAGERS: dict[str, type[NaiveRewardManager]] = {
    "naive": NaiveRewardManager,
    "delethink": DelethinkRewardManager,
}


def get_reward_manager(name: str) -> type[NaiveRewardManager]:
    if name not in REWARD_MANAGERS:
        raise ValueError(f"unknown reward manager {name!r}; known: {sorted(REWARD_MANAGERS)}")
    return REWARD_MANAGERS[name]


__all__ = [
    "REWARD_MANAGERS",
    "DelethinkRewardManager",
    "NaiveRewardManager",
    "RewardResult",
    "get_reward_manager",
]
