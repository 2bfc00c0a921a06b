"""Which trajectories a step trains on: dynamic sampling and the no-EOS filter (both off by default).

Dynamic sampling (`algorithm.filter_groups`): a group whose samples all scored the same has advantage
0 everywhere, so it adds nothing to the gradient but still dilutes the per-trajectory mean. Such groups
are dropped and more prompts are generated until the batch is full again or the step has generated
`max_num_gen_batches` batches.

The no-EOS filter (`algorithm.filter_overlong_trajectories`): a trajectory that ran out of budget was
cut, not finished; its score says nothing about the answer it would have given. Advantages are still
computed over the whole group (the cut trajectory stays in the baseline); only its rows are not trained.
"""

from __future__ import annotations

from collections.abc import Sequence


def informative_groups(scores: Sequence[float], group_size: int) -> list[int]:
    """Indices of the groups (consecutive runs of `group_size` scores) whose scores are not all equal."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if len(scores) % group_size:
        raise ValueError(f"{len(scores)} scores do not split into groups of {group_size}")
    groups = [scores[i : i + group_size] for i in range(0, len(scores), group_size)]
    return [g for g, group in enumerate(groups) if min(group) != max(group)]


def group_members(groups: Sequence[int], group_size: int) -> list[int]:
    """Trajectory indices of the given groups, in order."""
    return [g * group_size + k for g in groups for k in range(group_size)]


def finished_trajectories(has_eos: Sequence[bool]) -> list[int]:
    """Indices of the trajectories that ended with EOS."""
    return [i for i, eos in enumerate(has_eos) if eos]
