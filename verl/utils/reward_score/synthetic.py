"""The score of the synthetic tasks (data sources `synthetic/...`, verl/data/synthetic.py and
shift_register.py): an exact match of the boxed answer, no math parsing needed."""

from __future__ import annotations

from verl.utils.reward_score.boxed import extract_final_answer


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 iff the last \\boxed{} after the thinking holds the ground truth; 0.0 otherwise."""
    answer = extract_final_answer(solution_str)
    return float(answer is not None and answer.strip() == str(ground_truth).strip())
