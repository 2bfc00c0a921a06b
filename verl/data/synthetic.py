"""A synthetic reasoning task for CPU runs: the running sum mod 10 of labelled digits.

    question:  a3 b5 c2 d7 e1
    thinking:  a3=3 b5=8 c2=0 d7=7 e1=8
    response:  a3=3 b5=8 c2=0 d7=7 e1=8</think>\\boxed{8}

Thinking grows linearly with the number of terms (5 characters, so 5 tokens of the tiny byte-level
tokenizer, per term), and the whole running state sits in the last step. Each step restates its label
and digit, so a reader who sees only the tail of the thinking (Delethink's carry-over) knows where it is.
Labels cycle through an alphabet (a..z by default), so a problem may have more terms than letters:
with the alphabet `abc`, four terms are labelled `a b c a`. Only the final \boxed{} answer is scored.

    python -m verl.data.synthetic --out DIR --train-size 2000 --val-size 64 \\
        --min-terms 4 --max-terms 12 --seed 0
"""

from __future__ import annotations

import argparse
import random
import string
from pathlib import Path

from verl.data.task_problem import TaskProblem
from verl.utils.fs import atomic_write_jsonl

DATA_SOURCE = "synthetic/running_sum"
LABELS = string.ascii_lowercase  # the default label alphabet; term i is labelled LABELS[i % 26]


class Problem(TaskProblem):
    @property
    def num_terms(self) -> int:
        return len(self.question.split())

    @property
    def size(self) -> int:
        """The difficulty knob: the number of terms."""
        return self.num_terms


def check_labels(labels: str) -> None:
    # a label must be one token that cannot be confused with a digit, the separators or another label
    if not labels or not all(c.isascii() and c.isalpha() for c in labels) or len(set(labels)) < len(labels):
        raise ValueError(f"labels must be distinct ASCII letters, at least one, got {labels!r}")


def solve(digits: list[int], labels: str = LABELS) -> Problem:
    """The problem over these digits, with its reference thinking and answer; term i is labelled
    labels[i % len(labels)], so the labels repeat once the problem is longer than the alphabet."""
    check_labels(labels)
    if not digits:
        raise ValueError("a problem has at least 1 term, got 0")
    if not all(d in range(10) for d in digits):
        raise ValueError(f"terms must be digits 0..9, got {digits}")
    terms, steps, total = [], [], 0
    for i, digit in enumerate(digits):
        label = labels[i % len(labels)]
        total = (total + digit) % 10
        terms.append(f"{label}{digit}")
        steps.append(f"{label}{digit}={total}")
    return Problem(question=" ".join(terms), answer=str(total), thinking=" ".join(steps))


def make_problem(rng: random.Random, num_terms: int, labels: str = LABELS) -> Problem:
    return solve([rng.randrange(10) for _ in range(num_terms)], labels)


def problem_sizes(count: int, min_terms: int, max_terms: int) -> list[int]:
    """Problem sizes cycling through [min_terms, max_terms], so every size is equally represented."""
    return [min_terms + i % (max_terms - min_terms + 1) for i in range(count)]


def _row(problem: Problem, index: int, split: str) -> dict:
    return problem.row(DATA_SOURCE, index, split, num_terms=problem.num_terms)


def write_dataset(
    out_dir: str | Path,
    train_size: int,
    val_size: int,
    min_terms: int,
    max_terms: int,
    seed: int,
    labels: str = LABELS,
) -> None:
    """Write DIR/train.jsonl and DIR/val.jsonl; no validation question appears in the training set.
    Terms are labelled from `labels` (cycling, as in `solve`)."""
    check_labels(labels)
    if not 1 <= min_terms <= max_terms:
        raise ValueError(f"need 1 <= min_terms <= max_terms, got {min_terms}, {max_terms}")
    distinct_questions = sum(10**n for n in range(min_terms, max_terms + 1))
    if val_size >= distinct_questions:
        raise ValueError(
            f"val_size={val_size} leaves no question for training: only {distinct_questions} distinct "
            f"questions have {min_terms}..{max_terms} terms"
        )
    rng = random.Random(seed)
    val: list[Problem] = []
    val_questions: set[str] = set()
    for n in problem_sizes(val_size, min_terms, max_terms):
        problem = make_problem(rng, n, labels)
        # the smallest size may run out of distinct questions; keep drawing until a new one appears
        while problem.question in val_questions:
            problem = make_problem(rng, rng.randint(min_terms, max_terms), labels)
        val.append(problem)
        val_questions.add(problem.question)
    train: list[Problem] = []
    for n in problem_sizes(train_size, min_terms, max_terms):
        problem = make_problem(rng, n, labels)
        while problem.question in val_questions:
            problem = make_problem(rng, rng.randint(min_terms, max_terms), labels)
        train.append(problem)

    out_dir = Path(out_dir)
    atomic_write_jsonl(out_dir / "train.jsonl", [_row(p, i, "train") for i, p in enumerate(train)])
    atomic_write_jsonl(out_dir / "val.jsonl", [_row(p, i, "val") for i, p in enumerate(val)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the running-sum task as train/val JSONL.")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--val-size", type=int, default=64)
    parser.add_argument("--min-terms", type=int, default=4)
    parser.add_argument("--max-terms", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--labels", default=LABELS, help="label alphabet, cycled (default a..z)")
    args = parser.parse_args(argv)
    try:
        write_dataset(
            args.out, args.train_size, args.val_size, args.min_terms, args.max_terms, args.seed, args.labels
        )
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {args.train_size} train and {args.val_size} val problems to {args.out}")


if __name__ == "__main__":
    main()
