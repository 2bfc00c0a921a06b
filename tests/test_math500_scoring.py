"""math-verify scores every MATH-500 reference solution as correct against its own answer, with the answer
as the task loader hands it to training, and scores solutions of other problems as wrong.

Measured: all 500 reference solutions score 1.0 (so there are no known misses to list here).
"""

import pytest

from verl.data.tasks import normalise_answer, read_task_rows
from verl.utils.math_data import VENDORED_MATH_DIR
from verl.utils.reward_score.math_verify import compute_scores

MATH500 = VENDORED_MATH_DIR / "math500.jsonl"
TIMEOUT_S = 30.0  # per item, a safety net: a loaded 2-core box must not turn a slow verify into a miss
KNOWN_MISSES: set[str] = set()  # unique_ids math-verify wrongly rejects; none today


@pytest.fixture(scope="module")
def rows():
    return read_task_rows(str(MATH500))


def as_finished_trace(solution: str) -> str:
    """A reference solution as the answer of a trace whose thinking closed (the reward needs </think>)."""
    return "</think>" + solution


def test_every_reference_solution_scores_one(rows):
    solutions = [as_finished_trace(r["solution"]) for r in rows]
    answers = [normalise_answer(r["answer"]) for r in rows]
    scores = compute_scores(solutions, answers, timeout_s=TIMEOUT_S)
    missed = {r["unique_id"] for r, s in zip(rows, scores, strict=True) if s != 1.0}
    print(
        f"MATH-500: {sum(scores):.0f} of {len(rows)} reference solutions score 1.0; missed: {sorted(missed)}"
    )
    assert len(rows) == 500
    assert missed == KNOWN_MISSES
    # the same solutions without the closing tag are unfinished traces: none earns a reward
    assert compute_scores([r["solution"] for r in rows[:20]], answers[:20]) == [0.0] * 20


def test_solutions_of_other_problems_score_zero(rows):
    # each of the first 100 solutions against the next problem's answer: the one pair that scores is a
    # true coincidence, problem 22's answer "5" against problem 23's "x=5" (math-verify compares values)
    head = rows[:101]
    solutions = [as_finished_trace(r["solution"]) for r in head[:-1]]
    answers = [normalise_answer(r["answer"]) for r in head[1:]]
    scores = compute_scores(solutions, answers, timeout_s=TIMEOUT_S)
    assert [i for i, s in enumerate(scores) if s] == [22]
    assert (head[22]["answer"], head[23]["answer"]) == ("5", "x=5")
