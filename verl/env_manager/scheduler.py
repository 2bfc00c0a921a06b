"""The episode scheduler: which episode each env manager runs next, and the round's trajectories.

A round (one training step, or one validation pass) has `num_groups` groups of `group_size` env
managers. All members of a group walk the same sequence of episode ids, so they reset with the same
episode seed and see the same data item: one episode of a group is one GRPO group.

Episode ids step by `num_groups` (group g's k-th episode of round r is `(r * E + k) * num_groups`), so
the episode seeds `base_seed + group_id + episode_id` of a training round are the consecutive
integers `base_seed + r * E * G ... base_seed + (r + 1) * E * G - 1`: no two episodes of the run
share a seed, and the sample-mode dataset maps them to distinct rows.

Training rounds stop each member after `episodes_per_group` episodes; validation rounds
(`episodes_per_group=None`) run until the traversal dataset is exhausted, and a member that finds it
so gives its last episode id back with `release`.

This module imports no torch so the scheduler actor stays a light process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def trajectory_id(group_id: int, episode_id: int, episode_seed: int) -> str:
    return f"{group_id}_{episode_id}_{episode_seed}"


@dataclass
class EpisodeRecord:
    group_id: int
    episode_id: int
    member: int  # index of the env manager within its group
    trajectory_id: str
    item_index: int  # row of the dataset the episode was reset with
    trajectory: Any


class EpisodeScheduler:
    def __init__(self) -> None:
        self._layout: tuple[int, int, int | None, int] | None = None  # groups, size, episodes, round

    def begin_round(
        self, num_groups: int, group_size: int, episodes_per_group: int | None, round_index: int = 0
    ) -> None:
        if num_groups < 1 or group_size < 1:
            raise ValueError(f"num_groups={num_groups}, group_size={group_size}; both must be >= 1")
        if episodes_per_group is not None and episodes_per_group < 1:
            raise ValueError(f"episodes_per_group={episodes_per_group}; it must be >= 1, or None")
        if round_index < 0:
            raise ValueError(f"round_index={round_index}; it must be >= 0")
        self._layout = (num_groups, group_size, episodes_per_group, round_index)
        self._calls = {(g, m): 0 for g in range(num_groups) for m in range(group_size)}
        self._open: dict[tuple[int, int], set[int]] = {key: set() for key in self._calls}
        self._records: dict[tuple[int, int, int], EpisodeRecord] = {}
        self._released: set[tuple[int, int, int]] = set()

    def _check_member(self, group_id: int, member: int) -> None:
        if self._layout is None:
            raise RuntimeError("no round in progress: call begin_round first")
        if (group_id, member) not in self._calls:
            num_groups, group_size = self._layout[:2]
            raise ValueError(
                f"group_id={group_id}, member={member} is not in this round "
                f"({num_groups} groups of {group_size})"
            )

    def get_episode_id(self, group_id: int, member: int) -> int | None:
        """The member's next episode id, or None when its share of the round is done."""
        self._check_member(group_id, member)
        num_groups, _, episodes_per_group, round_index = self._layout
        k = self._calls[(group_id, member)]
        if episodes_per_group is not None and k >= episodes_per_group:
            return None
        self._calls[(group_id, member)] = k + 1
        episode_id = ((round_index * episodes_per_group if episodes_per_group else 0) + k) * num_groups
        self._open[(group_id, member)].add(episode_id)
        return episode_id

    def _close(self, group_id: int, member: int, episode_id: int, what: str) -> None:
        self._check_member(group_id, member)
        if episode_id not in self._open[(group_id, member)]:
            done = (group_id, member, episode_id) in self._records or (
                (group_id, member, episode_id) in self._released
            )
            raise ValueError(
                f"{what}: group {group_id} member {member} episode {episode_id} "
                + ("already has its trajectory (exactly one per episode)" if done else "was never handed out")
            )
        self._open[(group_id, member)].discard(episode_id)

    def put(
        self,
        group_id: int,
        member: int,
        episode_id: int,
        traj_id: str,
        item_index: int,
        trajectory: Any,
    ) -> None:
        self._close(group_id, member, episode_id, "put")
        self._records[(group_id, member, episode_id)] = EpisodeRecord(
            group_id, episode_id, member, traj_id, item_index, trajectory
        )

    def release(self, group_id: int, member: int, episode_id: int) -> None:
        """The dataset had no item left for this episode: it ends without a trajectory."""
        self._close(group_id, member, episode_id, "release")
        self._released.add((group_id, member, episode_id))

    def end_round(self) -> list[EpisodeRecord]:
        """Every trajectory of the round, ordered by group, episode, then member.

        Fails if an episode handed out was neither put nor released, or if the members of a group
        did not all finish the same episodes (a GRPO group would be short of samples).
        """
        if self._layout is None:
            raise RuntimeError("no round in progress: call begin_round first")
        missing = [(g, m, e) for (g, m), open_ids in self._open.items() for e in sorted(open_ids)]
        if missing:
            raise RuntimeError(
                f"round ended with {len(missing)} episodes handed out but never put or released, "
                f"e.g. (group, member, episode) {missing[:3]}"
            )
        group_size = self._layout[1]
        members: dict[tuple[int, int], int] = {}
        for g, _, e in self._records:
            members[(g, e)] = members.get((g, e), 0) + 1
        short = {ge: n for ge, n in members.items() if n != group_size}
        if short:
            raise RuntimeError(
                f"episodes with fewer than {group_size} member trajectories (group, episode): count "
                f"{dict(list(short.items())[:3])}"
            )
        records = sorted(self._records.values(), key=lambda r: (r.group_id, r.episode_id, r.member))
        self._layout = None
        return records
