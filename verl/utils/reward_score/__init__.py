"""Reward functions: the default dispatch by data source, and loading a user's own from a .py file.

A reward function has the signature `(data_source, solution_str, ground_truth, extra_info=None) ->
float`. The default one also has a batch form, `default_compute_scores`, that hands all math items to
the math-verify process pool at once, so they spread over its processes.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from verl.utils.reward_score import math_verify, synthetic

SYNTHETIC_PREFIX = "synthetic/"


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None
) -> float:
    if data_source.startswith(SYNTHETIC_PREFIX):
        return synthetic.compute_score(solution_str, ground_truth)
    return math_verify.compute_score(data_source, solution_str, ground_truth, extra_info)


def default_compute_scores(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict] | None = None,
) -> list[float]:
    """`default_compute_score` for every item; the math items go to math-verify as one batch."""
    if not len(data_sources) == len(solution_strs) == len(ground_truths):
        raise ValueError(
            f"got {len(data_sources)} data sources, {len(solution_strs)} solution strings and "
            f"{len(ground_truths)} ground truths; they must match"
        )
    scores = [0.0] * len(solution_strs)
    math_items = []
    for i, (source, solution, truth) in enumerate(
        zip(data_sources, solution_strs, ground_truths, strict=True)
    ):
        if source.startswith(SYNTHETIC_PREFIX):
            scores[i] = synthetic.compute_score(solution, truth)
        else:
            math_items.append(i)
    math_scores = math_verify.compute_scores(
        [solution_strs[i] for i in math_items], [ground_truths[i] for i in math_items]
    )
    for i, score in zip(math_items, math_scores, strict=True):
        scores[i] = score
    return scores


def load_reward_function(path: str | None, name: str) -> Callable[..., float]:
    """The callable `name` defined in the .py file at `path` (relative to the cwd); the default if no path."""
    if path is None:
        return default_compute_score
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"custom_reward_function.path={path!r}: no such file (relative to {Path.cwd()})")
    # registered in sys.modules: a dataclass defined in the file looks its module up there while being built
    module_name = f"custom_reward_function_{file.stem}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ValueError(f"custom_reward_function.path={path!r}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[module_name]
        raise ValueError(f"custom_reward_function.path={path!r}: importing it failed: {e!r}") from e
    if not hasattr(module, name):
        raise ValueError(f"custom_reward_function.name={name!r}: {path} defines no such attribute")
    function = getattr(module, name)
    if not callable(function):
        raise ValueError(
            f"custom_reward_function.name={name!r}: {path} defines it as a {type(function).__name__}, "
            "not a function"
        )
    return function
