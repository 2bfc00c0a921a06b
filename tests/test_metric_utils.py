"""Validation estimators against hand-computed values."""

import math

import pytest

from verl.core.metric_utils import majority_vote_score, pass_at_k, problem_metrics


def test_pass_at_k_matches_the_combinatorial_formula():
    # n = 4, c = 1, k = 2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    # n = 5, c = 2, k = 2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # k = 1 is the plain accuracy c / n
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert pass_at_k(4, 0, 3) == 0.0 and pass_at_k(4, 2, 3) == 1.0  # fewer than k wrong -> certain
    assert pass_at_k(100, 10, 10) == pytest.approx(1 - math.comb(90, 10) / math.comb(100, 10))
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_majority_vote():
    # "7" twice (wrong), "8" once (right), one sample without an answer: the majority is wrong
    assert majority_vote_score(["7", "8", None, "7"], [0.0, 1.0, 0.0, 0.0]) == 0.0
    # a tie goes to the answer seen first
    assert majority_vote_score(["8", "7", "7", "8"], [1.0, 0.0, 0.0, 1.0]) == 1.0
    assert majority_vote_score([None, None], [0.0, 0.0]) == 0.0
    # the majority is not the first answer seen
    assert majority_vote_score([None, "7", "8", "8"], [0.0, 0.0, 1.0, 1.0]) == 1.0


def test_problem_metrics():
    m = problem_metrics(["3", "3", "5", None], [1.0, 1.0, 0.0, 0.0], ks=[1, 2, 8])
    # mean 2/4; majority "3" is right; pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert m == pytest.approx({"mean@4": 0.5, "maj@4": 1.0, "pass@1": 0.5, "pass@2": 5 / 6})


def test_the_bounds_of_pass_at_k():
    # every sample right, or k = N: certain; one sample, wrong: never
    assert pass_at_k(4, 4, 2) == 1.0 and pass_at_k(4, 1, 4) == 1.0 and pass_at_k(1, 0, 1) == 0.0
    # N = 3, c = 1, k = 2 (the loop's last factor at i = N): 1 - (1 - 2/3) = 2/3
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)
    message = r"^need 0 <= correct \({}\) <= samples \(4\) and 1 <= k \({}\) <= samples$"
    for correct, k in ((-1, 1), (5, 1), (1, 0), (1, 5)):
        with pytest.raises(ValueError, match=message.format(correct, k)):
            pass_at_k(4, correct, k)


def test_problem_metrics_take_k_up_to_n_and_count_positive_scores_as_correct():
    m = problem_metrics(["1", "2"], [0.0, 0.5], ks=[1, 2, 3])
    # one right (0.5 > 0; a zero score is wrong) of two: pass@1 = 1/2, pass@2 = 1; pass@3 is out of range
    assert m == {"mean@2": 0.25, "maj@2": 0.0, "pass@1": 0.5, "pass@2": 1.0}
