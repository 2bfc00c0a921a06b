"""The Markovian testbed's settings: each size's values, what follows from them, and the claims' targets.

    python recipes/markovian_testbed/settings.py demo     # prints NAME=VALUE lines, run.sh's variables

run.sh and lora_vs_full.sh read their variables from that output, and run.sh records every one of them
in OUT/run_config.json (run_config.py), which report.py reads back. Why each value is what it is:
README.md next to this file and docs/results/testbed.md.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Final

from verl.core.delethink import DelethinkParams
from verl.data.shift_register import TOKENS_PER_STEP, steps_for_thinking_tokens

# The claims' targets, the numbers report.py decides each verdict against
TARGET_GAIN_SE: Final = 2.0  # an RL gain over its own warm start holds above this many standard errors
TARGET_A_RATIO: Final = 0.95  # (a) and the probe: Delethink's held-out accuracy at B >= this x LongCoT's
TARGET_B_LONGCOT_SHARE: Final = 0.5  # (b): LongCoT's gain from B to 2B < this x Delethink's
TARGET_C_ROLLOUT: Final = 1.0  # (c): Delethink's rollout per RL step <= this x LongCoT's
TARGET_C_FLAT: Final = 1.2  # (c): Delethink's decode time per token at the largest budget / at B <= this

SWEEP_HALVES = (2, 3, 4, 6, 8)  # the budget sweeps' budgets in halves of B: B, 1.5B, 2B, 3B, 4B
TIMING_MULTIPLES = (1, 2, 4, 8)  # the timing stage's budgets in B: doublings, the cost curve's axis


@dataclass(frozen=True)
class TestbedSettings:
    """One size of the testbed. Delethink's shape follows from B: C = B/4, keep_head = one step of the
    trace, keep_tail = C/2 - keep_head (so m = C/2), and I chunks for a total budget of B."""

    budget: int  # B: LongCoT-RL's thinking budget in tokens, and Delethink-RL's total
    sft_steps: int  # the warm start's limit in SFT steps
    sft_target: float  # held-out T = 1 accuracy at which SFT stops; below it the recipe stops (warm_start.py)
    sft_check_every: int  # SFT steps between the warm start's accuracy checks
    cont_prob: float  # share of SFT examples that are Delethink continuation chunks (task.continuation.prob)
    zero_prob: float  # chance that a digit of a warm-start problem's starting register is 0 (task.zero_prob)
    answer_cuts: float  # share of continuation chunks cut after `</think>` (task.continuation.answer_prob)
    check_both: bool  # the warm start's checks run Delethink inference too and stop on the lower accuracy
    long_start: float  # share of SFT examples that are long starts (task.long_start.prob)
    sweeps: bool  # run the budget sweeps past B that claim (b) reads
    sft_micro: int  # micro-batches per SFT step (train.micro_batches)
    sft_eval: int  # held-out problems per accuracy check of the warm start (eval.num_problems)
    steps_default: int  # RL steps per run when STEPS is not given
    rl_lr: float  # both RL runs' learning rate (docs/results/testbed.md#full_setting)
    prompts: int  # prompts per RL step, and per timed batch
    samples: int  # samples per prompt, in RL and in the timed batches
    heldout: int  # held-out problems of the trained sizes, for the evaluation at B
    heldout_n: int  # samples per held-out problem
    eval_n: int  # samples per problem of the budget sweeps
    per_group: int  # problems of the budget sweeps per group (trained sizes, past B)
    timing_repeats: int  # repeats of each timed rollout (the median counts)
    timing_to: int  # the timing stage's largest budget, in B
    timing_threads: int  # torch threads of the timing stage
    sweep_to: int = 4  # the budget sweeps' largest budget, in B
    val_size: int = 32  # validation problems of the RL runs

    def __post_init__(self) -> None:
        problems = settings_problems(self)
        if problems:
            raise ValueError(f"TestbedSettings: {'; '.join(problems)}")

    @cached_property
    def chunk_size(self) -> int:
        """C."""
        return self.budget // 4

    @cached_property
    def keep_head(self) -> int:
        """The carry-over's head: the trace's first step (the restated question)."""
        return TOKENS_PER_STEP

    @cached_property
    def keep_tail(self) -> int:
        return self.chunk_size // 2 - self.keep_head

    @cached_property
    def carry(self) -> int:
        """m = keep_head + keep_tail = C/2."""
        return self.keep_head + self.keep_tail

    def chunks_for(self, budget: int) -> int:
        """The I whose Delethink budget is `budget` with this C and m."""
        return DelethinkParams.for_budget(budget, self.chunk_size, self.keep_head, self.keep_tail).max_chunks

    @cached_property
    def max_chunks(self) -> int:
        """I: Delethink-RL's chunks, for a budget of B."""
        return self.chunks_for(self.budget)

    @cached_property
    def max_steps(self) -> int:
        """The longest RL problem: the most steps whose reference thinking fits in B."""
        return steps_for_thinking_tokens(self.budget)

    @cached_property
    def min_steps(self) -> int:
        """The shortest RL problem: a quarter of the longest."""
        return max(1, self.max_steps // 4)

    @cached_property
    def cont_max_steps(self) -> int:
        """The longest problem continuation chunks are cut from: thinking up to 4B."""
        return steps_for_thinking_tokens(4 * self.budget)

    @cached_property
    def sweep_budgets(self) -> tuple[int, ...]:
        return tuple(half * self.budget // 2 for half in SWEEP_HALVES if half <= 2 * self.sweep_to)

    @cached_property
    def sweep_chunks(self) -> tuple[int, ...]:
        """Delethink's I at each sweep budget: each chunk after the first adds C - m tokens."""
        return tuple(self.chunks_for(b) for b in self.sweep_budgets)

    @cached_property
    def timing_problems(self) -> int:
        """Problems of the timing stage (reference thinking 4B long): one per row of an RL step, since
        claim (c)'s per-token pass rolls out that many distinct problems; the step batch takes the first
        `prompts` of them, `samples` each."""
        return self.prompts * self.samples

    @cached_property
    def timing_budgets(self) -> tuple[int, ...]:
        return tuple(k * self.budget for k in TIMING_MULTIPLES if k <= self.timing_to)

    def variables(self) -> dict[str, str]:
        """Every value under its run.sh name: each field's upper-cased, and the paper's letters."""
        named = {"B": self.budget, "C": self.chunk_size, "HEAD": self.keep_head, "TAIL": self.keep_tail,
                 "M": self.carry, "I": self.max_chunks}  # fmt: skip
        declared = {f.name.upper(): getattr(self, f.name) for f in fields(self) if f.name != "budget"}
        derived = {
            "MIN_STEPS": self.min_steps,
            "MAX_STEPS": self.max_steps,
            "CONT_MAX_STEPS": self.cont_max_steps,
            "SWEEP_BUDGETS": self.sweep_budgets,
            "SWEEP_CHUNKS": self.sweep_chunks,
            "TIMING": self.timing_problems,
            "TIMING_BUDGETS": self.timing_budgets,
        }
        return {name: shell_word(value) for name, value in {**named, **declared, **derived}.items()}


def shell_word(value: object) -> str:
    """A value as run.sh uses it: a bool as 1 or 0 (for `(( ))`), a tuple comma-separated (for Hydra's
    `[...]`)."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


SHARES = ("sft_target", "cont_prob", "zero_prob", "answer_cuts", "long_start")
FLAGS = ("check_both", "sweeps")


def settings_problems(s: TestbedSettings) -> list[str]:
    """`field=value: what is wrong` for each bad value of `s`, in field order; [] when all are good."""
    problems = []
    for f in fields(s):
        value = getattr(s, f.name)
        if f.name in SHARES:
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                problems.append(f"{f.name}={value!r}: must be a number in [0, 1]")
        elif f.name in FLAGS:
            if not isinstance(value, bool):
                problems.append(f"{f.name}={value!r}: must be True or False")
        elif f.name == "rl_lr":
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                problems.append(f"rl_lr={value!r}: must be a number > 0")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{f.name}={value!r}: must be an integer >= 1")
    if not problems:
        problems += shape_problems(s)
    return problems


def shape_problems(s: TestbedSettings) -> list[str]:
    """The rules between values: B's Delethink shape, the shares of SFT examples, the RL mini-batches."""
    problems = []
    smallest = 8 * (TOKENS_PER_STEP + 1)
    if s.budget % 8 or s.budget < smallest:
        problems.append(
            f"budget={s.budget}: must be a multiple of 8 and >= {smallest}, so that C = B/4 and m = C/2 are "
            f"whole and keep_tail = C/2 - {TOKENS_PER_STEP} is at least 1"
        )
    if s.cont_prob + s.long_start > 1:
        problems.append(
            f"long_start={s.long_start}: must be <= 1 - cont_prob = {1 - s.cont_prob:g} (the shares of SFT "
            "examples that are not whole traces)"
        )
    if s.prompts % 2:
        problems.append(f"prompts={s.prompts}: must be even (each RL step updates in two mini-batches)")
    return problems


SIZES: Final = {
    "full": TestbedSettings(
        budget=512, sft_steps=1500, sft_target=0.8, sft_check_every=250, cont_prob=0.5, zero_prob=0.25,
        answer_cuts=0.0, check_both=False, long_start=0.3, sweeps=True, sft_micro=1, sft_eval=64,
        steps_default=100, rl_lr=3e-5, prompts=16, samples=8, heldout=192, heldout_n=4, eval_n=4,
        per_group=48, timing_repeats=3, timing_to=8, timing_threads=2,
    ),
    "demo": TestbedSettings(
        budget=256, sft_steps=1500, sft_target=0.5, sft_check_every=50, cont_prob=0.75, zero_prob=0.25,
        answer_cuts=0.2, check_both=True, long_start=0.1, sweeps=False, sft_micro=2, sft_eval=32,
        steps_default=20, rl_lr=1e-5, prompts=8, samples=8, heldout=192, heldout_n=4, eval_n=2,
        per_group=24, timing_repeats=3, timing_to=8, timing_threads=2,
    ),
    # seconds per stage, for CI: B and 2B alone in the sweeps and timing, one timing thread
    "smoke": TestbedSettings(
        budget=128, sft_steps=4, sft_target=0.0, sft_check_every=2, cont_prob=0.5, zero_prob=0.5,
        answer_cuts=0.2, check_both=True, long_start=0.1, sweeps=True, sft_micro=1, sft_eval=4,
        steps_default=1, rl_lr=1e-5, prompts=2, samples=2, heldout=4, heldout_n=2, eval_n=1,
        per_group=2, timing_repeats=1, timing_to=2, timing_threads=1, sweep_to=2, val_size=4,
    ),
}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", help="full, demo or smoke (run.sh's SIZE)")
    size = parser.parse_args(argv).size
    if size not in SIZES:
        print(f"SIZE must be one of {', '.join(SIZES)}, got {size!r}", file=sys.stderr)
        sys.exit(2)
    print("\n".join(f"{name}={value}" for name, value in SIZES[size].variables().items()))


if __name__ == "__main__":
    main()
