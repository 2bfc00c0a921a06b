"""A task that is Markovian by construction: step a 4-digit shift register mod 10, counting down.

    question:  005:8153
    thinking:   005:8153 004:1539 003:5396 002:3968 001:9682 000:6825
    response:  <thinking></think>\\boxed{6825}

The register holds the last four digits of the lagged Fibonacci sequence x[t] = (x[t-4] + x[t-3]) mod 10:
each step drops the first digit, shifts the other three left and appends the sum of the two it dropped
and kept first (8153 -> 153 + (8+1) -> 1539). Every step writes its whole state after a space, ` RRR:WWWW`
(the steps still to go, then the register), so any one complete step in the context determines the next step
and when to stop (at 000), whatever came before it: a Delethink carry-over of two steps is all a model needs.
The next step is a fixed-offset copy (three digits, and the counter) plus two small sums (one digit mod
10, the counter minus one), which a small transformer learns.

The question is the first state, written as a step, and the thinking opens by restating it: so the
first step is one copy of the whole question at one offset. Every step, the first included, opens with a
space, so that a step's context looks the same whether it follows the prompt or another step: without it the
first sum's context alone reached into the prompt, and some warm starts learned that sum late. A question in
another layout (`8153 n=005`) made the first step two copies at two offsets found nowhere else in the trace,
and some warm starts never learned the counter's (recipes/markovian_testbed/README.md).

Difficulty is the step count n: the thinking is 9(n+1) tokens of the tiny byte-level tokenizer
(9 per step), so n = 55 fits in 512 tokens and n = 226 in 2048; an error anywhere derails every later
step, so accuracy falls with n. Counter values are all written with three digits, so a longer problem
asks for no symbol a shorter one lacks, only for more steps. The verifier is exact (the final register).
The map is a permutation of the 10^4 states (the dropped digit is recoverable), so no state is absorbing.

    python -m verl.data.shift_register --out DIR --train-size 2000 --val-size 64 \\
        --min-steps 8 --max-steps 55 --seed 0
"""

from __future__ import annotations

import argparse
import random
import re
from dataclasses import dataclass
from pathlib import Path

from verl.data.task_problem import TaskProblem
from verl.utils.fs import atomic_write_jsonl

DATA_SOURCE = "synthetic/shift_register"
WIDTH = 4  # digits in the register
COUNTER_DIGITS = 3  # the step counter is zero-padded to this many digits
MAX_STEPS = 10**COUNTER_DIGITS - 1
TOKENS_PER_STEP = 1 + COUNTER_DIGITS + 1 + WIDTH  # " RRR:WWWW": the space, the counter, ":", the register
REGISTER_OFFSET = 1 + COUNTER_DIGITS + 1  # where a step's register starts within it
QUESTION = re.compile(rf"(?P<steps>\d{{{COUNTER_DIGITS}}}):(?P<start>\d{{{WIDTH}}})")  # the first state


@dataclass(frozen=True)
class Problem(TaskProblem):
    num_steps: int  # n: the register is stepped n times

    @property
    def size(self) -> int:
        """The difficulty knob: the number of steps."""
        return self.num_steps


def step(register: str) -> str:
    """The register after one step: drop the first digit, append (first + second) mod 10."""
    return register[1:] + str((int(register[0]) + int(register[1])) % 10)


def thinking_tokens(num_steps: int) -> int:
    """Length of the reference thinking of an n-step problem: n + 1 steps of 9 tokens."""
    return TOKENS_PER_STEP * (num_steps + 1)


