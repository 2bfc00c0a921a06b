"""Grouping rows: greedy balancing, token-budget micro-batches, splitting to a count, rank shards.

Expected partitions are worked out by hand from the rule: rows heaviest first (ties: lower row), each
joining the group with the smallest token sum (ties: fewer rows, then lower group).
"""

import random

import pytest

from verl.workers.micro_batching import (
    balance_rows_across_ranks,
    balanced_partition,
    balanced_update_shards,
    length_sorted_groups,
    partition_by_token_budget,
    split_to_count,
)


def test_balanced_partition_by_hand():
    # 5 -> g0, 4 -> g1, 3 -> g1 (4 < 5), 2 -> g0 (5 < 7), 1 -> g0 (7 = 7, same rows, lower group)
    assert balanced_partition([5, 1, 4, 2, 3], 2) == [[0, 1, 3], [2, 4]]
    assert balanced_partition([1, 1, 1], 2) == [[0, 2], [1]]
    assert balanced_partition([3, 2], 3) == [[0], [1], []]  # fewer rows than groups: trailing empty
    assert balanced_partition([0, 0, 0], 3) == [[0], [1], [2]]  # empty rows still spread out
    with pytest.raises(ValueError, match="num_groups must be >= 1"):
        balanced_partition([1], 0)
    with pytest.raises(ValueError, match=r"rows \[1\] are negative"):
        balanced_partition([1, -2], 1)


def test_token_budget_partition_by_hand():
    counts = [4, 3, 3, 3, 3, 2, 2]  # 20 tokens, budget 10
    # k = 2: {4, 3, 2, 2} = 11 > 10 and {3, 3, 3} = 9; so k = 3:
    # 4 -> A, 3 -> B, 3 -> C, 3 -> B, 3 -> C, 2 -> A, 2 -> A (6, 6, 6 with two rows each: A)
    assert partition_by_token_budget(counts, 10) == [[0, 5, 6], [1, 3], [2, 4]]
    assert partition_by_token_budget(counts, 20) == [[0, 1, 2, 3, 4, 5, 6]]
    # a row over the budget is a micro-batch of its own; the rest share one
    assert partition_by_token_budget([12, 2, 3], 10) == [[0], [1, 2]]
    assert partition_by_token_budget([30, 40], 10) == [[1], [0]]  # the heavier row goes first
    assert partition_by_token_budget([], 10) == []
    with pytest.raises(ValueError, match="token budget must be >= 1"):
        partition_by_token_budget([1], 0)


@pytest.mark.parametrize("seed", range(20))
def test_token_budget_partition_properties(seed):
    rng = random.Random(seed)
    counts = [rng.randint(1, 60) for _ in range(rng.randint(1, 40))]
    budget = rng.randint(20, 120)
    groups = partition_by_token_budget(counts, budget)
    assert sorted(i for g in groups for i in g) == list(range(len(counts)))  # every row exactly once
    for g in groups:
        assert len(g) == 1 or sum(counts[i] for i in g) <= budget
    if max(counts) <= budget:
        assert len(groups) >= -(-sum(counts) // budget)  # never fewer than the tokens need


def test_split_to_count_by_hand():
    counts = [5, 1, 4, 2, 3]
    # split [0..4] -> [0, 1, 3] (8) | [2, 4] (7); then the heavier: [5, 1, 2] -> [5] | [1, 2]
    assert split_to_count(counts, [[0, 1, 2, 3, 4]], 3) == [[0], [1, 3], [2, 4]]
    assert split_to_count(counts, [[0, 1], [2]], 2) == [[0, 1], [2]]
    # only single rows left: the missing passes are empty (zero-weight) groups
    assert split_to_count([5, 1], [[0], [1]], 4) == [[0], [1], [], []]
    assert split_to_count([5, 1], [], 2) == [[], []]
    with pytest.raises(ValueError, match="into fewer"):
        split_to_count(counts, [[0], [1]], 1)


def test_balance_rows_across_ranks():
    assert balance_rows_across_ranks([5, 1, 4, 2, 3], 2) == [[0, 1, 3], [2, 4]]
    with pytest.raises(ValueError, match="2 rows cannot give each of 3 ranks a row"):
        balance_rows_across_ranks([5, 1], 3)


def test_balanced_update_shards_by_hand():
    # mini-batch 0 = rows 0-3 [5, 1, 4, 2]: 5 -> r0, 4 -> r1, 2 -> r1, 1 -> r0: r0 {0, 1}, r1 {2, 3}
    # mini-batch 1 = rows 4-7 [1, 1, 1, 9]: 9 -> r0, then the three 1s -> r1: r0 {7}, r1 {4, 5, 6}
    shards = balanced_update_shards([5, 1, 4, 2, 1, 1, 1, 9], num_mini_batches=2, world_size=2)
    assert shards == [([0, 1, 7], [0, 0, 1]), ([2, 3, 4, 5, 6], [0, 0, 1, 1, 1])]
    with pytest.raises(ValueError, match="7 rows do not split into 2 mini-batches"):
        balanced_update_shards([1] * 7, num_mini_batches=2, world_size=2)


def test_length_sorted_groups_put_similar_rows_together():
    # lengths 50, 10, 40, 10, 30: by length (ties by row) rows 1, 3, 4, 2, 0 -> groups of two
    assert length_sorted_groups([50, 10, 40, 10, 30], 2) == [[1, 3], [2, 4], [0]]
    assert length_sorted_groups([7], 4) == [[0]] and length_sorted_groups([], 3) == []
    with pytest.raises(ValueError, match="rows per micro-batch must be >= 1, got 0"):
        length_sorted_groups([1, 2], 0)
