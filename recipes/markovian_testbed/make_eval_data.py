"""Evaluation problems of the Markovian testbed, apart from the RL data (another seed, checked disjoint).

    python recipes/markovian_testbed/make_eval_data.py --out DIR --budget 512 --min-steps 8 \\
        --train-data outputs/markovian_testbed/data/train.jsonl

Writes DIR/eval.jsonl: held-out problems of the RL training sizes (data source .../trained, reference
thinking <= B) and problems whose reference thinking is 1-4x B (.../past_budget; --past-per-group 0 leaves
them out, for an evaluation at B alone); and DIR/timing.jsonl:
problems whose reference thinking is 4B long, so that every budget up to 4B is filled when the timing
evaluations measure rollout time per thinking token.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from verl.data import shift_register as sr
from verl.utils.fs import atomic_write_jsonl

TRAINED = f"{sr.DATA_SOURCE}/trained"
PAST_B = f"{sr.DATA_SOURCE}/past_budget"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=int, required=True, help="B: LongCoT's training budget (tokens)")
    parser.add_argument("--min-steps", type=int, required=True, help="fewest steps of an RL training problem")
    parser.add_argument(
        "--train-data", required=True, help="the RL training rows: no eval question repeats one"
    )
    parser.add_argument("--per-group", type=int, default=48, help="problems of trained sizes and past B each")
    parser.add_argument(
        "--past-per-group", type=int, help="problems past B, if not --per-group (0: a held-out set at B only)"
    )
    parser.add_argument("--timing-problems", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    trained_max = sr.steps_for_thinking_tokens(args.budget)
    past_min, past_max = trained_max + 1, sr.steps_for_thinking_tokens(4 * args.budget)
    if not 1 <= args.min_steps <= trained_max:
        parser.error(
            f"--min-steps {args.min_steps} must be in [1, {trained_max}] (the most steps that fit B)"
        )
    with open(args.train_data) as f:
        seen = {json.loads(line)["prompt"][0]["content"] for line in f}
    rng = random.Random(args.seed)
    past_count = args.per_group if args.past_per_group is None else args.past_per_group

    def fresh(num_steps: int) -> sr.Problem:
        while (problem := sr.make_problem(rng, num_steps)).question in seen:
            pass
        seen.add(problem.question)
        return problem

    groups = [
        (TRAINED, sr.problem_sizes(args.per_group, args.min_steps, trained_max)),
        (PAST_B, sr.problem_sizes(past_count, past_min, past_max)),
    ]
    rows = [sr.row(fresh(n), 0, "eval", source) for source, sizes in groups for n in sizes]
    for index, r in enumerate(rows):
        r["extra_info"]["index"] = index
    timing = [sr.row(fresh(past_max), i, "timing", PAST_B) for i in range(args.timing_problems)]
    out = Path(args.out)
    atomic_write_jsonl(out / "eval.jsonl", rows)
    atomic_write_jsonl(out / "timing.jsonl", timing)
    print(
        f"wrote {len(rows)} eval problems (trained sizes {args.min_steps}..{trained_max} steps, past B "
        f"{past_min}..{past_max}) and {len(timing)} timing problems ({past_max} steps) to {out}"
    )


if __name__ == "__main__":
    main()
