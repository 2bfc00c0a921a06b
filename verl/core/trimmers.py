"""What Delethink carries from one chunk to the next.

At a chunk boundary the environment drops the thinking from the context and re-prompts with the
question plus a short carry-over built by a trimmer from ALL thinking so far. The policy must learn to
write its progress into that carry-over: that is what makes its thinking Markovian.
"""

from __future__ import annotations

from collections.abc import Callable

from verl.utils.registry import registrar

Trimmer = Callable[[list[int], int, int], list[int]]


def progressive_trim(thinking_ids: list[int], keep_head: int, keep_tail: int) -> list[int]:
    """The first keep_head and the last keep_tail tokens of all thinking so far.

    The head stays the opening of the whole trace across every boundary (it usually restates the
    task and the plan); the tail is the most recent progress. Thinking no longer than
    keep_head + keep_tail is kept whole.
    """
    if keep_head < 0:
        raise ValueError(f"keep_head must be >= 0, got {keep_head}")
    if keep_tail < 1:
        raise ValueError(f"keep_tail must be >= 1 (the carry-over needs recent thinking), got {keep_tail}")
    if len(thinking_ids) <= keep_head + keep_tail:
        return list(thinking_ids)
    return thinking_ids[:keep_head] + thinking_ids[-keep_tail:]


TRIMMERS: dict[str, Trimmer] = {"progressive": progressive_trim}  # plugins add theirs with register_trimmer

register_trimmer = registrar(TRIMMERS, "trimmer")


def get_trimmer(name: str) -> Trimmer:
    if name not in TRIMMERS:
        raise ValueError(f"unknown trimmer {name!r}; registered trimmers: {sorted(TRIMMERS)}")
    return TRIMMERS[name]
