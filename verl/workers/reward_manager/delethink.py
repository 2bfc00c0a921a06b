"""Delethink scoring: the answer is judged on the whole trace, every chunk's response decoded as one."""

from __future__ import annotations

from verl.core.trajectory import Trajectory
from verl.workers.reward_manager.naive import NaiveRewardManager


class DelethinkRewardManager(NaiveRewardManager):
    # The final answer can straddle a chunk boundary ("\box" | "ed{42}"), and so can a multi-byte
    # character split between two byte-level tokens: decoding the concatenated ids once, rather than
    # joining per-turn strings, reads both exactly as the model wrote them.
    def scored_ids(self, trajectory: Trajectory) -> list[int]:
        return trajectory.response_ids