def steps_for_thinking_tokens(tokens: int) -> int:
    """The largest n whose reference thinking fits in `tokens` (0 if even n = 0 does not fit)."""
    return max(0, tokens // TOKENS_PER_STEP - 1)


def solve(start: str, num_steps: int) -> Problem:
    """The problem that steps `start` (4 digits) `num_steps` times, with its reference thinking and answer."""
    if len(start) != WIDTH or not start.isascii() or not start.isdigit():
        raise ValueError(f"start must be {WIDTH} digits, got {start!r}")
    if not 1 <= num_steps <= MAX_STEPS:
        raise ValueError(
            f"num_steps must be in [1, {MAX_STEPS}] (a {COUNTER_DIGITS}-digit counter), got {num_steps}"
        )
    question = f"{num_steps:0{COUNTER_DIGITS}d}:{start}"  # the first state, as a step writes it
    register, steps = start, []
    for remaining in range(num_steps, -1, -1):
        steps.append(f"{remaining:0{COUNTER_DIGITS}d}:{register}")
        if remaining:
            register = step(register)
    return Problem(
        question=question,
        answer=register,
        thinking="".join(" " + state for state in steps),
        num_steps=num_steps,
    )


def parse_question(question: str) -> tuple[str, int]:
    """(start register, steps n) of a question `solve` wrote."""
    match = QUESTION.fullmatch(question)
    if match is None:
        raise ValueError(f"not a shift-register question (NNN:WWWW): {question!r}")
    return match["start"], int(match["steps"])


def make_problem(rng: random.Random, num_steps: int, zero_prob: float = 0.0) -> Problem:
    """A problem from a random start; with `zero_prob` > 0 each start digit is 0 with that probability
    (else uniform), a stream of its own: at 0 the draws are those of a uniform start."""
    if zero_prob == 0:
        return solve("".join(str(rng.randrange(10)) for _ in range(WIDTH)), num_steps)
    digits = ("0" if rng.random() < zero_prob else str(rng.randrange(10)) for _ in range(WIDTH))
    return solve("".join(digits), num_steps)


def problem_sizes(count: int, min_steps: int, max_steps: int) -> list[int]:
    """`count` step counts spread evenly over [min_steps, max_steps] (both ends included when count >= 2)."""
    if count == 1:
        return [max_steps]
    return [min_steps + round(i * (max_steps - min_steps) / (count - 1)) for i in range(count)]


def row(problem: Problem, index: int, split: str, data_source: str = DATA_SOURCE) -> dict:
    """A prompt row in the training format; `data_source` may name a subset (any `synthetic/` source is
    scored by the same exact verifier)."""
    return problem.row(
        data_source,
        index,
        split,
        num_steps=problem.num_steps,
        thinking_tokens=thinking_tokens(problem.num_steps),
    )


def write_dataset(
    out_dir: str | Path,
    train_size: int,
    val_size: int,
    min_steps: int,
    max_steps: int,
    seed: int,
    val_min_steps: int | None = None,
    val_max_steps: int | None = None,
) -> None:
    """Write DIR/train.jsonl (sizes drawn uniformly) and DIR/val.jsonl (sizes spread evenly, by default
    over the training range); no validation question appears in the training set."""
    val_min = min_steps if val_min_steps is None else val_min_steps
    val_max = max_steps if val_max_steps is None else val_max_steps
    for name, low, high in (("", min_steps, max_steps), ("val_", val_min, val_max)):
        if not 1 <= low <= high <= MAX_STEPS:
            raise ValueError(
                f"need 1 <= {name}min_steps <= {name}max_steps <= {MAX_STEPS}, got {low}, {high}"
            )
    if train_size < 0 or val_size < 0:
        raise ValueError(f"sizes must be >= 0, got train_size={train_size}, val_size={val_size}")
    rng = random.Random(seed)
    val = [make_problem(rng, n) for n in problem_sizes(val_size, val_min, val_max)] if val_size else []
    val_questions = {p.question for p in val}
    train: list[Problem] = []
    while len(train) < train_size:
        problem = make_problem(rng, rng.randint(min_steps, max_steps))
        if problem.question not in val_questions:
            train.append(problem)
    out_dir = Path(out_dir)
    atomic_write_jsonl(out_dir / "train.jsonl", [row(p, i, "train") for i, p in enumerate(train)])
    atomic_write_jsonl(out_dir / "val.jsonl", [row(p, i, "val") for i, p in enumerate(val)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the shift-register task as train/val JSONL.")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--val-size", type=int, default=64)
    parser.add_argument("--min-steps", type=int, default=8, help="fewest steps n of a training problem")
    parser.add_argument("--max-steps", type=int, default=55, help="most steps n (55: fits 512 tokens)")
    parser.add_argument("--val-min-steps", type=int, default=None, help="default: --min-steps")
    parser.add_argument("--val-max-steps", type=int, default=None, help="default: --max-steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        write_dataset(
            args.out,
            args.train_size,
            args.val_size,
            args.min_steps,
            args.max_steps,
            args.seed,
            args.val_min_steps,
            args.val_max_steps,
        )
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {args.train_size} train and {args.val_size} val problems to {args.out}")


if __name__ == "__main__":
    main()
