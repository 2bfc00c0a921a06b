"""Math answer scoring with math-verify, as the paper's reference implementation scores it.

A trace has an answer only once its thinking is closed (`boxed.strip_thinking`): the text after the
first `</think>` goes to math-verify's LaTeX extraction, which takes the rightmost `\\boxed{}` first
(`boxed_match_priority=0`; two boxes a few words apart are read together, as the set of both), then
"final answer is ..." or "answer: ..." followed by LaTeX, then any LaTeX math (`$...$`, `\\[...\\]`).
Only the best-ranked match is tried, with no plain-string fallback. The gold answer is wrapped as
display math (`gold_as_latex`) and parsed the same way. math-verify's own limits are the reference's:
1 s per parse, 2 s per comparison (times VERL_SCORING_TIME_SCALE, default 1: `time_scale`).

Those limits are `signal.alarm`s, which raise ValueError anywhere but the main thread (thread pools,
threaded or async Ray actors), and which cannot cut a long C call short (Python runs signal handlers
between bytecodes; sympy's big-integer power in `9^{9^{9^{9}}}` never returns with them off). So
parse/verify run on the main thread of persistent child processes, a pool of them per scoring process
(`process_pool.py`; its size is `reward_model.scoring_processes`), and the parent enforces `timeout_s`
per item on top: an item that overruns gets 0.0 and its child is killed; a fresh one replaces it when
needed. Each item goes to whichever child is free, so one pathological answer holds up only its own.

The children are fresh interpreters (fork + exec, like multiprocessing's "spawn", so it is safe inside
threaded Ray actors) started with subprocess rather than multiprocessing, because multiprocessing
re-imports the caller's `__main__` in the child: that breaks scripts without a main guard and makes
every restart pay for importing the whole trainer.

Usable as a custom reward: `custom_reward_function.path=verl/utils/reward_score/math_verify.py`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from verl.utils.reward_score.boxed import strip_thinking
from verl.utils.reward_score.process_pool import ProcessPool, serve


def time_scale() -> float:
    """VERL_SCORING_TIME_SCALE (default 1): the factor on every limit below. They are wall-clock, so a
    crowded machine slows a legitimate answer past them too (it then scores 0); the test suite sets it
    (tests/conftest.py) so that no score it checks depends on the machine's load."""
    text = os.environ.get("VERL_SCORING_TIME_SCALE", "1")
    try:
        scale = float(text)
    except ValueError:
        scale = 0.0
    if not scale > 0:
        raise ValueError(f"VERL_SCORING_TIME_SCALE={text!r}: must be a number > 0")
    return scale


TIME_SCALE = time_scale()
DEFAULT_TIMEOUT_S = 5.0 * TIME_SCALE  # per item, enforced by the parent; legitimate answers take < 0.1 s
# math-verify's own limits inside each scoring process, the reference's values (whole seconds: signal.alarm)
PARSE_TIMEOUT_S = max(1, round(1 * TIME_SCALE))
VERIFY_TIMEOUT_S = max(1, round(2 * TIME_SCALE))


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> float:
    """1.0 if the answer math-verify extracts after the first </think> equals `ground_truth`, else 0.0.

    Never raises on any solution string and spends at most `timeout_s` verifying it; the only error is
    a scoring process that cannot start at all (math-verify missing).
    """
    return compute_scores([solution_str], [ground_truth], timeout_s=timeout_s)[0]


def compute_scores(
    solution_strs: Sequence[str], ground_truths: Sequence[Any], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[float]:
    """`compute_score` for many items, spread over the pool's processes; at most `timeout_s` per item."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
    if len(solution_strs) != len(ground_truths):
        raise ValueError(f"got {len(solution_strs)} solution strings but {len(ground_truths)} ground truths")
    scores = [0.0] * len(solution_strs)
    to_verify: list[int] = []
    pairs: list[tuple[str, str]] = []
    for i, (solution, truth) in enumerate(zip(solution_strs, ground_truths, strict=True)):
        answer_part = strip_thinking(solution) if isinstance(solution, str) else None
        if answer_part is not None:
            to_verify.append(i)
            pairs.append((gold_as_latex(str(truth)), answer_part))
    for i, score in zip(to_verify, _pool.map(pairs, timeout_s, on_timeout=0.0), strict=True):
        scores[i] = score
    return scores


def gold_as_latex(answer: str) -> str:
    """`answer` as LaTeX display math `\\[...\\]`, kept as it is when already in math mode.

    math-verify's LaTeX extraction only reads math it can delimit, so a bare `x=5` or `\\frac12` would
    not be found; an answer that already carries `$...$`, `\\(...\\)` or `\\[...\\]` would break if
    wrapped again.
    """
    text = answer.strip()
    dollars = len(text) > 1 and text.startswith("$") and text.endswith("$")
    delimited = ("\\[" in text and "\\]" in text) or ("\\(" in text and "\\)" in text)
    return text if dollars or delimited else f"\\[{text}\\]"


def set_pool_size(size: int | None) -> None:
    """Score with at most `size` processes at once (`reward_model.scoring_processes`); None: the
    default, one per CPU plus 4, at most 32."""
    _pool.set_size(size)


def warm_up_pool(count: int | None = None) -> None:
    """Start scoring processes now, `count` of them (default: the pool's size), so that the first items
    scored do not wait for start-ups (a second or two each, one at a time)."""
    _pool.warm_up(_pool.size if count is None else count)


# ---- child side: runs on the main thread of each scoring process ----


def _serve(conn_fd: int) -> None:
    from math_verify import LatexExtractionConfig, parse, verify

    # its warnings are its timeouts, each printing the whole answer text; the 0.0 score says enough
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # boxed first, then the anchored forms, then any LaTeX math; math-verify's default normalisation,
    # which is what the reference's config amounts to (docs/PAPER_CONFIGS.md)
    latex_only = [LatexExtractionConfig(boxed_match_priority=0)]

    def extract(latex: str) -> list:
        return parse(
            latex,
            extraction_config=latex_only,
            fallback_mode="no_fallback",  # an unparseable match scores 0, not as a raw string
            extraction_mode="first_match",  # only the best-ranked match is tried
            parsing_timeout=PARSE_TIMEOUT_S,
        )

    def verify_pair(pair: tuple[str, str]) -> float:
        gold_latex, answer_part = pair
        try:
            return float(verify(extract(gold_latex), extract(answer_part), timeout_seconds=VERIFY_TIMEOUT_S))
        except Exception:  # sympy raises all sorts (RecursionError, TypeError, ...) on odd input
            return 0.0

    # math-verify and sympy set up lazily on first use (regexes, the LaTeX grammar, constants, tuples,
    # sets): about 0.5 s of CPU that, left to the first real item, can push it past the 1 s parse limit
    # on a loaded machine (a MATH-500 solution then scored 0). Pay it before saying we are ready.
    for gold, answer in (
        ("\\left( 2, \\frac{\\pi}{3} \\right)", "$x = 1$, \\boxed{(2, \\frac{\\pi}{3})}"),
        ("\\{1, 2\\}", "\\boxed{2\\sqrt{3} + x^2}"),
    ):
        verify_pair((gold_as_latex(gold), answer))
    serve(conn_fd, verify_pair)


# a module loaded again as a custom reward file gets a pool of its own; the children import this one
_pool = ProcessPool("verl.utils.reward_score.math_verify", "_serve")
