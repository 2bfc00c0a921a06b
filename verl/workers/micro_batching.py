"""Which rows go together: micro-batches under a token budget, and token-balanced shares for ranks.

Pure functions over per-row token counts (prompt + response, padding excluded). They return lists of
row indices, ascending within each group, so every partition can be checked by hand.

Balancing is greedy largest-first: rows are taken heaviest first and each joins the group with the
smallest token sum so far (ties: fewer rows, then the lower group number). For k groups its largest
sum is at most 4/3 of the best possible, and it is easy to follow.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence


def _check_counts(token_counts: Sequence[int]) -> None:
    negative = [i for i, c in enumerate(token_counts) if c < 0]
    if negative:
        raise ValueError(f"token counts must be >= 0; rows {negative} are negative")


def consecutive_groups(
    order: Sequence[int],
    token_counts: Sequence[int],
    *,
    max_rows: int | None = None,
    max_tokens: int | None = None,
) -> list[list[int]]:
    """Rows cut into groups in the given `order`: a group ends before it would hold more than `max_rows`
    rows or `max_tokens` tokens (a row over the token budget is a group of its own); indices ascending
    within a group."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"rows per micro-batch must be >= 1, got {max_rows}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"the token budget must be >= 1, got {max_tokens}")
    _check_counts(token_counts)
    groups: list[list[int]] = []
    tokens = 0
    for i in order:
        full = groups and (
            (max_rows is not None and len(groups[-1]) == max_rows)
            or (max_tokens is not None and tokens + token_counts[i] > max_tokens)
        )
        if not groups or full:
            groups.append([])
            tokens = 0
        groups[-1].append(i)
        tokens += token_counts[i]
    return [sorted(g) for g in groups]


def length_sorted_groups(token_counts: Sequence[int], rows_per_group: int) -> list[list[int]]:
    """Rows cut into groups of `rows_per_group` in order of length (ties by row), so a padded
    micro-batch holds rows of similar length and pads little; indices ascending within a group."""
    order = sorted(range(len(token_counts)), key=lambda i: (token_counts[i], i))
    return consecutive_groups(order, token_counts, max_rows=rows_per_group)


def prompt_sorted_groups(
    prompts: Sequence[Sequence[int]],
    token_counts: Sequence[int],
    *,
    max_rows: int | None = None,
    max_tokens: int | None = None,
) -> list[list[int]]:
    """Rows cut into groups in order of their prompt ids (ties by row), so rows that share a prompt
    prefix (a GRPO group, a Delethink trajectory's chunks) land in the same micro-batch, where
    `model.share_prompt_prefix` computes the prefix once."""
    order = sorted(range(len(prompts)), key=lambda i: (list(prompts[i]), i))
    return consecutive_groups(order, token_counts, max_rows=max_rows, max_tokens=max_tokens)


def balanced_partition(token_counts: Sequence[int], num_groups: int) -> list[list[int]]:
    """Split rows into `num_groups` groups with near-equal token sums (greedy largest-first).

    With fewer rows than groups the trailing groups are empty; otherwise every group gets a row.
    """
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    _check_counts(token_counts)
    groups: list[list[int]] = [[] for _ in range(num_groups)]
    # (token sum, rows, group number): the heap top is the group the next row joins
    heap = [(0, 0, g) for g in range(num_groups)]
    for row in sorted(range(len(token_counts)), key=lambda i: (-token_counts[i], i)):
        total, size, g = heapq.heappop(heap)
        groups[g].append(row)
        heapq.heappush(heap, (total + token_counts[row], size + 1, g))
    return [sorted(g) for g in groups]


def group_tokens(token_counts: Sequence[int], group: Sequence[int]) -> int:
    return sum(token_counts[i] for i in group)


def partition_by_token_budget(token_counts: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Balanced micro-batches, as few as greedy balancing manages: k = ceil(total / max_tokens) groups,
    then k + 1, ... until every micro-batch of two or more rows holds at most `max_tokens` tokens.

    A row longer than the budget cannot be split, so it becomes a micro-batch of its own.
    """
    if max_tokens < 1:
        raise ValueError(f"the token budget must be >= 1, got {max_tokens}")
    _check_counts(token_counts)
    n = len(token_counts)
    if n == 0:
        return []
    k = max(1, math.ceil(sum(token_counts) / max_tokens))
    while True:
        # with k == n every row is alone, so the loop ends there at the latest
        groups = balanced_partition(token_counts, min(k, n))
        if all(len(g) == 1 or group_tokens(token_counts, g) <= max_tokens for g in groups):
            return groups
        k += 1


def split_to_count(token_counts: Sequence[int], groups: list[list[int]], count: int) -> list[list[int]]:
    """Exactly `count` micro-batches, so that every rank runs the same number of forward passes.

    Splits the micro-batch with the most tokens (of those with two or more rows) into two balanced
    halves until there are `count`; splitting never breaks a token budget or a row-count limit. When
    every micro-batch is a single row and more are needed, empty groups are appended: the caller runs
    a zero-weight pass for each.
    """
    if count < len(groups):
        raise ValueError(f"cannot make {len(groups)} micro-batches into fewer ({count})")
    groups = [list(g) for g in groups]
    while len(groups) < count:
        splittable = [j for j, g in enumerate(groups) if len(g) > 1]
        if not splittable:
            return groups + [[] for _ in range(count - len(groups))]
        j = max(splittable, key=lambda j: (group_tokens(token_counts, groups[j]), -j))
        rows = groups[j]
        halves = balanced_partition([token_counts[i] for i in rows], 2)
        groups[j : j + 1] = [[rows[i] for i in half] for half in halves]
    return groups


def balance_rows_across_ranks(token_counts: Sequence[int], world_size: int) -> list[list[int]]:
    """Each rank's rows of one mini-batch, token sums balanced; row counts may differ between ranks."""
    if len(token_counts) < world_size:
        raise ValueError(f"{len(token_counts)} rows cannot give each of {world_size} ranks a row")
    return balanced_partition(token_counts, world_size)


def balanced_update_shards(
    token_counts: Sequence[int], num_mini_batches: int, world_size: int
) -> list[tuple[list[int], list[int]]]:
    """For each rank: (row indices into the batch, mini-batch number of each row) for `update_policy`.

    Mini-batch m is rows [m * R, (m + 1) * R) of the batch, R = rows / num_mini_batches; its rows are
    spread over the ranks by token count. The rank's batch is those rows in mini-batch order, and the
    mini-batch numbers go to the actor as `batch["mini_batch_index"]` (row counts per rank differ).
    """
    n = len(token_counts)
    if num_mini_batches < 1 or n % num_mini_batches:
        raise ValueError(f"{n} rows do not split into {num_mini_batches} mini-batches")
    rows_per_mini = n // num_mini_batches
    shards: list[tuple[list[int], list[int]]] = [([], []) for _ in range(world_size)]
    for m in range(num_mini_batches):
        start = m * rows_per_mini
        mini_counts = token_counts[start : start + rows_per_mini]
        for (rows, mini_index), share in zip(
            shards, balance_rows_across_ranks(mini_counts, world_size), strict=True
        ):
            rows.extend(start + i for i in share)
            mini_index.extend([m] * len(share))
    return shards
