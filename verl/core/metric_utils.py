"""Accuracy estimators for N samples per problem, as papers report them (pure functions).

- mean@N: the average score of the N samples.
- maj@N: the score of the most common final answer (ties: the answer seen first); samples without
  an answer do not vote.
- pass@k: the unbiased estimator 1 - C(N - c, k) / C(N, k) of "at least one of k samples is right",
  from c correct samples out of N (not a bootstrap over best-of-k).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    if not 0 <= num_correct <= num_samples or not 1 <= k <= num_samples:
        raise ValueError(
            f"need 0 <= correct ({num_correct}) <= samples ({num_samples}) and 1 <= k ({k}) <= samples"
        )
    if num_samples - num_correct < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i), stable for large n
    miss = 1.0
    for i in range(num_samples - num_correct + 1, num_samples + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def majority_vote_score(answers: Sequence[str | None], scores: Sequence[float]) -> float:
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    winner = next(a for a in answers if a is not None and votes[a] == top)
    return float(scores[answers.index(winner)])


def problem_metrics(
    answers: Sequence[str | None], scores: Sequence[float], ks: Sequence[int]
) -> dict[str, float]:
    """mean@N, maj@N and pass@k (k in ks, k <= N) for one problem's N samples; a sample is correct when
    its score is positive."""
    n = len(scores)
    correct = sum(s > 0 for s in scores)
    out = {f"mean@{n}": sum(scores) / n, f"maj@{n}": majority_vote_score(answers, scores)}
    out.update({f"pass@{k}": pass_at_k(n, correct, k) for k in ks if k <= n})
    return out
