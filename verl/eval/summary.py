"""From sample records (the rows of samples.jsonl) to the numbers in summary.json (pure functions).

Accuracy is computed per problem over its N samples (mean@N, maj@N, unbiased pass@k, as in
validation during training) and then averaged over the problems of each data source, and of all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from verl.core.metric_utils import problem_metrics

ALL_SOURCES = "all"


def accuracy_metrics(samples: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, float]:
    """Average over problems of each problem's mean@N, maj@N and pass@k."""
    by_problem: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        by_problem[s["problem_index"]].append(s)
    per_problem = []
    for group in by_problem.values():
        group = sorted(group, key=lambda s: s["sample_index"])  # maj@N breaks ties by the first sample
        per_problem.append(problem_metrics([s["answer"] for s in group], [s["score"] for s in group], ks))
    names = per_problem[0].keys()
    return {name: float(np.mean([m[name] for m in per_problem])) for name in names}


def length_metrics(samples: Sequence[dict[str, Any]]) -> dict[str, float]:
    thinking = [s["thinking_tokens"] for s in samples]
    return {
        "num_problems": len({s["problem_index"] for s in samples}),
        "num_samples": len(samples),
        "thinking_tokens_mean": float(np.mean(thinking)),
        "thinking_tokens_max": int(np.max(thinking)),
        "chunks_per_trace_mean": float(np.mean([s["num_chunks"] for s in samples])),
        "has_eos_rate": float(np.mean([s["has_eos"] for s in samples])),
    }


def summarise_run(samples: Sequence[dict[str, Any]], ks: Sequence[int], wall_time_s: float) -> dict[str, Any]:
    """Metrics of one run (one mode at one budget): over all problems and per data source, plus speed.

    `samples` must hold every sample of every problem (each problem's N samples) of that run.
    """
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        by_source[s["data_source"]].append(s)
    groups = {ALL_SOURCES: list(samples), **by_source}
    sampled_tokens = sum(s["thinking_tokens"] for s in samples)  # every chunk's new tokens
    return {
        "metrics": {name: {**accuracy_metrics(g, ks), **length_metrics(g)} for name, g in groups.items()},
        "wall_time_s": wall_time_s,
        "sampled_tokens": sampled_tokens,
        "tokens_per_s": sampled_tokens / wall_time_s if wall_time_s > 0 else float("nan"),
    }
