"""Accuracies with their noise, and differences between runs paired by problem.

main_eval samples problem p's sample j with the same seed in every run (evaluate.sample_seed), so two
runs evaluated on the same problems can be compared problem by problem: the standard error of the
per-problem differences counts only what changed between the runs, and is a half to a quarter of either
accuracy's own (most of that is the spread of difficulty across problems, which both runs share).
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence

# problem index -> the scores of its samples
Scores = dict[int, list[float]]


def problem_scores(samples: Iterable[dict], mode: str, budget: int) -> Scores:
    """Each problem's sample scores in the `mode` run at thinking budget `budget` of a samples.jsonl."""
    scores: Scores = defaultdict(list)
    for s in samples:
        if s["mode"] == mode and s["thinking_budget"] == budget:
            scores[s["problem_index"]].append(float(s["score"]))
    return dict(scores)


def mean_and_standard_error(values: Sequence[float]) -> tuple[float, float]:
    """The mean and its standard error (sample standard deviation over sqrt(n); nan below two values)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan


def accuracy(scores: Scores) -> tuple[float, float]:
    """Accuracy over problems (each problem's mean over its samples, so every problem weighs the same) and
    its standard error over problems: it counts the spread of difficulty, not only the sampling noise."""
    return mean_and_standard_error([statistics.fmean(s) for s in scores.values()])


def _same_problems(run: Scores, base: Scores) -> None:
    if run.keys() != base.keys():
        raise ValueError(f"different problems: {len(run)} against {len(base)}")


def paired_gain(run: Scores, base: Scores) -> tuple[float, float]:
    """Mean and standard error of the per-problem accuracy differences run - base (same problems)."""
    _same_problems(run, base)
    return mean_and_standard_error([statistics.fmean(run[p]) - statistics.fmean(base[p]) for p in run])


def paired_ratio(
    numerator: Scores, denominator: Scores, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Accuracy of `numerator` over accuracy of `denominator` (same problems), and the ratio's standard
    error from a bootstrap over problems that resamples both runs' problems together (so what the two
    share, the problems' difficulty, is kept paired). nan if the denominator's accuracy is 0."""
    _same_problems(numerator, denominator)
    problems = sorted(numerator)
    top = [statistics.fmean(numerator[p]) for p in problems]
    bottom = [statistics.fmean(denominator[p]) for p in problems]
    if sum(bottom) == 0:
        return math.nan, math.nan
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        picks = [rng.randrange(len(problems)) for _ in problems]
        total = sum(bottom[i] for i in picks)
        if total > 0:
            ratios.append(sum(top[i] for i in picks) / total)
    return sum(top) / sum(bottom), statistics.stdev(ratios) if len(ratios) > 1 else math.nan


def fmt(value: tuple[float, float], signed: bool = False) -> str:
    """'0.625 ± 0.021' (or '+0.051 ± 0.012' when signed)."""
    return f"{value[0]:{'+' if signed else ''}.3f} ± {value[1]:.3f}"
